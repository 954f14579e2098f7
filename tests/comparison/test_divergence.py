"""The distance between two runs' parameters: relative to each array, but not to an array of rounding alone."""

import numpy as np

from multidev.comparison.divergence import distance


def test_an_array_of_rounding_alone_does_not_part_the_runs():
    """A convolution's bias before BatchNorm keeps a zero gradient: 1e-9 in float32, 1e-17 in float64. Against
    its own size the two would part by 100%; against the model's scale they part by rounding."""
    rng = np.random.default_rng(0)
    truth = {"conv.weight": rng.normal(size=(8, 3, 3, 3)), "conv.bias": np.full(8, 1e-17)}
    run = {"conv.weight": truth["conv.weight"] * (1 + 3e-7), "conv.bias": np.full(8, 1e-9)}
    largest, median = distance(run, truth)
    assert 1e-7 < largest < 1e-5 and 1e-7 < median < 1e-5


def test_a_real_difference_shows_in_a_small_array_and_a_large_one():
    truth = {"w": np.ones((4, 4)), "b": np.full(4, 0.01)}
    assert distance({"w": truth["w"], "b": truth["b"] * 1.01}, truth)[0] > 5e-3  # b's own scale counts
    assert distance({"w": truth["w"] * 1.001, "b": truth["b"]}, truth)[0] > 5e-4
    assert distance(truth, truth) == (0.0, 0.0)
