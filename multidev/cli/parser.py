"""The command line's parser, derived from the run's settings: every command takes the flags that apply to it."""

from __future__ import annotations

import argparse

from multidev.errors import MultidevError
from multidev.settings.run import add_arguments


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for every other user error
        raise MultidevError(f"{message} (see `{self.prog} --help`)")


def _process_flags(p: argparse.ArgumentParser) -> None:
    """Settings of the program itself, read before any framework loads (not of a run: workers inherit them)."""
    p.add_argument("--threads", type=int,
                   help="CPU threads for the frameworks (OMP_NUM_THREADS; default: every usable core, shared out "
                        "among --processes)")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="compile afresh: no persistent compilation cache (JAX; MULTIDEV_COMPILE_CACHE=off)")


def _compare_flags(c: argparse.ArgumentParser) -> None:
    c.add_argument("--backends", default="torch", help="comma-separated engines, e.g. torch,jax,mxnet")
    c.add_argument("--devices", dest="counts", default="1,2", help="comma-separated device counts, e.g. 1,2")
    c.add_argument("--out", required=True, help="folder for results.json, results.md and the plots")
    c.add_argument("--timeout", type=float, help="seconds after which a run counts as failed")
    c.add_argument("--no-truth", action="store_true",
                   help="skip the float64 run per device count that float32 runs are measured against")
    c.add_argument("--float64", action="store_true",
                   help="also run every other engine in float64, to tell a flipped ReLU from a different definition")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="multidev", description="Data-parallel training on PyTorch, JAX and MXNet.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    t = sub.add_parser("train", help="train a model on k devices")
    add_arguments(t, "train")
    _process_flags(t)
    c = sub.add_parser("compare", help="the same job on several engines and device counts, side by side")
    _compare_flags(c)
    add_arguments(c, "compare")
    _process_flags(c)
    sub.add_parser("backends", help="list installed engines, versions and devices")
    e = sub.add_parser("export", help="write a checkpoint's model for inference elsewhere (ONNX)")
    e.add_argument("checkpoint", help="a checkpoint written by --checkpoint")
    e.add_argument("--onnx", required=True, help="the ONNX file to write (needs the onnx package)")
    return p
