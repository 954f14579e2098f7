"""The kit's checks of sharded data parallelism: a sharded run changes nothing but memory (contract: Sharding).

Each level of ``shard`` is held to the replicated run of the same engine on
the same weights and batches, in float64, where the only difference allowed
is the order of a sum the engine cannot keep (``FLOAT64_RTOL``); an engine
that keeps it sets ``shard_rtol = 0`` on its class and is held to the same
bits (torch and MXNet). The checks also read
what each device holds (``held_bytes()``: per device, the bytes of the
parameters and of the optimizer state it keeps between updates, where the
engine reports it) against the sharding rule (its parts padded to equal
ones where the replicas say ``padded_shards``), so an engine that shards
nothing cannot pass them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import pytest

from multidev import nn
from multidev.engines.protocol import Replicas
from multidev.errors import MultidevError
from multidev.rules.models import ModelSpec
from multidev.rules.optimizers import STEP, Optimizer
from multidev.rules.sharding import LEVELS, per_device
from multidev.outputs import checkpoint as ckpt
from multidev.rules.split import cut, shard_sizes
from multidev.testing._helpers import LENET, RESNET, assert_states_close, batch, quick
from multidev.testing.kit import FLOAT64_RTOL, EngineFixtures
from multidev.testing.processes import MultiProcessChecks, installed, run

SHARDED = LEVELS[1:]
#: the optimizers the issue names: SGD with momentum, AdamW (state of one and two slots)
SHARD_RECIPES = {"sgd-momentum": Optimizer(momentum=0.9, weight_decay=0.05),
                 "adamw": Optimizer("adamw", betas=(0.8, 0.99), eps=1e-3, weight_decay=0.1)}
RATES = (0.1, 0.05, 0.02)


def tiny_vit() -> ModelSpec:
    """The zoo's ViT at its smallest: patches, a class token, attention, LayerNorm, GELU, no BatchNorm."""
    return ModelSpec("vit", (1, 8, 8), 4, nn.vit(patch=2, dim=8, depth=1, heads=2, mlp=16, drop_path=0.0).graph())


MODELS = {"lenet": lambda: LENET, "resnet18": lambda: RESNET, "vit": tiny_vit}
#: the replicated run the levels of one case are held to (one case at a time)
_REPLICATED: dict = {}


def held(reps: Replicas) -> list[dict[str, int]]:
    """What the engine says each device holds, or a skip where it does not say."""
    report = getattr(reps, "held_bytes", None)
    if report is None:
        pytest.skip("the engine does not report held_bytes: what each device holds is not checked")
    return report()


