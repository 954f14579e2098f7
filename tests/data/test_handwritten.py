"""The embedded digits read without scikit-learn are scikit-learn's own: its images, its seeded split."""

import subprocess
import sys

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from multidev.data import digits
from multidev.data import handwritten


def sklearn_digits(test_fraction: float):
    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None]
    return train_test_split(x, bunch.target, test_size=test_fraction, random_state=0, stratify=bunch.target)


def test_the_kept_split_is_the_one_scikit_learn_draws():
    x_tr, x_te, y_tr, y_te = sklearn_digits(0.2)
    ours = digits()
    for mine, theirs in ((ours.x_train, x_tr), (ours.x_test, x_te), (ours.y_train, y_tr), (ours.y_test, y_te)):
        np.testing.assert_array_equal(mine, theirs)


def test_another_fraction_is_drawn_by_scikit_learn():
    x_tr, x_te, _, y_te = sklearn_digits(0.3)
    ours = digits(test_fraction=0.3)
    np.testing.assert_array_equal(ours.x_test, x_te)
    np.testing.assert_array_equal(ours.y_test, y_te)
    assert len(ours.x_train) == len(x_tr)


def test_the_file_is_read_as_load_digits_reads_it(monkeypatch):
    images, labels = handwritten.images_and_labels()
    monkeypatch.setattr(handwritten, "csv_path", lambda: None)  # the fallback: load_digits itself
    again, again_labels = handwritten.images_and_labels()
    np.testing.assert_array_equal(images, again)
    np.testing.assert_array_equal(labels, again_labels)


def test_loading_digits_does_not_import_scikit_learn():
    code = "import sys; from multidev.data import digits; digits(); print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
