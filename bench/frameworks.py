"""Frameworks loaded as a plain user of them loads them, for the hand-written sides of the benchmarks."""

from __future__ import annotations

import numpy as np


def load_mxnet():
    """MXNet 1.9.1 on numpy 1.24+: it reads ``numpy.bool``, which numpy 1.24 removed, so the alias is put back for
    the import alone. With ``DMLC_ROLE`` naming a scheduler or server, MXNet serves at import, then exits."""
    patched = "bool" not in np.__dict__
    if patched:
        np.bool = bool  # type: ignore[attr-defined]
    try:
        import mxnet
    finally:
        if patched:
            del np.bool  # type: ignore[attr-defined]
    return mxnet
