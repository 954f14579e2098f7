"""Folders of class folders of images: indexed once, decoded a minibatch at a time, one line for bad folders."""

import re

import numpy as np
import pytest

from multidev.data import arrays, images, loader
from multidev.errors import MultidevError
from multidev.testing.fake import FakeEngine
from multidev.testing.images import write_images
from multidev.training.api import train


def pixels(n=30, shape=(6, 6), seed=0, classes=3):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    return rng.integers(0, 256, (n, *shape), dtype=np.uint8), y


def test_train_and_test_folders_read_as_the_same_arrays(tmp_path):
    x, y = pixels()
    xt, yt = pixels(n=9, seed=1)
    write_images(tmp_path / "set", x, y, split="train")
    write_images(tmp_path / "set", xt, yt, split="test")
    data = images.folder(tmp_path / "set")
    want = arrays(x[:, None], y, xt[:, None], yt)
    order = np.argsort(y, kind="stable")  # class folders, files sorted by name
    assert data.shape == (1, 6, 6) and data.num_classes == 3 and len(data.x_train) == 30
    assert np.array_equal(data.y_train, y[order])
    assert np.array_equal(data.x_train[np.arange(30)], want.x_train[order])
    assert np.array_equal(data.x_train[np.array([7, 2])], want.x_train[order][[7, 2]])  # any rows, any order
    assert data.x_train[np.arange(30)].dtype == np.float32


def test_rgb_images_and_a_seeded_held_out_fraction(tmp_path):
    x, y = pixels(n=40, shape=(5, 7, 3))
    write_images(tmp_path / "rgb", x, y)
    data = images.folder(tmp_path / "rgb")
    assert data.shape == (3, 5, 7) and len(data.x_train) == 32 and len(data.x_test) == 8
    again = images.folder(tmp_path / "rgb")
    assert np.array_equal(again.y_test, data.y_test) and [p.name for p in again.x_test.paths] == [
        p.name for p in data.x_test.paths]
    assert not {p.name for p in data.x_train.paths} & {p.name for p in data.x_test.paths}
    gray = images.folder(tmp_path / "rgb", color="gray")
    assert gray.shape == (1, 5, 7)
    write_images(tmp_path / "jpeg", x, y, suffix=".jpg")
    photos = images.folder(tmp_path / "jpeg")
    lossy = photos.x_train[np.arange(32)] - data.x_train[np.arange(32)]
    assert photos.shape == (3, 5, 7) and np.abs(lossy).mean() < 0.2  # JPEG: near, not equal


def test_image_size_resizes_mixed_sizes_and_without_it_they_are_one_line(tmp_path):
    x, y = pixels(n=6, shape=(8, 8))
    write_images(tmp_path / "mixed", x, y)
    small, _ = pixels(n=1, shape=(4, 5))
    from PIL import Image
    Image.fromarray(small[0]).save(tmp_path / "mixed" / "class1" / "odd.png")
    with pytest.raises(MultidevError, match=re.escape("the images differ in size") + r".*odd\.png 4x5.*"
                       r"give --image-size"):
        images.folder(tmp_path / "mixed")
    data = images.folder(tmp_path / "mixed", image_size=(8, 8))
    assert data.x_train[np.arange(len(data.x_train))].shape[1:] == (1, 8, 8)
    assert images.folder(tmp_path / "mixed", image_size=(3, 5)).shape == (1, 3, 5)


