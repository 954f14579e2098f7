"""Which files of a class folder are samples, and in what order: torchvision's ImageFolder's rules."""

import os

import pytest

from multidev.data import image_files
from multidev.errors import MultidevError


def touch(root, *names):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")  # listing never opens a file


def test_images_at_any_depth_in_the_peers_order_whatever_the_case(tmp_path):
    touch(tmp_path, "z.PNG", "a.jpg", "10.ppm", "2.pgm", "b/c.GIF", "b/a.Tiff", "a b/x.webp", "a/d/e.jpeg",
          "a/f.bmp", "a/g.tif")
    # each folder's files by name, the folders by their paths as text: the peers' sorted(os.walk(...)), where
    # ".../a b" sorts between ".../a" and ".../a/d"
    want = ["10.ppm", "2.pgm", "a.jpg", "z.PNG", "a/f.bmp", "a/g.tif", "a b/x.webp", "a/d/e.jpeg", "b/a.Tiff",
            "b/c.GIF"]
    assert [p.relative_to(tmp_path).as_posix() for p in image_files.image_files(tmp_path)] == want


def test_hidden_files_apple_double_and_other_files_are_not_samples(tmp_path):
    touch(tmp_path, "cat.png", "._cat.png", ".DS_Store", ".hidden.png", ".thumbs/cat.png", "__MACOSX/._cat.png",
          "notes.txt", "labels.csv", "photo.heic", "deep/.ipynb_checkpoints/x.png", "deep/dog.jpg")
    assert [p.relative_to(tmp_path).as_posix() for p in image_files.image_files(tmp_path)] == ["cat.png",
                                                                                              "deep/dog.jpg"]


def test_class_folders_skip_hidden_ones_and_a_folder_of_only_metadata_is_one_line(tmp_path):
    touch(tmp_path, "b/1.png", "a/sub/2.png", ".git/x.png", "__MACOSX/a/._2.png", "c/._3.png", "c/.DS_Store")
    assert [p.name for p in image_files.class_folders(tmp_path)] == ["a", "b", "c"]
    with pytest.raises(MultidevError, match=r"class folder .*c holds no images \(\.bmp, .*\) at any depth: add some "
                       r"or remove the folder"):
        image_files.listing(tmp_path, ["a", "b", "c"])
    found = image_files.listing(tmp_path, ["a", "b"])
    assert [p.name for p in found.paths] == ["2.png", "1.png"] and found.labels.tolist() == [0, 1]


def test_a_linked_folder_is_read_and_a_link_back_up_ends(tmp_path):
    touch(tmp_path, "elsewhere/x.png", "cls/y.png")
    os.symlink(tmp_path / "elsewhere", tmp_path / "cls" / "linked")
    os.symlink(tmp_path / "cls", tmp_path / "cls" / "loop")
    assert [p.relative_to(tmp_path).as_posix() for p in image_files.image_files(tmp_path / "cls")] == [
        "cls/y.png", "cls/linked/x.png"]
