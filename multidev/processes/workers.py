"""``processes=N``: the same ``multidev train`` command run as N workers by the engine's own launcher."""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import asdict
from pathlib import Path

from multidev.data.dataset import Dataset
from multidev.engines.capabilities import check_claims, needed
from multidev.engines.protocol import Backend
from multidev.errors import MultidevError
from multidev.nn import sources
from multidev.outputs.result import Result, load_json, save_json
from multidev.processes.faults import launched_with
from multidev.processes.launch import DEFAULT_MASTER
from multidev.processes.threads import worker_threads
from multidev.settings.run import Settings


def worker_settings(engine: Backend, s: Settings, json_path: str) -> Settings:
    """What every worker of the job runs: ``s`` in one process that joins the job, rank 0 writing ``json_path``."""
    if s.devices is not None and not isinstance(s.devices, int):
        raise MultidevError(f"with processes > 1, devices is a count per process, got {','.join(s.devices)!r}")
    return s.replace(backend=engine.name, processes=1, nnodes=1, node_rank=0, master=DEFAULT_MASTER,
                     max_restarts=0, json=json_path, plot=None)


def restartable(s: Settings, folder: Path) -> Settings:
    """With ``--max-restarts`` and no ``--checkpoint``, one in ``folder`` for the restarts (gone with the job)."""
    if not s.max_restarts or s.checkpoint is not None:
        return s
    if s.nnodes > 1:
        raise MultidevError("--max-restarts across machines needs --checkpoint PATH in a folder every machine "
                            "reads: the restarted workers of every machine resume from it")
    return s.replace(checkpoint=str(folder / "restarts.npz"))


def launch_train(engine: Backend, s: Settings) -> Result:
    """Start the workers of this machine, wait for them, and return rank 0's result (node 0 only)."""
    check_claims(engine, needed(dtype=s.dtype, batchnorm=s.batchnorm, processes=s.launch.size,
                                optimizer=s.recipe.optimizer, accumulate=s.accumulate, precision=s.precision))
    risk = s.launch.port_risk()
    if risk:
        warnings.warn(risk)
    with tempfile.TemporaryDirectory(prefix="multidev-launch-") as folder, worker_threads(s.processes):
        path = s.json if s.json is not None else str(Path(folder) / "result.json")
        if isinstance(s.dataset, Dataset) and s.nnodes > 1:
            raise MultidevError("a data set made in Python cannot reach other machines: save it (numpy.savez or a "
                                "folder of .npy files) where every machine reads it, and give that path")
        s = restartable(s.shareable(Path(folder)), Path(folder))
        with launched_with(s.checkpoint):
            restarts = engine.launch(worker_settings(engine, s, path).to_argv(), s.launch)  # type: ignore[attr-defined]
        if s.node_rank != 0:
            return Result(backend=engine.name, devices=[], model=sources.label(s.model), dataset=str(s.dataset),
                          batch_size=s.batch_size, lr=float(s.lr), seed=s.seed, batchnorm=s.batchnorm, test_total=0,
                          epochs=[], version="", recipe=s.recipe.settings())
        result = load_json(path)
        result.restarts = [asdict(r) for r in restarts]
        if restarts and s.json is not None:  # rank 0 of the last start wrote it; the launcher alone saw the restarts
            save_json(result, s.json)
        return result
