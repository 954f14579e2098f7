"""Small models, data and comparisons the conformance kit shares."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pytest

from multidev.rules.models import ModelSpec, State

LENET = ModelSpec("lenet", (1, 16, 16), 10)
RESNET = ModelSpec("resnet18", (1, 8, 8), 10)


def batch(spec: ModelSpec, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (size, *spec.in_shape)).astype(np.float32)
    y = rng.integers(0, spec.num_classes, size).astype(np.int64)
    return x, y


def max_rel_error(a: np.ndarray, b: np.ndarray, floor: float = 1e-12) -> float:
    """Largest difference, relative to the larger array's scale, or ``floor`` where that is smaller."""
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)), floor)
    return float(np.max(np.abs(a - b), initial=0.0)) / scale


def update_apart(spec: ModelSpec, start: State, got: State, want: State) -> float:
    """How far one update (``got`` from ``start``) is from another (``want``), the trainable arrays as one vector:
    the norm of the difference over the norm of ``want``'s update. Single small arrays of a step can be far off
    where the whole step is close (bf16, cuDNN's kernels), so a whole step is judged whole."""
    def step(state: State) -> np.ndarray:
        return np.concatenate([(state[n] - start[n]).ravel() for n in spec.trainable()])

    return float(np.linalg.norm(step(got) - step(want)) / np.linalg.norm(step(want)))


def assert_states_close(got: State, want: State, *, rtol: float, promise: str,
                        names: Iterable[str] | None = None, floor: float = 1e-12) -> None:
    """Every array of ``got`` within ``rtol`` (relative to its scale, at least ``floor``) of ``want``; the message
    names the promise."""
    for name in names if names is not None else want:
        err = max_rel_error(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64), floor)
        assert err <= rtol, f"{promise}: {name} differs by {err:.2e} (relative), tolerance {rtol:.0e}"


def assert_states_equal(states: list[State], *, promise: str) -> None:
    """Replicas hold bit-identical arrays."""
    first = states[0]
    for i, other in enumerate(states[1:], start=1):
        for name, value in first.items():
            if not np.array_equal(value, other[name]):
                diff = float(np.max(np.abs(value - other[name])))
                raise AssertionError(f"{promise}: device {i} holds a different {name} than device 0 "
                                     f"(max difference {diff:.2e})")


def conv2d_nchw(x: np.ndarray, w: np.ndarray, padding: int) -> np.ndarray:
    """A plain stride-1 convolution in numpy: the reference for BatchNorm statistics checks."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = h + 2 * padding - kh + 1, wd + 2 * padding - kw + 1
    patches = np.stack([xp[:, :, i:i + oh, j:j + ow] for i in range(kh) for j in range(kw)], axis=-1)
    return np.einsum("nchwk,ock->nohw", patches.astype(np.float64), w.reshape(o, c, kh * kw).astype(np.float64))


def kink_margin(spec: ModelSpec, state: State, x: np.ndarray, sizes=None,
                batchnorm: str = "local") -> tuple[float, float]:
    """(margin, float32 reach) of a case, both relative to each ReLU's root-mean-square input.

    margin: the smallest |ReLU input| in float64. reach: the largest distance
    of the float32 reference's ReLU inputs from float64's. A case whose margin
    is many times its reach has every ReLU on the same side in every float32
    run, so its gradient is a smooth function and rounding alone separates runs.
    """
    from multidev import reference

    exact = reference.relu_inputs(spec, state, x, sizes, batchnorm)
    single = reference.relu_inputs(spec, state, x, sizes, batchnorm, dtype=np.float32)
    rms = [max(float(np.sqrt(np.mean(v * v))), 1e-300) for v in exact]
    margin = min(float(np.abs(v).min()) / r for v, r in zip(exact, rms))
    reach = max(float(np.abs(v - w).max()) / r for v, w, r in zip(exact, single, rms))
    return margin, reach


def quick(values: Sequence[Any], keep: Iterable[Any]) -> list[Any]:
    """Parameters for ``parametrize``: those in ``keep`` run in the quick suite, the rest with ``-m slow``.

    The quick suite must stay within minutes on the slowest CPU these machines have (it took 8 min on a Zen 3
    EPYC where a Zen 4 took 4); CI runs both, so every case still runs before anything lands.
    """
    keep = list(keep)
    return [v if v in keep else pytest.param(v, marks=pytest.mark.slow) for v in values]
