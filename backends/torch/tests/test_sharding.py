"""The torch engine's sharding keeps the replicated run's additions: the same bits, in a process and over processes.

The kit holds every engine within the float64 tolerance; torch's owners add
their rows of the replicas' gradients in the all-reduce's order and update
them with the same ``torch.optim`` arithmetic, so here nothing may differ.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from multidev.engines.protocol import Setup, replicate
from multidev.engines.registry import load_backend
from multidev.outputs import checkpoint as ckpt
from multidev.rules.devices import resolve_devices
from multidev.rules.split import cut, shard_sizes
from multidev.testing._helpers import batch, quick
from multidev.testing.processes import run
from multidev.testing.sharding import MODELS, RATES, SHARD_RECIPES, SHARDED

ENGINE = load_backend("torch")


def three_updates(model: str, recipe: str, level: str, k: int = 2):
    spec = MODELS[model]()
    devices = resolve_devices(devices=k, gpu_count=0, max_cpu=None)
    reps = replicate(ENGINE, Setup(spec, tuple(devices), dtype="float64", optimizer=SHARD_RECIPES[recipe],
                                   shard=level), spec.init(0))
    for step, lr in enumerate(RATES):
        x, y = batch(spec, 11, seed=40 + step)
        reps.train_step(reps.place(cut(x, y, shard_sizes(len(x), k))), lr=lr)
    return {**reps.state(), **reps.optimizer_state()}


def assert_identical(got: dict, want: dict, what: str) -> None:
    for name, value in want.items():
        assert np.array_equal(got[name], value), (
            f"sharding: {what}: {name} differs from the replicated run by "
            f"{float(np.max(np.abs(got[name] - value))):.2e}: torch keeps the replicated run's additions")


@pytest.mark.parametrize("case", quick(["resnet18 adamw", "resnet18 sgd-momentum", "vit adamw", "vit sgd-momentum"],
                                       ["vit adamw"]))
def test_every_level_is_the_replicated_run_bit_for_bit(case):
    model, recipe = case.split()
    want = three_updates(model, recipe, "none")
    for level in SHARDED:
        assert_identical(three_updates(model, recipe, level), want, f"{model} with {recipe} at --shard {level}")


@pytest.mark.slow
def test_processes_at_every_level_are_two_devices_bit_for_bit(tmp_path):
    """2 processes at each level against 2 devices replicated; 2 processes x 2 devices against themselves
    replicated (which add a process's devices first, so not as 4 devices do)."""
    job = ["--dtype", "float64", "--optimizer", "adamw", "--lr", "0.002", "--weight-decay", "0.01"]
    both = ["--processes", "2", "--devices", "2"]
    runs = {"2 devices": ["--devices", "2"], "2 processes x 2 devices": both,
            **{f"2 processes {level}": ["--processes", "2", "--shard", level] for level in SHARDED},
            "2 processes x 2 devices parameters": [*both, "--shard", "parameters"]}
    for name, argv in runs.items():
        run("torch", *argv, *job, "--checkpoint", str(tmp_path / f"{name}.npz"))

    def saved(name: str) -> dict:
        path = tmp_path / f"{name}.npz"
        return {**ckpt.load(path)[1], **ckpt.load_optimizer_state(path)}

    for name in runs:
        if name.endswith(SHARDED):
            want = "2 processes x 2 devices" if "x 2" in name else "2 devices"
            assert_identical(saved(name), saved(want), f"{name} against {want} replicated")


def test_the_result_records_each_devices_bytes(tmp_path):
    """``--json``'s memory: the rule's bytes per device, the optimizer's a half of the replicated run's."""
    out = tmp_path / "result.json"
    run("torch", "--devices", "2", "--optimizer", "adamw", "--shard", "optimizer", "--json", str(out),
        "--epochs", "1", "--batch-size", "64")
    result = json.loads(out.read_text())
    assert result["shard"] == "optimizer"
    memory = result["memory"]
    whole = memory["parameters"][0]  # LeNet's float32 parameters, on every device at this level
    assert memory["parameters"] == [whole, whole] and memory["gradients"] == [whole, whole], memory
    # AdamW keeps two arrays per parameter: together the devices hold them once, each less than all
    assert sum(memory["optimizer"]) == 2 * whole and max(memory["optimizer"]) < 2 * whole, memory
