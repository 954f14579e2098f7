"""Folders of image files written by tests: the layout users bring (``root/<class>/<n>.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np


def write_images(root: str | Path, pixels: np.ndarray, labels: np.ndarray, *, split: Optional[str] = None,
                 suffix: str = ".png", names: Optional[list[str]] = None) -> Path:
    """``pixels`` (N, H, W) gray or (N, H, W, 3) RGB uint8 saved one file per sample under
    ``root[/split]/<class name>/``; class folders named ``names`` (default class0, class1, ...)."""
    from PIL import Image

    folder = Path(root) / split if split else Path(root)
    for i, (image, label) in enumerate(zip(pixels, labels)):
        target = folder / (names[label] if names else f"class{label}")
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.asarray(image, np.uint8)).save(target / f"{i:05d}{suffix}")
    return Path(root)


def as_uint8_images(x: np.ndarray) -> np.ndarray:
    """A float set in [0, 1] (N, C, H, W) as the uint8 pixels (N, H, W) or (N, H, W, 3) image files hold."""
    pixels = np.clip(np.rint(np.asarray(x) * 255), 0, 255).astype(np.uint8)
    return pixels[:, 0] if pixels.shape[1] == 1 else np.transpose(pixels, (0, 2, 3, 1))
