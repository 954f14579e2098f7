"""Each engine's ResNet-18 built from the definition against the hand-built one it replaced (issue 22).

Issue 22 replaced every engine's hand-written ResNet-18 and LeNet
(``backends/<engine>/multidev_<engine>/model.py``) by a builder of any
``multidev.nn`` definition (``spec.graph``). This measures what that cost:
the same engine, batch, data and initial state, one device, trained by

- the network built from the definition (the engine as it is now), and
- the hand-built network of commit df9b69b, the last one before the change,
  read with ``git show df9b69b:<path>`` into a temporary module whose
  package is the engine's (so its ``from .batchnorm import ...`` finds the
  engine's own BatchNorm, unchanged since).

Shim: the old modules import ``lenet_flat_features`` from ``multidev.engine``,
which no longer exports it (the LeNet definition computes its own sizes).
Names of that import line that ``multidev.engine`` lacks are cut from the
line and given as a copy of df9b69b's function instead (``SHIMS``); ``Block``,
``resnet18_blocks`` and ``ModelSpec`` are still exported and used as they are.

The old network goes into the engine's own replicas, the rest of the step
unchanged, by swapping the name the engine builds its model with while the
replicas are made (``multidev_torch.parallel.build``,
``multidev_jax.steps.build``, ``multidev_mxnet.parallel.build``), with the
adapters the newer calls need: torch passes Dropout's masks to ``forward``,
JAX passes them to ``apply`` (and keys its compiled programs by the recipe,
so the old side gets a recipe of its own), MXNet asks its network for
``dropouts``, ``ones`` and ``example``. Both sides then train alternately in
one process (the order flips every round, each round ``--steps`` steps of
each after ``--warmup`` untimed ones), and the medians of the rounds' samples/s
and their ratio are reported; each engine runs in its own process, threads
set as the ``multidev`` command sets them. The first step's loss of both sides
(same state, same batch) is printed too: it should agree to float32 rounding.

    python bench/bench_definition.py --engines torch,jax,mxnet --json defs.json   # ~4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parent.parent
OLD = "df9b69b"  # the last commit with the hand-built models
NEW, HAND = "definition", "hand-built"


def lenet_flat_features(height: int, width: int) -> int:
    """df9b69b's ``multidev.engine.lenet_flat_features``: LeNet's features after conv3, pool2, conv5, pool2."""
    h, w = (height - 2) // 2, (width - 2) // 2
    return 50 * ((h - 4) // 2) * ((w - 4) // 2)


#: names the old models import from multidev.engine that it no longer exports, and what stands in for them
SHIMS: dict[str, Callable[..., Any]] = {"lenet_flat_features": lenet_flat_features}


def hand_built_module(engine: str) -> types.ModuleType:
    """df9b69b's ``multidev_<engine>/model.py`` as a module of the engine's package, its missing imports shimmed.

    Read from git rather than copied into the repository: the benchmark then
    measures exactly the code the change removed.
    """
    import multidev.engine

    path = f"backends/{engine}/multidev_{engine}/model.py"
    source = subprocess.run(["git", "show", f"{OLD}:{path}"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout
    line = re.search(r"^from multidev\.engine import (.+)$", source, re.MULTILINE)
    names = [n.strip() for n in line.group(1).split(",")]
    missing = [n for n in names if not hasattr(multidev.engine, n)]
    unknown = [n for n in missing if n not in SHIMS]
    if unknown:
        raise SystemExit(f"{OLD}:{path} imports {unknown} from multidev.engine, which lacks them: add shims")
    kept = ", ".join(n for n in names if n not in missing)
    source = source[:line.start()] + f"from multidev.engine import {kept}" + source[line.end():]
    name = f"multidev_{engine}._hand_built_{OLD}"
    module = types.ModuleType(name)
    module.__package__ = f"multidev_{engine}"  # relative imports: the engine's BatchNorm, conv, runtime
    module.__dict__.update({n: SHIMS[n] for n in missing})
    sys.modules[name] = module  # Flax's and dataclasses' classes look their module up there
    exec(compile(source, f"{OLD}:{path}", "exec"), module.__dict__)  # noqa: S102 (git's own text of OLD)
    return module


@contextmanager
def swapped(module: types.ModuleType, name: str, value: Any) -> Iterator[None]:
    """``module.name`` is ``value`` inside the block: the engine builds the old network while replicas are made."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def ignoring_masks(forward: Callable[..., Any]) -> Callable[..., Any]:
    """An old torch ``forward(self, x)`` that the engine can call as ``forward(self, x, masks)``."""
    return lambda self, x, masks=None: forward(self, x)


