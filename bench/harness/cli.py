"""The options every benchmark takes: ``--smoke`` (everything at its smallest), ``--results`` (where to keep it) and
``--label`` (a name for a run with other settings).

``--smoke`` runs a script at its smallest (a tiny model or data, one round,
seconds) to check that it still runs; its figures are no results, so they go
to a temporary folder unless ``--results`` (or ``$BENCH_RESULTS``) names
one. Without it, results go to ``bench/results``. Any option given on the
command line overrides the smoke value.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from bench.harness.machine import ROOT
from bench.harness.results import Report

RESULTS = ROOT / "bench" / "results"
ENV = "BENCH_RESULTS"


def parser(doc: Optional[str]) -> argparse.ArgumentParser:
    """An argument parser with the harness's options; the script adds its own."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true",
                   help="run at the smallest size, once, to check the script (results to a temporary folder)")
    p.add_argument("--results", type=Path,
                   help=f"folder of results (default: ${ENV}, else bench/results; with --smoke a temporary one)")
    p.add_argument("--label", default="",
                   help="kept as <script>-<label>.json beside the script's own file: runs of one script with other "
                        "settings kept side by side (e.g. tf32)")
    return p


def parse(p: argparse.ArgumentParser, smoke: Mapping[str, Any],
          argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line, with ``smoke``'s values as the defaults under ``--smoke``."""
    first, _ = p.parse_known_args(argv)
    if first.smoke:
        p.set_defaults(**smoke)
    args = p.parse_args(argv)
    args.results = _results(args)
    return args


def _results(args: argparse.Namespace) -> Path:
    if args.results:
        return args.results
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    return Path(tempfile.mkdtemp(prefix="bench-smoke-")) if args.smoke else RESULTS


def report(script_file: str, args: argparse.Namespace, setup: str, *, gpu: bool = False) -> Report:
    """The run's report, named after the script, with its options as the settings."""
    settings = {k: v for k, v in vars(args).items() if k not in ("results", "label")}
    name = Path(script_file).stem + (f"-{args.label}" if args.label else "")
    return Report(name, setup, settings, args.results, smoke=args.smoke, gpu=gpu)
