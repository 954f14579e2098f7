"""multidev.data.huggingface: sets saved with save_to_disk, read a minibatch at a time, bad data as one line."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from multidev.data import huggingface
from multidev.errors import MultidevError

datasets = pytest.importorskip("datasets")
Image = pytest.importorskip("PIL.Image")


def _pictures(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, (n, *shape), dtype=np.uint8)


@pytest.fixture(scope="module")
def image_dict(tmp_path_factory):
    """A DatasetDict of gray PNGs, train and test, with a ClassLabel of 4 classes (one never used)."""
    rng = np.random.default_rng(1)
    pixels = {"train": _pictures(rng, 12, (6, 5)), "test": _pictures(rng, 4, (6, 5))}
    ys = {"train": np.arange(12) % 3, "test": np.array([0, 1, 2, 1])}  # class 3 is never used: ClassLabel says 4
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=4)})
    splits = {name: datasets.Dataset.from_dict({"image": [Image.fromarray(p) for p in pixels[name]],
                                                "label": ys[name].tolist()}, features=features) for name in pixels}
    path = tmp_path_factory.mktemp("hf") / "gray"
    datasets.DatasetDict(splits).save_to_disk(str(path))
    return path, pixels, ys


def _save(path, columns: dict, features=None) -> str:
    datasets.Dataset.from_dict(columns, features=features).save_to_disk(str(path))
    return str(path)


def test_a_dict_of_png_images_reads_train_and_test_in_nchw(image_dict):
    path, pixels, ys = image_dict
    assert huggingface.is_saved_dataset(path)
    data = huggingface.load(path)
    assert data.name == "gray" and data.num_classes == 4 and data.shape == (1, 6, 5)
    assert (len(data.x_train), len(data.x_test)) == (12, 4)
    np.testing.assert_array_equal(data.y_train, ys["train"])
    assert data.y_train.dtype == np.int64
    np.testing.assert_array_equal(data.y_test, ys["test"])
    whole = np.asarray(data.x_train)
    assert whole.dtype == np.float32 and whole.shape == (12, 1, 6, 5)
    np.testing.assert_array_equal(whole, pixels["train"][:, None].astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(np.asarray(data.x_test), pixels["test"][:, None] / np.float32(255))


def test_rows_come_in_the_order_asked_and_one_row_drops_the_batch_axis(image_dict):
    path, pixels, _ = image_dict
    x = huggingface.load(path).x_train
    expected = pixels["train"][:, None].astype(np.float32) / np.float32(255)
    np.testing.assert_array_equal(x[np.array([5, 1, 3])], expected[[5, 1, 3]])
    np.testing.assert_array_equal(x[4], expected[4])
    assert x[np.array([], dtype=np.int64)].shape == (0, 1, 6, 5)


def test_rgb_images_come_channels_first(tmp_path):
    rng = np.random.default_rng(2)
    pixels = _pictures(rng, 6, (4, 3, 3))
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    path = _save(tmp_path / "rgb", {"image": [Image.fromarray(p) for p in pixels], "label": [0, 1, 0, 1, 0, 1]},
                 features)
    data = huggingface.load(path, test_fraction=0.5)
    assert data.shape == (3, 4, 3) and data.num_classes == 2
    rows = np.concatenate([np.asarray(data.x_train), np.asarray(data.x_test)])
    assert sorted(rows.sum(axis=(1, 2, 3)).round(4).tolist()) == sorted(
        (pixels.astype(np.float32) / 255).transpose(0, 3, 1, 2).sum(axis=(1, 2, 3)).round(4).tolist())


def test_a_lone_set_of_nhwc_arrays_holds_out_a_seeded_disjoint_test_set(tmp_path):
    rng = np.random.default_rng(3)
    x = _pictures(rng, 20, (4, 3, 2))
    y = np.arange(20) % 5
    path = _save(tmp_path / "arrays", {"pixels": x, "target": y})
    kwargs = {"image_column": "pixels", "label_column": "target", "layout": "NHWC", "test_fraction": 0.25}
    data = huggingface.load(path, seed=7, **kwargs)
    again, other = huggingface.load(path, seed=7, **kwargs), huggingface.load(path, seed=8, **kwargs)
    assert data.shape == (2, 4, 3) and data.num_classes == 5 and (len(data.x_train), len(data.x_test)) == (15, 5)
    expected = x.astype(np.float32).transpose(0, 3, 1, 2) / np.float32(255)
    train, test = data.x_train.rows, data.x_test.rows
    assert not set(train.tolist()) & set(test.tolist()) and len(set(train.tolist()) | set(test.tolist())) == 20
    np.testing.assert_array_equal(test, again.x_test.rows)
    assert not np.array_equal(test, other.x_test.rows)
    np.testing.assert_array_equal(np.asarray(data.x_test), expected[test])
    np.testing.assert_array_equal(data.x_train[np.array([5, 1, 3])], expected[train[[5, 1, 3]]])
    np.testing.assert_array_equal(data.y_test, y[test])


def test_feature_vectors_and_a_dict_without_test_split(tmp_path):
    x = np.arange(30, dtype=np.float64).reshape(10, 3) / 7
    path = tmp_path / "features"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"image": x, "label": np.arange(10) % 2})}) \
        .save_to_disk(str(path))
    data = huggingface.load(path, test_fraction=0.2, seed=0)
    assert data.shape == (3,) and (len(data.x_train), len(data.x_test)) == (8, 2) and data.num_classes == 2
    np.testing.assert_allclose(np.asarray(data.x_test), x[data.x_test.rows].astype(np.float32))


def test_validation_split_is_the_test_set_when_there_is_no_test_split(tmp_path):
    def make(n: int):
        return datasets.Dataset.from_dict({"image": np.ones((n, 2), np.float32), "label": [0, 1] * (n // 2)})

    path = tmp_path / "val"
    datasets.DatasetDict({"train": make(6), "validation": make(4)}).save_to_disk(str(path))
    data = huggingface.load(path)
    assert (len(data.x_train), len(data.x_test)) == (6, 4)


def _one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


def test_a_missing_column_names_the_columns_there_are_and_the_flag(image_dict):
    path, _, _ = image_dict
    with pytest.raises(MultidevError) as excinfo:
        huggingface.load(path, image_column="img")
    assert all(part in _one_line(excinfo) for part in ("'img'", "image, label", "--image-column"))
    with pytest.raises(MultidevError) as excinfo:
        huggingface.load(path, label_column="labels")
    assert "--label-column" in _one_line(excinfo)


@pytest.mark.parametrize("labels, words", [([0.5, 1.0, 0.0, 1.0], "float"), ([0, -1, 1, 0], "label -1"),
                                           (["a", "b", "a", "b"], "class_encode_column"),
                                           ([0, 2, 0, 2], "never hold class 1")])
def test_bad_labels_are_one_line(tmp_path, labels, words):
    path = _save(tmp_path / "bad", {"image": np.zeros((4, 2), np.float32), "label": labels})
    with pytest.raises(MultidevError) as excinfo:
        huggingface.load(path, test_fraction=0.25)
    assert words in _one_line(excinfo)


def test_class_label_gives_the_class_count_and_bounds_the_labels(tmp_path):
    features = datasets.Features({"label": datasets.ClassLabel(num_classes=3)})
    fine = datasets.Dataset.from_dict({"image": [[0.0]] * 4, "label": [0, 1, 0, 1]}).cast_column("label",
                                                                                            features["label"])
    fine.save_to_disk(str(tmp_path / "fine"))
    assert huggingface.load(tmp_path / "fine", test_fraction=0.25).num_classes == 3  # class 2 absent: still 3
    past = datasets.Dataset.from_dict({"image": [[0.0]] * 4, "label": [0, 1, 5, 1]})  # cast does not check
    past.cast_column("label", datasets.ClassLabel(num_classes=2)).save_to_disk(str(tmp_path / "past"))
    with pytest.raises(MultidevError) as excinfo:
        huggingface.load(tmp_path / "past", test_fraction=0.25)
    assert "label 5" in _one_line(excinfo) and "2 classes" in str(excinfo.value)


def test_images_of_another_size_name_the_row(tmp_path):
    images = [Image.fromarray(np.zeros((4, 4), np.uint8))] * 5 + [Image.fromarray(np.zeros((5, 4), np.uint8))]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    path = _save(tmp_path / "sizes", {"image": images, "label": [0, 1] * 3}, features)
    data = huggingface.load(path, test_fraction=0.5, seed=0)
    x = data.x_train if 5 in data.x_train.rows else data.x_test
    with pytest.raises(MultidevError) as excinfo:
        np.asarray(x)
    assert all(part in _one_line(excinfo) for part in ("row 5", "5x4", "4x4", "resize"))


def test_the_first_image_sets_gray_or_colour_for_both_splits(tmp_path):
    gray, colour = Image.fromarray(np.full((3, 3), 51, np.uint8)), Image.fromarray(np.full((3, 3, 3), 102, np.uint8))
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    path = _save(tmp_path / "colour", {"image": [colour, gray, colour, gray], "label": [0] * 4}, features)
    data = huggingface.load(path, test_fraction=0.5)  # gray rows join a colour set as RGB, whichever split they land in
    assert data.shape == (3, 3, 3)
    assert sorted(np.unique(np.concatenate([np.asarray(data.x_train), np.asarray(data.x_test)])).tolist()) == \
        pytest.approx([0.2, 0.4])
    path = _save(tmp_path / "gray", {"image": [gray, gray, colour, gray], "label": [0] * 4}, features)
    with pytest.raises(MultidevError) as excinfo:  # at load where row 2 is a test set's first, else at read
        data = huggingface.load(path, test_fraction=0.25)
        np.asarray(data.x_train), np.asarray(data.x_test)
    assert all(part in _one_line(excinfo) for part in ("row 2", "colour", "Image(mode='RGB')"))


def test_a_test_split_of_another_size_is_one_line_at_load(tmp_path):
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    make = lambda size: datasets.Dataset.from_dict(
        {"image": [Image.fromarray(np.zeros(size, np.uint8))] * 2, "label": [0, 0]}, features=features)
    datasets.DatasetDict({"train": make((4, 4)), "test": make((5, 5))}).save_to_disk(str(tmp_path / "sizes"))
    with pytest.raises(MultidevError) as excinfo:
        huggingface.load(tmp_path / "sizes")
    assert all(part in _one_line(excinfo) for part in ("test split", "5x5", "train split", "4x4", "resize"))


def test_not_a_saved_set_and_no_datasets_package_are_one_line(tmp_path, monkeypatch, image_dict):
    assert not huggingface.is_saved_dataset(tmp_path) and not huggingface.is_saved_dataset(tmp_path / "nothing")
    with pytest.raises(MultidevError) as excinfo:
        huggingface.load(tmp_path)
    assert "save_to_disk" in _one_line(excinfo)
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MultidevError) as excinfo:
        huggingface.load(image_dict[0])
    assert _one_line(excinfo) == ("reading a Hugging Face data set needs the datasets package: "
                                  "pip install datasets")



def test_a_run_trains_on_a_saved_set_by_its_columns(tmp_path):
    from multidev.testing.fake import FakeEngine
    from multidev.training.api import train

    rng = np.random.default_rng(2)
    path = _save(tmp_path / "renamed", {"picture": [Image.fromarray(p) for p in _pictures(rng, 20, (6, 6))],
                                        "kind": (np.arange(20) % 2).tolist()})
    result = train(FakeEngine(), dataset=path, image_column="picture", label_column="kind", epochs=1, batch_size=8,
                   model="mlp", augment="flip", normalize="auto")
    assert result.dataset == "renamed" and result.test_total == 4  # a seeded fifth held out


def test_a_set_without_test_split_holds_out_class_by_class_as_arrays_do(tmp_path):
    """The one hold-out rule of every reader: a saved set and the same arrays hold out the same rows."""
    from multidev.data import arrays

    y = np.repeat(np.arange(7), [4, 3, 3, 2, 2, 2, 2])
    x = np.random.default_rng(1).integers(0, 256, (18, 1, 4, 4), dtype=np.uint8)
    path = tmp_path / "uneven"
    datasets.Dataset.from_dict({"image": x.astype(np.float32) / 255, "label": y}).save_to_disk(str(path))
    data = huggingface.load(path, test_fraction=0.4, seed=5)
    assert sorted(data.y_test.tolist()) == list(range(7)) and set(data.y_train.tolist()) == set(range(7))
    same = arrays(x, y, test_fraction=0.4, seed=5)
    assert np.array_equal(data.y_test, same.y_test)
    np.testing.assert_allclose(np.asarray(data.x_test), np.asarray(same.x_test), rtol=1e-6)