def torch_replicas(engine, setup, state) -> dict[str, Any]:
    """Both torch replica sets; the old ``forward(x)`` takes (and ignores) the masks the engine now passes."""
    from multidev_torch import parallel

    import multidev

    old = hand_built_module("torch")
    for cls in (old.ResNet18, old.LeNet):
        cls.forward = ignoring_masks(cls.forward)
    new = multidev.replicate(engine, setup, state)
    with swapped(parallel, "build", old.build):
        hand = multidev.replicate(engine, setup, state)
    assert type(hand.models[0]) is old.ResNet18 and type(new.models[0]).__name__ == "Network"
    return {NEW: new, HAND: hand}


def jax_replicas(engine, setup, state) -> dict[str, Any]:
    """Both JAX replica sets; the old network behind the new ``apply(variables, x, mask, drops)`` call."""
    from multidev_jax import steps as steps_module

    import multidev

    old = hand_built_module("jax")

    class Hand:
        """The hand-built Flax network as the steps call it (they pass Dropout's multipliers too)."""

        def __init__(self, spec, rows, compute) -> None:
            # the old network hands its ``sync`` on to BatchNorm, whose first field is now the rows it covers
            self.net = old.build(spec, rows, old.Compute(compute.cpu, compute.dtype, compute.precision))

        def apply(self, variables, x, mask=None, drops=None, **kwargs):
            return self.net.apply(variables, x, mask, **kwargs)

    new = multidev.replicate(engine, setup, state)
    steps_module.steps.cache_clear()  # steps() is cached per recipe: make the old side's anew
    try:
        with swapped(steps_module, "build", Hand):
            hand = multidev.replicate(engine, setup, state)
    finally:
        steps_module.steps.cache_clear()
    hand._recipe = (*hand._recipe, HAND)  # compiled programs are keyed by the recipe: its own
    return {NEW: new, HAND: hand}


def mxnet_replicas(engine, setup, state) -> dict[str, Any]:
    """Both MXNet replica sets; the old network answers the engine's Dropout questions (it has none)."""
    from multidev_mxnet import parallel

    import multidev

    old = hand_built_module("mxnet")

    def build(spec, sync=False):
        """The old network with the Dropout-less answers the engine asks every network for."""
        net = old.build(spec, sync)
        net.dropouts, net.ones = [], (lambda rows, ctx, dtype: [])
        net.example = lambda ctx, dtype: [parallel.nd.zeros((2, *spec.in_shape), ctx=ctx, dtype=dtype)]
        return net

    new = multidev.replicate(engine, setup, state)
    with swapped(parallel, "build", build):
        hand = multidev.replicate(engine, setup, state)
    assert type(hand.net) is old.ResNet18 and type(new.net).__name__ == "Network"
    return {NEW: new, HAND: hand}


def same_jax_program() -> str:
    """Whether XLA compiled the two JAX train steps to the same program (metadata and module name aside)."""
    from multidev_jax.compiled import _CACHE

    texts = {key[-3] == HAND: compiled.as_text() for key, compiled in _CACHE.items() if key[0] == "train"}
    clean = [re.sub(r"^HloModule.*$", "", re.sub(r", metadata=\{[^}]*\}", "", text), flags=re.MULTILINE)
             for text in texts.values()]
    return "identical" if len(clean) == 2 and clean[0] == clean[1] else "different"


def alternate(runs: dict[str, Callable[[], None]], batch: int, steps: int, rounds: int, warmup: int,
              sync: Callable[[], None]) -> dict[str, list[float]]:
    """Samples/s of each side per round, the order flipping every round so drift and load hit both alike."""
    from timing import samples_per_sec

    for step in runs.values():
        for _ in range(warmup):
            step()
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            rates[name].append(samples_per_sec(runs[name], batch, steps, sync))
    return rates


