"""``processes=N``: the same ``multidev train`` command run as N workers by the engine's own launcher."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

from multidev.data import Dataset
from multidev.engines.capabilities import check_claims, needed
from multidev.engines.protocol import Backend
from multidev.errors import MultidevError
from multidev.outputs.result import Result, load_json
from multidev.processes.launch import Launch
from multidev.processes.threads import _worker_threads


def worker_argv(backend: str, settings: dict, json_path: str) -> list[str]:
    """``multidev train`` arguments that give every worker the settings of this call."""
    if isinstance(settings["dataset"], Dataset):
        raise MultidevError("a Dataset object cannot reach other processes: name a dataset (digits, fashion-mnist)")
    if settings["shard_weights"] is not None:
        raise MultidevError("shard weights are for one process: leave them out with processes > 1")
    devices = settings["devices"]
    if devices is not None and not str(devices).strip().isdigit():
        raise MultidevError(f"with processes > 1, devices is a count per process, got {devices!r}")
    argv = ["train", "--backend", backend]
    argv += ["--gpus", str(settings["gpus"])] if settings["gpus"] is not None else ["--devices", str(devices or 1)]
    for flag in ("model", "dataset", "epochs", "batch_size", "seed", "batchnorm", "dtype"):
        argv += [f"--{flag.replace('_', '-')}", str(settings[flag])]
    argv += ["--lr", repr(float(settings["lr"])), "--json", json_path]
    for flag in ("data_dir", "checkpoint", "resume", "trace"):
        if settings[flag] is not None:
            argv += [f"--{flag.replace('_', '-')}", str(settings[flag])]
    argv += settings["recipe"].argv() + ([] if settings["prefetch"] else ["--no-prefetch"])
    return argv + ([] if settings["progress"] else ["--no-progress"])


def launch_train(engine: Backend, launch: Launch, settings: dict, json_path: Optional[str | Path]) -> Result:
    """Start the workers of this machine, wait for them, and return rank 0's result (node 0 only)."""
    recipe = settings["recipe"]
    check_claims(engine, needed(dtype=settings["dtype"], batchnorm=settings["batchnorm"], processes=launch.size,
                                optimizer=recipe.optimizer, accumulate=recipe.accumulate, precision=recipe.precision))
    with tempfile.TemporaryDirectory(prefix="multidev-launch-") as folder, _worker_threads(launch.processes):
        path = Path(json_path) if json_path is not None else Path(folder) / "result.json"
        engine.launch(worker_argv(engine.name, settings, str(path)), launch)  # type: ignore[attr-defined]
        if launch.node_rank != 0:
            return Result(backend=engine.name, devices=[], model=settings["model"], dataset=str(settings["dataset"]),
                          batch_size=settings["batch_size"], lr=float(settings["lr"]), seed=settings["seed"],
                          batchnorm=settings["batchnorm"], test_total=0, epochs=[], version="",
                          recipe=recipe.settings())
        return load_json(path)
