"""What every benchmark shares: contenders in alternating rounds, medians, a fresh process per contender,
the machine's facts, results kept as JSON, and ``--smoke``.

A script is run from the repository's root as ``python -m bench.<script>``::

    parser = harness.parser(__doc__)
    parser.add_argument("--steps", type=int, default=5)
    args = harness.parse(parser, smoke={"steps": 1})
    report = harness.report(__file__, args, setup="ResNet-18, batch 64")
    report.add({"devices": 1, "samples/s": fresh(time_it, steps=args.steps)})
    report.save()

``flops`` (a model's work, the machine's peak) and ``memory`` (a process's
resident memory) are imported by the scripts that need them.
"""

from bench.harness.isolate import ChildFailed, fresh, since_start, start  # first: its clock starts with the process

from bench.harness import machine  # noqa: I001
from bench.harness.cli import parse, parser, report
from bench.harness.devices import run_devices, training_shards
from bench.harness.results import Report, table
from bench.harness.threads import as_the_command
from bench.harness.timing import compare, medians, rounds, samples_per_sec

__all__ = ["ChildFailed", "Report", "as_the_command", "compare", "fresh", "machine", "medians", "parse", "parser",
           "report", "rounds", "run_devices", "samples_per_sec", "since_start", "start", "table",
           "training_shards"]