def worker(engine_name: str, args: argparse.Namespace) -> dict:
    """One engine, both networks, in this process: its rates, their ratio and the first step's losses."""
    import numpy as np

    import multidev
    from multidev.processes.threads import apply_threads

    apply_threads()  # as `multidev train` does, before the framework loads
    os.environ.setdefault("MULTIDEV_COMPILE_CACHE", "off")  # JAX: both sides compile their own programs
    # JAX: both sides on the device whole. A split is decided at the first batch and rebuilds the steps from the
    # recipe, which would give the old side the new network's steps (its network is swapped in only while made)
    os.environ["MULTIDEV_JAX_PARTS"] = "whole"
    engine = multidev.load_backend(engine_name)
    spec = multidev.ModelSpec("resnet18", (1, args.size, args.size), 10)
    devices = multidev.resolve_devices(devices=1, max_cpu=engine.max_cpu_devices())
    setup = multidev.Setup(spec, devices)
    reps = {"torch": torch_replicas, "jax": jax_replicas, "mxnet": mxnet_replicas}[engine_name](
        engine, setup, spec.init(0))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, *spec.in_shape)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    sizes = multidev.shard_sizes(args.batch, 1)
    runs = {name: (lambda r=r: r.train_step(r.place(multidev.cut(x, y, sizes)), lr=0.05)) for name, r in reps.items()}
    first = {name: run().loss_sum for name, run in runs.items()}  # same state, same batch: the same loss
    sync: Callable[[], None] = lambda: None  # torch on the CPU, JAX's read-back loss: each step has ended
    if engine_name == "mxnet":
        from multidev_mxnet.runtime import mxnet
        sync = mxnet().nd.waitall  # the last update runs asynchronously: inside its own side's window
    rates = alternate(runs, args.batch, args.steps, args.rounds, args.warmup - 1, sync)
    medians = {name: statistics.median(v) for name, v in rates.items()}
    ratios = [n / h for n, h in zip(rates[NEW], rates[HAND])]
    return {"engine": engine_name, "version": multidev.engines.registry.engine_version(engine),
            "threads": os.environ.get("OMP_NUM_THREADS", ""), "rates": rates, "medians": medians,
            "ratio": medians[NEW] / medians[HAND], "round_ratios": ratios, "first_loss": first,
            "program": same_jax_program() if engine_name == "jax" else ""}


def cpu_name() -> str:
    """The CPU's model name as ``lscpu`` gives it (with the core count), for the table's header."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown CPU"
    name = re.search(r"^Model name:\s*(.+)$", out, re.MULTILINE)
    return f"{name.group(1).strip() if name else 'unknown CPU'}, {os.cpu_count()} cores"


def parse() -> argparse.Namespace:
    """The options; the defaults keep the whole run of three engines near 4 minutes on 2 cores."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="torch,jax,mxnet", help="comma-separated; each in its own process")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=28, help="image height and width (1 channel, 10 classes)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps of each side per round")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds; their median counts")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of each side first (1 compiles)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args()


def run_engine(engine: str, args: argparse.Namespace) -> dict | None:
    """One engine's worker in a fresh process (frameworks and their thread pools never share one)."""
    cmd = [sys.executable, __file__, "--worker", engine, "--batch", str(args.batch), "--size", str(args.size),
           "--steps", str(args.steps), "--rounds", str(args.rounds), "--warmup", str(args.warmup)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"{engine} failed: {proc.stderr.strip().splitlines()[-3:]}", file=sys.stderr)
        return None
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{engine}: {time.perf_counter() - start:.0f} s; rounds' samples/s {NEW} "
          f"{' '.join(f'{v:.1f}' for v in got['rates'][NEW])}, {HAND} "
          f"{' '.join(f'{v:.1f}' for v in got['rates'][HAND])}; first-step loss sums {got['first_loss'][NEW]:.6f} / "
          f"{got['first_loss'][HAND]:.6f}" + (f"; compiled train steps {got['program']}" if got["program"] else ""),
          file=sys.stderr, flush=True)
    return got


def main() -> None:
    """Each engine's worker, then one Markdown table with the CPU and date (and the rows as JSON on request)."""
    from timing import table

    args = parse()
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    rows = []
    for engine in args.engines.split(","):
        got = run_engine(engine, args)
        if got is None:
            rows.append({"engine": engine, "version": "failed", f"{NEW} samples/s": "", f"{HAND} samples/s": "",
                         "ratio": "", "rounds' ratios": ""})
            continue
        rows.append({"engine": engine, "version": got["version"], f"{NEW} samples/s": got["medians"][NEW],
                     f"{HAND} samples/s": got["medians"][HAND], "ratio": got["ratio"],
                     "rounds' ratios": f"{min(got['round_ratios']):.2f}-{max(got['round_ratios']):.2f}"})
    print(f"# ResNet-18, 1x{args.size}x{args.size}, batch {args.batch}, 1 device, fp32; {cpu_name()}; "
          f"median of {args.rounds} alternating rounds of {args.steps} steps; ratio = {NEW} / {HAND} ({OLD}); "
          f"{date.today()}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
