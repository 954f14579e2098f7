"""The distance between two runs' parameters: relative to each array, but not to an array of rounding alone."""

import numpy as np

from multidev.comparison.divergence import describe_float32, describe_float64, errors, measure


def test_an_array_of_rounding_alone_does_not_part_the_runs():
    """A convolution's bias before BatchNorm keeps a zero gradient: 1e-9 in float32, 1e-17 in float64. Against
    its own size the two would part by 100%; against the model's scale they part by rounding."""
    rng = np.random.default_rng(0)
    truth = {"conv.weight": rng.normal(size=(8, 3, 3, 3)), "conv.bias": np.full(8, 1e-17)}
    run = {"conv.weight": truth["conv.weight"] * (1 + 3e-7), "conv.bias": np.full(8, 1e-9)}
    e = list(errors(run, truth).values())
    largest, median = max(e), float(np.median(e))
    assert 1e-7 < largest < 1e-5 and 1e-7 < median < 1e-5


def test_a_real_difference_shows_in_a_small_array_and_a_large_one():
    truth = {"w": np.ones((4, 4)), "b": np.full(4, 0.01)}
    assert max(errors({"w": truth["w"], "b": truth["b"] * 1.01}, truth).values()) > 5e-3  # b's own scale counts
    assert max(errors({"w": truth["w"] * 1.001, "b": truth["b"]}, truth).values()) > 5e-4
    assert errors(truth, truth) == {"w": 0.0, "b": 0.0}


def _trace(folder, states: dict[int, dict[str, np.ndarray]]):
    folder.mkdir()
    for step, state in states.items():
        np.savez(folder / f"step-{step:07d}.npz", **state, _statistics=np.array(["bn.running_var"]))
    return folder


def test_a_difference_is_born_where_a_run_first_leaves_its_reach(tmp_path):
    """The reach grows with the way the truth moved each array: rounding of that size is no birth, a jump of
    1e-3 at step 2 is, in the array that jumped; an array the truth keeps still is never judged."""
    rng = np.random.default_rng(0)
    w0, v0 = rng.normal(size=(4, 4)), np.ones(4)
    truth = {s: {"w": w0 + 0.01 * s, "bias": np.full(4, 1e-17), "bn.running_var": v0 + 0.1 * s}
             for s in (0, 1, 2, 4)}
    calm = {s: {"w": a["w"] + 1e-7 * s, "bias": np.full(4, 1e-9), "bn.running_var": a["bn.running_var"] * (1 + 1e-7)}
            for s, a in truth.items()}
    jump = {s: {**a, "w": a["w"] + (1e-3 if s >= 2 else 0.0)} for s, a in calm.items()}
    t = _trace(tmp_path / "truth", truth)
    rounding = measure(t, _trace(tmp_path / "calm", calm), "truth")
    assert rounding.steps == [1, 2, 4] and rounding.born is None, rounding.born
    assert describe_float32(rounding, "torch", None, True) == "rounding"
    born = measure(t, _trace(tmp_path / "jump", jump), "truth").born
    assert (born.step, born.array) == (2, "w") and born.value > 1e-4 > born.reach, born
    verdict = describe_float32(measure(t, tmp_path / "jump", "truth"), "jax", None, True)
    assert verdict.startswith("born at step 2 in w (") and verdict.endswith("(--float64 tells)"), verdict
    # in float64 the same calm run is 1e-7 away: within SAME_DEFINITION, the same definition
    assert describe_float64(measure(t, tmp_path / "calm", "truth", dtype="float64")).startswith("same definition")
    assert describe_float64(measure(t, tmp_path / "jump", "truth", dtype="float64")).startswith(
        "another definition: born at step 2 in w")