def test_bad_folders_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MultidevError, match="holds no class folders"):
        images.folder(tmp_path / "empty")
    x, y = pixels(n=6)
    write_images(tmp_path / "set", x, y)
    (tmp_path / "set" / "class9").mkdir()
    with pytest.raises(MultidevError, match=r"class folder .*class9 holds no images"):
        images.folder(tmp_path / "set")
    (tmp_path / "set" / "class9").rmdir()
    (tmp_path / "set" / "class2" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(MultidevError, match=r"cannot read the image .*broken\.png .*replace or remove it"):
        images.folder(tmp_path / "set")


def test_a_folder_trains_as_its_arrays_do(tmp_path):
    x, y = pixels(n=40, shape=(8, 8))
    xt, yt = pixels(n=10, shape=(8, 8), seed=1)
    write_images(tmp_path / "set", x, y, split="train")
    write_images(tmp_path / "set", xt, yt, split="test")
    order = np.argsort(y, kind="stable")
    same = arrays(x[order][:, None], y[order], xt[np.argsort(yt, kind="stable")][:, None], np.sort(yt))
    kwargs = dict(model="mlp", batch_size=8, epochs=2, devices=2, dtype="float64", augment="flip",
                  normalize="auto")
    a = train(FakeEngine(), dataset=str(tmp_path / "set"), checkpoint=tmp_path / "a.npz", **kwargs)
    b = train(FakeEngine(), dataset=same, checkpoint=tmp_path / "b.npz", **kwargs)
    from multidev.outputs import checkpoint as ckpt
    sa, sb = ckpt.load(tmp_path / "a.npz")[1], ckpt.load(tmp_path / "b.npz")[1]
    assert all(np.array_equal(sa[n], sb[n]) for n in sa)
    assert a.epochs[-1].test_acc == b.epochs[-1].test_acc and a.dataset == "set"


def test_a_large_folder_shows_a_bar_while_indexing(tmp_path, monkeypatch, capsys):
    x, y = pixels(n=12)
    write_images(tmp_path / "set", x, y)
    monkeypatch.setattr(images, "_BAR_FROM", 10)
    images.folder(tmp_path / "set", progress=True)
    assert "indexing images" in capsys.readouterr().err


# 18 gray images of 7 classes, uneven, nested, in every format the peers read, in the order they index them
TREE = [("ant", "1.png"), ("ant", "2.PNG"), ("ant", "more/3.ppm"), ("ant", "more/deeper/4.pgm"),
        ("bee", "1.gif"), ("bee", "2.bmp"), ("bee", "3.tif"),
        ("cat", "a.TIFF"), ("cat", "b.webp"), ("cat", "c.Gif"),
        ("dog", "only/1.png"), ("dog", "only/2.pgm"),  # a class whose images all sit one level down
        ("eel", "x.ppm"), ("eel", "y.png"), ("fox", "1.png"), ("fox", "sub/2.bmp"), ("gnu", "1.pgm"), ("gnu", "2.gif")]
JUNK = ["ant/._1.png", "ant/.DS_Store", "bee/.thumbs/9.png", "cat/notes.txt", "__MACOSX/ant/._1.png", ".cache/1.png"]


def uneven_folder(root):
    """TREE's images under ``root`` (and JUNK that no reader takes for a sample); their pixels and labels."""
    from PIL import Image

    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (len(TREE), 6, 6), dtype=np.uint8)
    names = sorted({c for c, _ in TREE})
    for (cls, name), image in zip(TREE, pixels):
        path = root / cls / name
        path.parent.mkdir(parents=True, exist_ok=True)
        rgb = path.suffix in (".ppm", ".webp")  # a colour file of gray pixels, read as gray with color="gray"
        Image.fromarray(np.stack([image] * 3, -1) if rgb else image).save(path, lossless=True)  # WebP: lossless
    for name in JUNK:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"\0not an image")
    return pixels, np.array([names.index(c) for c, _ in TREE]), names


def test_a_nested_uneven_folder_yields_the_batches_of_its_pixels_as_arrays(tmp_path):
    pixels, y, names = uneven_folder(tmp_path / "set")
    data = images.folder(tmp_path / "set", color="gray")
    same = arrays(pixels[:, None], y)
    assert data.classes == tuple(names) and data.num_classes == same.num_classes == 7
    assert len(data.x_train) + len(data.x_test) == 18 and data.shape == same.shape == (1, 6, 6)
    assert tmp_path / "set" / "ant" / "more" / "deeper" / "4.pgm" in data.x_train.paths + data.x_test.paths
    assert np.array_equal(data.y_train, same.y_train) and np.array_equal(data.y_test, same.y_test)
    assert set(data.y_train) == set(range(7)) and len(set(data.y_test)) == len(data.y_test) == 4
    for epoch in range(2):
        for index in loader.batches(loader.epoch_order(len(data.x_train), 0, epoch), 5):
            assert np.array_equal(data.x_train[index], same.x_train[index])
            assert np.array_equal(data.y_train[index], same.y_train[index])
    assert np.array_equal(data.x_test[np.arange(4)], same.x_test)


def test_every_class_trains_and_is_tested_where_the_folder_has_enough(tmp_path):
    pixels, y, _ = uneven_folder(tmp_path / "set")
    data = images.folder(tmp_path / "set", color="gray", test_fraction=0.4)  # 7 held out: one of each class
    assert sorted(data.y_test.tolist()) == list(range(7)) and set(data.y_train) == set(range(7))
    assert np.array_equal(data.y_test, arrays(pixels[:, None], y, test_fraction=0.4).y_test)
    again = images.folder(tmp_path / "set", color="gray", test_fraction=0.4)
    other = images.folder(tmp_path / "set", color="gray", test_fraction=0.4, seed=1)
    assert again.x_test.paths == data.x_test.paths != other.x_test.paths


def test_a_folder_of_one_image_a_class_cannot_spare_a_test_set(tmp_path):
    x, y = pixels(n=4, classes=4)
    write_images(tmp_path / "set", x, y)
    (tmp_path / "set" / "class0" / "._00000.png").write_bytes(b"\0")  # AppleDouble: not a second image
    with pytest.raises(MultidevError, match=r"^4 training samples of 4 classes cannot spare a test set and keep "
                       r"every class in training: give test samples or more data$"):
        images.folder(tmp_path / "set")
