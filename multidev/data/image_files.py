"""Which files of a folder of class folders are samples, found as torchvision's ImageFolder and Keras's
``image_dataset_from_directory`` find them, so a folder a user already has reads the same here.

Classes are the class folders' names in sorted order. A class's images are
every image file under its folder at any depth, in the peers' order: folder by
folder sorted by path, each folder's files by name. Hidden files and folders
(``.DS_Store``, ``.ipynb_checkpoints``, macOS's AppleDouble ``._photo.jpg``) and
``__MACOSX`` folders are never samples, where torchvision would fail on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from multidev.errors import MultidevError

#: torchvision's IMG_EXTENSIONS and Keras's formats together, matched whatever the case
EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".pgm", ".png", ".ppm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class Listing:
    """The image files of one split with their class numbers."""

    paths: tuple[Path, ...]
    labels: np.ndarray


def skipped(name: str) -> bool:
    """A hidden file or folder, or a zip's macOS metadata folder: never a sample, often not an image at all."""
    return name.startswith(".") or name == "__MACOSX"


def class_folders(root: Path) -> list[Path]:
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not skipped(p.name))
    if not folders:
        raise MultidevError(f"{root} holds no class folders: put each class's images in a folder of its own, "
                            f"{root}/<class>/<image>.png")
    return folders


def image_files(folder: Path) -> list[Path]:
    """The images under ``folder`` at any depth, in the peers' order; linked folders followed, never back up."""
    steps, seen = [], set()
    for where, subfolders, names in os.walk(folder, followlinks=True):
        seen.add(os.path.realpath(where))  # a link back up would walk forever
        subfolders[:] = [d for d in subfolders if not skipped(d)
                         and os.path.realpath(os.path.join(where, d)) not in seen]
        steps.append((where, sorted(n for n in names if not skipped(n) and n.lower().endswith(EXTENSIONS))))
    return [Path(where, n) for where, names in sorted(steps) for n in names]


def listing(root: Path, names: Sequence[str]) -> Listing:
    """Every class's images under ``root``, class by class; a missing class folder has none, an empty one is
    one line."""
    paths, labels = [], []
    for number, name in enumerate(names):
        folder = root / name
        files = image_files(folder) if folder.is_dir() else []
        if not files and folder.is_dir():
            raise MultidevError(f"class folder {folder} holds no images ({', '.join(EXTENSIONS)}) at any depth: "
                                f"add some or remove the folder")
        paths += files
        labels += [number] * len(files)
    return Listing(tuple(paths), np.asarray(labels, dtype=np.int64))
