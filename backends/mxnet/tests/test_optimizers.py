"""The contract's SGD on MXNet's fused kernel: its buffer kept at the last rate's scale, read back unscaled."""

import numpy as np
import pytest

from multidev_mxnet import optimizers
from multidev_mxnet.runtime import mxnet

mx = mxnet()
nd = mx.nd

SHAPES = [(7, 5), (3,), (4, 2, 2), (6,)]


def contract_sgd(weights, grads, buffers, lr, wd, m):
    """docs/contract.md's SGD in float64: g = grad + wd w; b = m b + g; w -= lr b."""
    for w, g, b in zip(weights, grads, buffers):
        b *= m
        b += g + wd * w
        w -= lr * b


@pytest.mark.parametrize("together", [True, False], ids=["grouped", "one-by-one"])
def test_sgd_follows_the_contract_as_the_rate_changes_and_reads_back_the_buffer(together):
    rng = np.random.default_rng(0)
    opt = optimizers.ContractSGD(momentum=0.9, wd=1e-3, learning_rate=0.0)
    updater = mx.optimizer.get_updater(opt)
    want = [rng.normal(size=s) for s in SHAPES]
    held = [nd.array(w, dtype="float32") for w in want]
    truth_b = [np.zeros(s) for s in SHAPES]
    for lr in [0.1, 0.05, 0.0, 0.0, 0.2, 0.2, 1e-4]:  # a schedule, a pause, a jump: every scale change
        grads = [rng.normal(size=s) for s in SHAPES]
        opt.set_learning_rate(lr)
        if together:
            updater(list(range(len(SHAPES))), [nd.array(g, dtype="float32") for g in grads], held)
        else:
            for i, (g, w) in enumerate(zip(grads, held)):
                updater(i, nd.array(g, dtype="float32"), w)
        contract_sgd(want, grads, truth_b, lr, 1e-3, 0.9)
        for w, t in zip(held, want):
            np.testing.assert_allclose(w.asnumpy(), t, rtol=1e-5, atol=1e-6)
    read = [opt.buffers(i, updater.states[i])[0].asnumpy() for i in range(len(SHAPES))]
    for got, b in zip(read, truth_b):
        np.testing.assert_allclose(got, b, rtol=1e-5, atol=1e-6)
    assert any(opt.scales.values()) and all(s == -1e-4 for s in opt.scales.values()), (
        "the buffers are not held at the last rate's scale: the single kernel is not in use")


def test_a_loaded_buffer_is_the_contracts_own_until_the_next_update():
    opt = optimizers.ContractSGD(momentum=0.9, learning_rate=0.1)
    updater = mx.optimizer.get_updater(opt)
    w = nd.ones((3,))
    updater(0, nd.ones((3,)), w)
    assert opt.scales
    optimizers.resume_count(opt, 1)
    updater.states[0] = nd.array([2.0, 2.0, 2.0])  # a loaded buffer: b itself
    assert opt.buffers(0, updater.states[0])[0].asnumpy().tolist() == [2.0, 2.0, 2.0]
    before = w.asnumpy()
    updater(0, nd.ones((3,)), w)  # b = 0.9 * 2 + 1 = 2.8; w -= 0.1 * 2.8
    np.testing.assert_allclose(w.asnumpy(), before - 0.28, rtol=1e-6)
    np.testing.assert_allclose(opt.buffers(0, updater.states[0])[0].asnumpy(), 2.8, rtol=1e-6)
