"""A folder of class folders of images, the layout users already have, read with Pillow a minibatch at a time.

``root/<class>/.../*.png`` (a seeded fraction held out for testing, class by
class) or ``root/train/<class>/...`` and ``root/test/<class>/...``; which files
count and in what order is :mod:`multidev.data.image_files`, the same as
torchvision's ImageFolder. Indexing opens each file's header only (size,
colour mode), with a progress bar on large folders; pixels are decoded when a
minibatch asks for them, so a folder larger than memory trains.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from multidev.data.arrays import class_count
from multidev.data.dataset import Dataset
from multidev.data.holdout import stratified
from multidev.data.image_files import Listing, class_folders, listing
from multidev.data.rows import Rows, in_core_layout
from multidev.errors import MultidevError

COLORS = ("auto", "gray", "rgb")
#: the largest side --image-size takes (a typo such as 100000 would ask for tens of gigabytes a minibatch)
MAX_SIDE = 4096
#: Pillow modes that hold one channel
_GRAY = ("1", "L", "LA", "I", "I;16", "F")
#: a bar while indexing only where indexing takes a moment
_BAR_FROM = 2000


def parse_size(value: object) -> Optional[tuple[int, int]]:
    """``28``, ``"28"``, ``"32x48"`` (height x width) or ``(32, 48)`` as (height, width)."""
    if value is None:
        return None
    try:
        parts = [int(v) for v in value.lower().split("x")] if isinstance(value, str) else (
            [int(value)] if isinstance(value, int) else [int(v) for v in value])  # type: ignore[union-attr]
    except (TypeError, ValueError):
        parts = []
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or min(parts) < 1 or max(parts) > MAX_SIDE:
        raise MultidevError(f"--image-size takes a size of 1 to {MAX_SIDE} such as 28, or HEIGHTxWIDTH such as "
                            f"32x48, got {value!r}")
    return (parts[0], parts[1])


def size_text(size: tuple[int, int]) -> str:
    return f"{size[0]}x{size[1]}"


def _headers(paths: Sequence[Path], progress: bool) -> list[tuple[tuple[int, int], str]]:
    """Each file's (width, height) and Pillow mode, from its header; one line naming a file Pillow cannot read."""
    from PIL import Image, UnidentifiedImageError

    shown = paths
    if progress and len(paths) >= _BAR_FROM:
        from tqdm.auto import tqdm
        shown = tqdm(paths, desc="indexing images", unit="image", leave=False)
    found = []
    for path in shown:
        try:
            with Image.open(path) as image:
                found.append((image.size, image.mode))
        except (UnidentifiedImageError, OSError) as exc:
            raise MultidevError(f"cannot read the image {path} ({exc}): replace or remove it") from None
    return found


class Images(Rows):
    """Image files decoded when read: converted to gray or RGB, resized to (height, width), scaled to [0, 1]."""

    def __init__(self, paths: Sequence[Path], size: tuple[int, int], gray: bool) -> None:
        super().__init__((len(paths), 1 if gray else 3, *size))
        self.paths, self.size, self.mode = tuple(paths), size, "L" if gray else "RGB"

    def _decode(self, path: Path) -> np.ndarray:
        from PIL import Image

        try:
            with Image.open(path) as image:
                image = image.convert(self.mode)
                if image.size != (self.size[1], self.size[0]):
                    image = image.resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)
                return np.asarray(image, dtype=np.uint8)
        except OSError as exc:
            raise MultidevError(f"cannot decode the image {path} ({exc}): replace or remove it") from None

    def read(self, index: np.ndarray) -> np.ndarray:
        if not len(index):
            return np.zeros((0, *self.shape[1:]), np.float32)
        pixels = np.stack([self._decode(self.paths[int(i)]) for i in index])  # (n, H, W) gray, (n, H, W, 3) RGB
        return in_core_layout(pixels[..., None] if self.mode == "L" else pixels, "NHWC")


def _shape(listings: Sequence[Listing], headers: list, size: Optional[tuple[int, int]], color: str):
    """(height, width) and gray or not, from the settings or else the images; one line for mixed sizes."""
    paths = [p for part in listings for p in part.paths]
    if size is None:
        sizes = {s for s, _ in headers}
        if len(sizes) > 1:
            (w0, h0), other = headers[0][0], next(i for i, (s, _) in enumerate(headers) if s != headers[0][0])
            (w1, h1) = headers[other][0]
            raise MultidevError(f"the images differ in size ({paths[0]} is {h0}x{w0}, {paths[other]} {h1}x{w1}): "
                                f"give --image-size (e.g. {h0}x{w0}) to resize them all")
        width, height = headers[0][0]
        size = (height, width)
    gray = all(mode in _GRAY for _, mode in headers) if color == "auto" else color == "gray"
    return size, gray


def folder(root: str | Path, image_size: Optional[tuple[int, int]] = None, color: str = "auto", *,
           progress: bool = False, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """A data set from a folder of class folders of images (``train/`` and ``test/`` inside, or a seeded
    ``test_fraction`` held out)."""
    root = Path(root)
    if color not in COLORS:
        raise MultidevError(f"color must be one of {', '.join(COLORS)}, got {color!r}")
    split = (root / "train").is_dir() and (root / "test").is_dir()
    names = [p.name for p in class_folders(root / "train" if split else root)]
    if split:
        extra = sorted({p.name for p in class_folders(root / "test")} - set(names))
        if extra:
            raise MultidevError(f"{root / 'test' / extra[0]} is a class the training folder {root / 'train'} "
                                f"does not have: give both the same class folders")
        train, test = listing(root / "train", names), listing(root / "test", names)
    else:
        train, test = _held_out(listing(root, names), test_fraction, seed)
    headers = _headers([*train.paths, *test.paths], progress)
    size, gray = _shape([train, test], headers, image_size, color)
    name = root.resolve().name  # the folder's own name, however the path was written ("." included)
    return Dataset(name, Images(train.paths, size, gray), train.labels, Images(test.paths, size, gray),
                   test.labels, class_count(train.labels, test.labels), tuple(names))


def _held_out(whole: Listing, fraction: float, seed: int) -> tuple[Listing, Listing]:
    """The seeded held-out split of the arrays path, so a folder and its pixels as arrays hold out the same."""
    return tuple(Listing(tuple(whole.paths[i] for i in rows), whole.labels[rows])  # type: ignore[return-value]
                 for rows in stratified(whole.labels, fraction, seed))
