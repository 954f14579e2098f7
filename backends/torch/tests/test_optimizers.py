"""The engine's update (torch.optim's functional form) against torch.optim's own classes, and what it leaves out."""

import subprocess
import sys

import pytest
import torch

from multidev.rules.optimizers import Optimizer
from multidev_torch.optimizers import Update

CASES = {
    "sgd": (Optimizer("sgd"), lambda ps: torch.optim.SGD(ps, lr=0.0)),
    "momentum, decay": (Optimizer("sgd", momentum=0.9, weight_decay=1e-3),
                        lambda ps: torch.optim.SGD(ps, lr=0.0, momentum=0.9, weight_decay=1e-3)),
    "nesterov": (Optimizer("sgd", momentum=0.5, nesterov=True),
                 lambda ps: torch.optim.SGD(ps, lr=0.0, momentum=0.5, nesterov=True)),
    "adamw": (Optimizer("adamw", betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05),
              lambda ps: torch.optim.AdamW(ps, lr=0.0, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)),
}


def _net(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Flatten(),
                               torch.nn.Linear(12, 4)).to(dtype)


def _train(net: torch.nn.Module, step, dtype: torch.dtype) -> None:
    """Four updates at changing rates; the first layer's bias frozen for the last two (no gradient)."""
    gen = torch.Generator().manual_seed(1)
    for i, lr in enumerate((0.1, 0.05, 0.2, 0.01)):
        net[0].bias.requires_grad_(i < 2)
        net[0].bias.grad = None
        x = torch.randn(5, 2, 4, 4, generator=gen).to(dtype)
        net(x).square().mean().backward()
        step(lr)
        for p in net.parameters():
            p.grad = None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_bits_and_state_as_torch_optim(case, dtype):
    optimizer, make = CASES[case]
    ours, theirs = _net(dtype), _net(dtype)
    update, torch_opt = Update(optimizer, ours.parameters()), make(list(theirs.parameters()))

    def torch_step(lr: float) -> None:
        for group in torch_opt.param_groups:
            group["lr"] = lr
        torch_opt.step()
    _train(ours, update.step, dtype)
    _train(theirs, torch_step, dtype)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        mine, its = update.state.get(a, {}), torch_opt.state.get(b, {})
        assert sorted(mine) == sorted(its)
        for key in its:
            assert torch.equal(mine[key], its[key]) and mine[key].dtype == its[key].dtype, key


def test_a_train_step_leaves_torch_dynamo_unimported():
    """torch.optim's Optimizer imports torch._dynamo at its first step; the engine's first step must not (a
    second of every run's start)."""
    code = ("import sys, numpy as np, multidev\n"
            "from multidev.rules.optimizers import Optimizer\n"
            "engine = multidev.load_backend('torch')\n"
            "devices = multidev.resolve_devices(devices=2, max_cpu=engine.max_cpu_devices())\n"
            "spec = multidev.ModelSpec('mlp', (1, 4, 4), 3)\n"
            "for opt in (Optimizer('sgd', momentum=0.9), Optimizer('adamw')):\n"
            "    reps = multidev.replicate(engine, multidev.Setup(spec, devices, optimizer=opt),"
            " spec.init(0))\n"
            "    x = np.ones((4, 1, 4, 4), np.float32); y = np.arange(4) % 3\n"
            "    reps.train_step(reps.place(multidev.cut(x, y, multidev.shard_sizes(4, 2))), 0.1)\n"
            "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"
