"""A Hugging Face data set saved with ``save_to_disk``, read a minibatch at a time.

``datasets.Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` write Arrow
files that ``load_from_disk`` memory-maps, so opening a set larger than memory
costs nothing; :class:`Column` asks the set only for the rows of each
minibatch and turns them into the core's float32 layout as they are read:
images (the ``Image`` feature, decoded by Pillow) to (C, H, W) scaled to
[0, 1], stored arrays (NCHW, or NHWC with ``layout="NHWC"``) and feature
vectors to float32. A ``DatasetDict`` gives its ``train`` split and its
``test`` (else ``validation``) split; a lone ``Dataset`` holds out a seeded
fraction exactly like :func:`multidev.data.arrays.arrays`, so every engine and
run sees the same test set. Labels are read whole (one number a row) and
checked like arrays' labels; bad data is one line.

``datasets`` is imported only here, when such a set is loaded: the core needs
it no more than it needs any other reader's package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from multidev.data.arrays import LAYOUTS, check_kind, class_count, labels, sample_shape
from multidev.data.dataset import Dataset
from multidev.data.holdout import stratified
from multidev.data.rows import Rows, floats, in_core_layout
from multidev.errors import MultidevError, first_line

#: Pillow modes that hold one channel, read as they are (8-bit gray is scaled to [0, 1], deeper gray kept as numbers)
_GRAY = ("L", "I", "I;16", "I;16B", "I;16L", "F")
#: one-channel modes converted to 8-bit gray first
_TO_GRAY = ("1", "LA", "La")


def _datasets() -> Any:
    """The ``datasets`` package, or one line saying how to get it (it is an optional reader's package)."""
    try:
        import datasets
    except ImportError:
        raise MultidevError("reading a Hugging Face data set needs the datasets package: pip install datasets") \
            from None
    return datasets


def is_saved_dataset(path: str | Path) -> bool:
    """Whether ``path`` is a folder ``save_to_disk`` wrote, so ``--dataset`` can tell it from other folders."""
    folder = Path(path)
    if not folder.is_dir():
        return False
    return (folder / "dataset_dict.json").is_file() or (
        (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file())


def _gray(mode: str) -> bool:
    return mode in _GRAY or mode in _TO_GRAY


def _pixels(image: Any, gray: bool) -> np.ndarray:
    """One image as float32 (H, W, C): uint8 scaled to [0, 1]; gray put in colour sets as RGB (no loss)."""
    if gray:
        image = image.convert("L") if image.mode in _TO_GRAY else image
    elif image.mode != "RGB":
        image = image.convert("RGB")
    values = np.asarray(image)
    values = floats(values)
    return values[:, :, None] if values.ndim == 2 else values


def _arrow_values(column: Any, rows: np.ndarray, what: str) -> np.ndarray:
    """Arrow (nested) lists of numbers as one (k, *sample) array of their stored dtype.

    HF's numpy format turns every integer to int64 (uint8 images would no longer be scaled) and walks nested lists
    in Python (about 0.8 s for 256 samples of 28x28); flattening the Arrow lists keeps the dtype and takes ~1 ms.
    """
    import pyarrow as pa

    values = column.combine_chunks()
    shape = [len(values)]
    while True:
        if isinstance(values, pa.ExtensionArray):  # Array2D..Array5D: nested lists underneath
            values = values.storage
        if not (pa.types.is_list(values.type) or pa.types.is_large_list(values.type)
                or pa.types.is_fixed_size_list(values.type)):
            break
        if values.null_count:
            raise MultidevError(f"{what} holds a missing sample: drop or fill the empty rows")
        lengths = np.asarray(values.value_lengths())
        if (lengths != lengths[0]).any():
            row = rows[int(np.argmax(lengths != lengths[0])) // int(np.prod(shape[1:], dtype=np.int64))]
            raise MultidevError(f"{what} holds samples of different shapes (row {row} differs from row "
                                f"{rows[0]}): give every sample one shape")
        shape.append(int(lengths[0]))
        values = values.flatten()
    if values.null_count:
        raise MultidevError(f"{what} holds missing values: drop or fill them")
    return values.to_numpy(zero_copy_only=False).reshape(shape)


class Column(Rows):
    """One column of a split, read a minibatch at a time: the rows asked for, and only those, are read and decoded.

    ``rows`` numbers the split's stored rows this set uses (all, or the held-out ones); errors name stored rows,
    the ones the user sees in ``datasets``. The sample shape (and gray or colour) is stored row ``first``'s (by
    default ``rows[0]``), or ``like``'s, so a held-out test set is the shape of the set's first sample too.
    """

    def __init__(self, split: Any, column: str, rows: np.ndarray, layout: str, what: str, *,
                 first: int | None = None, like: Column | None = None) -> None:
        datasets = _datasets()
        self.split, self.column, self.rows, self.layout = split.select_columns([column]), column, rows, layout
        self.what, self.image = what, isinstance(split.features[column], datasets.Image)
        if like is not None:
            self._adopt(like)
            return
        first = int(rows[0]) if first is None else first
        self.origin, self.gray, self.size, self.sample = f"row {first}", True, (0, 0), ()
        if self.image:
            image = self._fetch(np.array([first]))[0]
            if image is None:
                raise MultidevError(f"{what} has no image in row {first}: drop or fill the empty rows")
            self.gray, self.size = _gray(image.mode), (image.height, image.width)
            super().__init__((len(rows), 1 if self.gray else 3, *self.size))
        else:
            sample = self._stored(np.array([first]))
            check_kind(sample.dtype, what)
            self.sample = sample.shape[1:]
            super().__init__((len(rows), *sample_shape((len(rows), *self.sample), layout, what)))

    def _adopt(self, like: Column) -> None:
        """The training set's sample shape for the test set, so both are one shape; its first sample checked now."""
        if like.image != self.image:
            raise MultidevError(f"{self.what} holds {'images' if self.image else 'arrays'} but {like.what} "
                                f"{'images' if like.image else 'arrays'}: give both splits one kind of sample")
        self.gray, self.size, self.sample = like.gray, like.size, like.sample
        self.origin = like.origin if like.what == self.what else f"{like.what} {like.origin}"
        super().__init__((len(self.rows), *like.shape[1:]))
        self.read(np.zeros(1, np.int64))

    def _fetch(self, stored: np.ndarray) -> list:
        """The images of ``stored`` rows, in that order: HF gives a list of decoded Pillow images for a list."""
        return self.split[[int(i) for i in stored]][self.column]

    def _stored(self, stored: np.ndarray) -> np.ndarray:
        table = self.split.with_format("arrow")[[int(i) for i in stored]]
        return _arrow_values(table.column(self.column), stored, self.what)

    def _images(self, stored: np.ndarray) -> np.ndarray:
        found = []
        for row, image in zip(stored, self._fetch(stored)):
            if image is None:
                raise MultidevError(f"{self.what} has no image in row {row}: drop or fill the empty rows")
            if (image.height, image.width) != self.size:
                raise MultidevError(f"{self.what} row {row} is a {image.height}x{image.width} image, "
                                    f"{self.origin} {self.size[0]}x{self.size[1]}: resize the set to one size "
                                    f"(Dataset.map with image.resize) and save it again")
            if self.gray and not _gray(image.mode):
                raise MultidevError(f"{self.what} row {row} is a colour ({image.mode}) image in a gray set: convert "
                                    f"the set to one mode (cast_column('{self.column}', Image(mode='RGB'))) and "
                                    f"save it again")
            found.append(_pixels(image, self.gray))
        return np.transpose(np.stack(found), (0, 3, 1, 2))

    def read(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64)
        if len(index) == 0:
            return np.zeros((0, *self.shape[1:]), np.float32)
        if index.min() < -len(self) or index.max() >= len(self):
            raise IndexError(f"{self.what}: rows {index.min()}..{index.max()} asked of {len(self)}")
        stored = self.rows[index]
        if self.image:
            return np.ascontiguousarray(self._images(stored))
        x = self._stored(stored)
        if x.shape[1:] != self.sample:
            raise MultidevError(f"{self.what} row {stored[0]} holds a sample of shape {x.shape[1:]}, "
                                f"{self.origin} {self.sample}: give every sample one shape")
        return in_core_layout(x, self.layout)


def _lacking(split: Any, name: str, kind: str, where: str) -> None:
    if name not in split.column_names:
        raise MultidevError(f"{where} has no column {name!r} (its columns: {', '.join(split.column_names)}): name "
                            f"the {kind} column with --{kind}-column")


def _label_values(split: Any, column: str, what: str) -> np.ndarray:
    """The whole label column (one small number a row) as int64, checked like arrays' labels."""
    values = _arrow_values(split.with_format("arrow")[column], np.arange(len(split)), what)
    if values.dtype == object or values.dtype.kind in "USO":
        raise MultidevError(f"{what} holds text labels: number the classes (Dataset.class_encode_column"
                            f"('{column}')) and save the set again")
    return labels(values, len(split), what)


def _splits(loaded: Any, path: Path, fraction: float, seed: int, label_column: str) \
        -> list[tuple[Any, np.ndarray, str]]:
    """(split, its rows, its name) for training and for testing: the dict's test split, else a held-out fraction,
    class by class as every reader holds one out."""
    datasets = _datasets()
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise MultidevError(f"{path} holds the splits {', '.join(loaded)} but no 'train' split: save the "
                                f"training samples as 'train'")
        train = loaded["train"]
        test_name = "test" if "test" in loaded else "validation" if "validation" in loaded else None
        if test_name is not None:
            test = loaded[test_name]
            return [(train, np.arange(len(train)), "the train split"),
                    (test, np.arange(len(test)), f"the {test_name} split")]
        where = "the train split"
    else:
        train, where = loaded, "the data set"
    _lacking(train, label_column, "label", where)
    rows, held = stratified(_label_values(train, label_column, f"{where}'s {label_column!r} column"), fraction, seed)
    return [(train, rows, where), (train, held, where)]


def _classes(train: Any, label_column: str, y: np.ndarray, y_test: np.ndarray) -> int:
    """C: a ClassLabel's class count where the set has one (a class may be absent from a split), else max + 1."""
    feature = train.features[label_column]
    if not isinstance(feature, _datasets().ClassLabel):
        return class_count(y, y_test)
    high = int(max(y.max(initial=0), y_test.max(initial=0)))
    if high >= feature.num_classes:
        raise MultidevError(f"the '{label_column}' column holds the label {high} but its ClassLabel has "
                            f"{feature.num_classes} classes: labels must be whole numbers 0..C-1")
    return int(feature.num_classes)


def _open(path: Path) -> Any:
    datasets = _datasets()
    if not path.exists():
        raise MultidevError(f"data folder {path} does not exist")
    if not is_saved_dataset(path):
        raise MultidevError(f"{path} is not a folder datasets' save_to_disk wrote (no dataset_dict.json, nor "
                            f"state.json and dataset_info.json)")
    try:
        return datasets.load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001 - a damaged folder fails in many ways; each is one line
        raise MultidevError(f"cannot read the saved data set {path} ({first_line(exc)})") from None


def load(path: str | Path, *, image_column: str = "image", label_column: str = "label", layout: str = "NCHW",
         test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """A data set from a folder ``save_to_disk`` wrote; samples are read a minibatch at a time, labels at once.

    ``image_column`` holds images or arrays (NCHW, or NHWC with ``layout="NHWC"``; images are always read as
    (C, H, W)) or feature vectors; ``label_column`` the class numbers.
    """
    if layout not in LAYOUTS:
        raise MultidevError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    path = Path(path)
    (train, rows, where), (test, held, test_where) = _splits(_open(path), path, test_fraction, seed, label_column)
    for split, place in ((train, where), (test, test_where)):
        _lacking(split, image_column, "image", place)
        _lacking(split, label_column, "label", place)
    if len(rows) == 0 or len(held) == 0:
        raise MultidevError(f"{where if len(rows) == 0 else test_where} is empty: give it at least one sample")
    whole = _label_values(train, label_column, f"{where}'s {label_column!r} column")
    y, y_test = whole[rows], (whole if test is train else
                              _label_values(test, label_column, f"{test_where}'s {label_column!r} column"))[held]
    x = Column(train, image_column, rows, layout, f"{where}'s {image_column!r} column", first=0)
    x_test = Column(test, image_column, held, layout, f"{test_where}'s {image_column!r} column", like=x)
    return Dataset(path.resolve().name, x, y, x_test, y_test, _classes(train, label_column, y, y_test))