class ShardingChecks(EngineFixtures):
    """contract: Sharding."""

    #: how far a sharded float64 run may be from the replicated one: 0 for an engine that keeps its additions
    shard_rtol: float = FLOAT64_RTOL

    def _shard_needs(self, engine, level: str) -> None:
        self.require(engine, f"shard_{level}")
        self.require(engine, "float64")

    def _sharded_run(self, engine, spec: ModelSpec, k: int, level: str, optimizer: Optimizer, steps: int = 3,
             **setup) -> Replicas:
        reps = self.make(engine, spec, k, optimizer=optimizer, dtype=setup.pop("dtype", "float64"), shard=level,
                         **setup)
        for step, lr in enumerate(RATES[:steps]):
            x, y = batch(spec, 11, seed=40 + step)  # 11 rows: uneven shards
            reps.train_step(reps.place(cut(x, y, shard_sizes(len(x), k))), lr=lr)
        return reps

    def _same_as(self, sharded: Replicas, whole: Replicas, what: str, rtol: Optional[float] = None) -> None:
        rtol = self.shard_rtol if rtol is None else rtol
        assert_states_close(sharded.state(), whole.state(), rtol=rtol, floor=1e-9,
                            promise=f"sharding: {what}: the parameters are not the replicated run's")
        if not sharded.setup.optimizer.plain:
            got, want = sharded.optimizer_state(), whole.optimizer_state()
            assert sorted(got) == sorted(want), f"sharding: {what}: the optimizer state's names are not canonical"
            assert int(got[STEP]) == int(want[STEP]), f"sharding: {what}: {STEP} is {int(got[STEP])}"
            assert_states_close(got, want, rtol=rtol, floor=1e-9, names=[n for n in want if n != STEP],
                                promise=f"sharding: {what}: the optimizer state is not the replicated run's")

    # LeNet at every level (the quick suite: at parameters); ResNet-18 (BatchNorm, SGD's one slot) and the ViT
    # (attention, AdamW's two) at parameters, which gathers, reduce-scatters and updates rows: every path of the
    # others. The other pairs and levels add no code path (measured: every pair at every level the same bits on
    # torch and MXNet; these two at every level on JAX, the same bits or within 1.4e-14); CI's hour has no room.
    @pytest.mark.parametrize("case, level", [
        pytest.param(case, level, marks=() if (case, level) == ("lenet adamw", "parameters") else pytest.mark.slow)
        for case, level in [("lenet adamw", level) for level in SHARDED]
        + [("resnet18 sgd-momentum", "parameters"), ("vit adamw", "parameters")]])
    def test_sharded_equals_replicated(self, engine, case, level):
        """Three float64 updates at changing rates on 2 devices, uneven shards: parameters and optimizer state (the
        same bits where the engine's class sets ``shard_rtol = 0``)."""
        self._shard_needs(engine, level)
        model, recipe = case.split()
        k, spec, optimizer = self.fewest(engine), MODELS[model](), SHARD_RECIPES[recipe]
        key = (engine.name, case, k)
        if key not in _REPLICATED:  # one replicated run for LeNet's three levels
            _REPLICATED.clear()
            _REPLICATED[key] = self._sharded_run(engine, spec, k, "none", optimizer)
        self._same_as(self._sharded_run(engine, spec, k, level, optimizer), _REPLICATED[key],
                      f"{model} with {recipe} at --shard {level} on {k} devices")

    @pytest.mark.parametrize("level", quick(SHARDED, ("parameters",)))
    def test_each_device_holds_its_share(self, engine, level):
        """Parameters and optimizer state each device holds after an update: the rule's bytes, not the whole's."""
        self._shard_needs(engine, level)
        k, optimizer = self.fewest(engine), SHARD_RECIPES["adamw"]
        reps = self._sharded_run(engine, LENET, k, level, optimizer, steps=1)
        shapes = {p.name: tuple(p.shape) for p in LENET.params() if p.trainable}
        want = per_device(shapes, len(optimizer.slots), 8, k, level, getattr(reps, "padded_shards", False))
        for i, got in enumerate(held(reps)):
            for part in ("parameters", "optimizer"):
                assert got[part] == want[part][i], (
                    f"sharding: at --shard {level}, device {i} holds {got[part]} bytes of {part}, the rule gives "
                    f"{want[part][i]} (contract: Sharding)")

    @pytest.mark.slow
    @pytest.mark.parametrize("level", ["parameters"])  # the rows of an accumulated gradient, gathered parameters
    def test_sharded_accumulation_and_sync_batchnorm(self, engine, level):
        """Micro-batches of 6 and 5 rows into one update, and whole-batch BatchNorm statistics (ResNet-18)."""
        self._shard_needs(engine, level)
        self.require(engine, "accumulate")
        k, optimizer = self.fewest(engine), SHARD_RECIPES["sgd-momentum"]
        batchnorm = "sync" if "sync_batchnorm" in engine.capabilities else "local"
        try:
            self.replicas(engine, RESNET, k, batchnorm, dtype="float64", optimizer=optimizer, accumulate=2)
        except MultidevError:  # an engine may decline sync BatchNorm in float64 (MXNet on several devices)
            batchnorm = "local"
        runs = []
        for shard in ("none", level):
            reps = self.replicas(engine, RESNET, k, batchnorm, dtype="float64", optimizer=optimizer, accumulate=2,
                                 shard=shard)
            for step, lr in enumerate(RATES[:2]):
                x, y = batch(RESNET, 11, seed=60 + step)
                for a, b in ((0, 6), (6, 11)):
                    shards = replace(cut(x[a:b], y[a:b], shard_sizes(b - a, k)), whole=len(x))
                    placed = reps.place(shards)
                    reps.accumulate(placed) if a == 0 else reps.train_step(placed, lr=lr)
            runs.append(reps)
        self._same_as(runs[1], runs[0],
                      f"ResNet-18 with 2 micro-batches and {batchnorm} BatchNorm at --shard {level}")

    @pytest.mark.slow
    def test_sharded_bf16_equals_replicated(self, engine):
        """bf16 compute, float32 master weights and state kept by their owners: the replicated run's numbers."""
        self._shard_needs(engine, "parameters")
        self.require(engine, "bf16")
        k, optimizer = self.fewest(engine), SHARD_RECIPES["adamw"]
        runs = [self._sharded_run(engine, LENET, k, shard, optimizer, steps=2, dtype="float32", precision="bf16")
                for shard in ("parameters", "none")]
        self._same_as(*runs, "LeNet in bf16 at --shard parameters", rtol=1e-5)

    @pytest.mark.slow
    @pytest.mark.parametrize("level", [pytest.param("optimizer", marks=pytest.mark.full),
                                       pytest.param("gradients", marks=pytest.mark.full), "parameters",
                                       pytest.param("parameters 2x2", marks=pytest.mark.full),
                                       pytest.param("optimizer runtime", marks=pytest.mark.full)])
    def test_two_processes_at_a_level_are_the_replicated_run(self, engine, level, tmp_path):
        """2 processes at ``level`` against 2 devices replicated; ``parameters 2x2``: 2 processes x 2 devices
        against themselves replicated (which add a process's devices first, so not as 4 devices do); ``optimizer
        runtime``: every sum and gather over the engine's runtime (``MULTIDEV_HOST_SUM=off``), not shared memory.
        float64 AdamW, the parameters and the optimizer state (the same bits where the class sets
        ``shard_rtol = 0``). At ``parameters`` (CI's level: it gathers, reduce-scatters and updates rows, every
        path) the issue's promise too: the checkpoint (the whole state, gathered) resumes on 1 device of another
        engine and ends where the uninterrupted run ends."""
        MultiProcessChecks.needs_processes(engine)
        self.require(engine, "shard_processes")
        self.require(engine, "float64")
        self.require(engine, f"shard_{level.split()[0]}")
        job = ["--dtype", "float64", "--optimizer", "adamw", "--lr", "0.002", "--weight-decay", "0.01"]
        form = ["--processes", "2", "--devices", "2"] if level.endswith("2x2") else ["--processes", "2"]
        replicated = form if level.endswith("2x2") else ["--devices", "2"]
        sharded, expected = tmp_path / "sharded.npz", tmp_path / "replicated.npz"
        env = {"MULTIDEV_HOST_SUM": "off"} if level.endswith("runtime") else None
        run(engine.name, *replicated, *job, "--checkpoint", str(expected))
        run(engine.name, *form, "--shard", level.split()[0], *job, "--checkpoint", str(sharded), env=env)
        for part, load in (("parameters", lambda p: ckpt.load(p)[1]), ("optimizer state", ckpt.load_optimizer_state)):
            assert_states_close(load(sharded), load(expected), rtol=self.shard_rtol, floor=1e-9,
                                names=[n for n in load(expected) if n != STEP],
                                promise=f"sharding: 2 processes at {level}: its {part} differ from the "
                                        f"replicated run's")
        if level == "parameters":
            self._resumed_elsewhere(engine, tmp_path, job, sharded)

    @staticmethod
    def _resumed_elsewhere(engine, tmp_path, job: list[str], sharded) -> None:
        others = [name for name in ("torch", "mxnet", "jax") if name != engine.name and name in installed()]
        if not others or "shard_parameters" not in engine.capabilities:
            return
        resumed, straight = str(tmp_path / "resumed.npz"), str(tmp_path / "straight.npz")
        run(others[0], "--devices", "1", *job, "--epochs", "2", "--resume", str(sharded), "--checkpoint", resumed)
        run(engine.name, "--devices", "2", *job, "--epochs", "2", "--checkpoint", straight)
        assert_states_close(ckpt.load(resumed)[1], ckpt.load(straight)[1], rtol=FLOAT64_RTOL, floor=1e-9,
                            promise=f"sharding: the --shard parameters checkpoint of 2 {engine.name} processes, "
                                    f"resumed on 1 {others[0]} device, does not end where the uninterrupted run does")


def level_refused(engine, level: str) -> str:
    """The one line a run at ``level`` gets from an engine that does not claim it."""
    from multidev.engines.protocol import Setup, replicate
    from multidev.rules.devices import resolve_devices

    devices = resolve_devices(devices=1, gpu_count=0, max_cpu=engine.max_cpu_devices())
    with pytest.raises(MultidevError) as caught:
        replicate(engine, Setup(LENET, tuple(devices), shard=level), LENET.init(0))
    return str(caught.value)

