"""The optimizers (contract: Optimizers): the formulas by hand, the state's names, settings refused in one line."""


import numpy as np
import pytest

from multidev.errors import MultidevError
from multidev.rules.optimizers import STEP, Optimizer, update
from multidev.testing import LENET


@pytest.mark.parametrize("settings, message", [
    (dict(momentum=1.0), "momentum must be in [0, 1)"),
    (dict(momentum=-0.1), "momentum must be in [0, 1)"),
    (dict(weight_decay=-1e-4), "weight decay must be 0 or more"),
    (dict(name="adamw", betas=(0.9, 1.0)), "adamw betas must be two numbers in [0, 1)"),
    (dict(name="adamw", betas=(-0.1, 0.9)), "adamw betas must be two numbers in [0, 1)"),
    (dict(name="adamw", eps=0.0), "adamw eps must be above 0"),
    (dict(nesterov=True), "nesterov needs momentum above 0"),
    (dict(name="adam"), "unknown optimizer 'adam'"),
    (dict(momentum=float("nan")), "momentum must be a finite number"),
])
def test_bad_optimizer_settings_are_one_line(settings, message):
    with pytest.raises(MultidevError, match=message.replace("[", r"\[").replace(")", r"\)").replace("(", r"\(")):
        Optimizer(**settings)


def test_sgd_formula_by_hand():
    """Coupled decay, then momentum; Nesterov looks one buffer ahead."""
    opt = Optimizer(momentum=0.5, nesterov=True, weight_decay=0.1)
    w, g = {"a": np.array([2.0])}, {"a": np.array([1.0])}
    state = opt.init_state(LENET)
    state["optimizer.momentum.a"] = np.array([0.4])
    new, after = update(opt, w, g, state, lr=0.1)
    # g' = 1 + 0.1 * 2 = 1.2; b = 0.5 * 0.4 + 1.2 = 1.4; d = 1.2 + 0.5 * 1.4 = 1.9; w = 2 - 0.19
    assert after["optimizer.momentum.a"] == pytest.approx([1.4]) and new["a"] == pytest.approx([1.81])
    assert int(after[STEP]) == 1


def test_adamw_formula_by_hand():
    """Decoupled decay scaled by the rate; epsilon outside the bias-corrected root."""
    opt = Optimizer("adamw", betas=(0.5, 0.75), eps=0.1, weight_decay=0.2)
    state = {STEP: np.array(0), "optimizer.m.a": np.zeros(1), "optimizer.v.a": np.zeros(1)}
    new, after = update(opt, {"a": np.array([1.0])}, {"a": np.array([2.0])}, state, lr=0.5)
    # m = 1, v = 1; m_hat = 2, v_hat = 4; step = 2 / (2 + 0.1); w = 1 - 0.5 * (2 / 2.1 + 0.2 * 1)
    assert new["a"] == pytest.approx([1 - 0.5 * (2 / 2.1 + 0.2)])
    assert after["optimizer.m.a"] == pytest.approx([1.0]) and after["optimizer.v.a"] == pytest.approx([1.0])


def test_state_names_are_canonical():
    names = Optimizer("adamw").state_names(LENET)
    assert names[0] == STEP and len(names) == 1 + 2 * len(LENET.trainable())
    assert f"optimizer.m.{LENET.trainable()[0]}" in names
    assert Optimizer().state_names(LENET) == [STEP]  # plain SGD keeps nothing but the count
