"""The torch engine's forms on a GPU: cuDNN's flags for a step, and the memory layout of images.

Two forms change speed and not what is computed (both within the float32
bound of ``tests/test_gpu.py``): ``benchmark`` lets cuDNN time its
convolution algorithms once per shape and keep the fastest (a choice by
measurement, made by cuDNN itself), and ``channels_last`` keeps images and
convolution weights in NHWC, the layout cuDNN's tensor-core kernels read.
``compile`` runs each replica through ``torch.compile`` (Inductor's fused
kernels, forward and backward), and ``cudagraphs`` replays the forward's and
the backward's kernels as CUDA graphs, since a small model's step on a GPU
waits on the host launching kernels: alone, through ``torch.compile``'s
``cudagraphs`` backend (the eager kernels recorded, no code generated, so
its first step traces for seconds rather than compiling for a minute); with
``compile``, through Inductor's ``reduce-overhead`` mode.
Which pays depends on the precision; the defaults are what
``bench/bench_fashion_shape.py --torch-forms ...`` measured on an H100 (see
``DEFAULT``). ``MULTIDEV_TORCH_GPU_FORMS`` pins them: a comma-separated list
of forms, or ``none``. On a CPU neither applies.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch

from multidev.engine import MultidevError

ENV = "MULTIDEV_TORCH_GPU_FORMS"
FORMS = ("benchmark", "channels_last", "compile", "cudagraphs")
#: per precision, the fastest in one run of ResNet-18 on Fashion-MNIST's shape (batch 256) on an H100, 2026-11-26
#: (sec per epoch, first / second; none, benchmark, channels_last, both): fp32 8.6/8.3, 8.7/6.4, 8.5/8.2,
#: 11.5/6.0; bf16 3.7/3.2, 12.5/3.3, 2.5/2.2, 11.5/2.8. cuDNN's timing costs the first epoch 3-9 s.
DEFAULT = {"fp32": frozenset({"benchmark", "channels_last"}), "bf16": frozenset({"channels_last"})}


def chosen(precision: str, cuda: bool) -> frozenset[str]:
    """The forms a run on a GPU takes: the environment's, else the measured default; none on a CPU."""
    if not cuda:
        return frozenset()
    value = os.environ.get(ENV)
    if value is None or not value.strip():
        return DEFAULT.get(precision, frozenset())
    forms = {part.strip().lower() for part in value.replace("+", ",").split(",")} - {"", "none"}
    unknown = sorted(forms - set(FORMS))
    if unknown:
        raise MultidevError(f"{ENV}={value!r} names no form {', '.join(unknown)}: give a comma-separated list of "
                            f"{', '.join(FORMS)}, or none")
    return frozenset(forms)


def describe() -> str:
    """What ``multidev backends`` says of these forms."""
    pinned = os.environ.get(ENV, "").strip()
    if pinned:
        return f"{pinned} ({ENV} pins it)"
    return "; ".join(f"{precision}: {', '.join(sorted(forms)) or 'none'}" for precision, forms in DEFAULT.items()) \
        + f" (measured on an H100; {ENV} pins a list of {', '.join(FORMS)}, or none)"


class Forward:
    """What runs a replica's forward: under a compiled form, the compiled module for the shape of the run's first
    training batch and the replica itself for any other (an epoch's shorter last batch, evaluation).

    One shape is what a run's steps take; compiling each other one would cost as long again for a step or two
    (Inductor's first epoch took 36-39 s on an H200), and ``torch.compile``'s ``cudagraphs`` backend fails on a
    batch of another size once the batch dimension is traced as dynamic (pytorch/pytorch#131009).
    """

    def __init__(self, model: torch.nn.Module, forms: frozenset[str]) -> None:
        self.model = model
        self.shape: Optional[torch.Size] = None  # the compiled module's input shape, once a training batch came
        if "cudagraphs" in forms and "compile" in forms:
            self.compiled: Optional[Callable[..., torch.Tensor]] = torch.compile(model, mode="reduce-overhead",
                                                                                dynamic=False)
        elif "cudagraphs" in forms:
            self.compiled = torch.compile(model, backend="cudagraphs", dynamic=False)
        else:
            self.compiled = torch.compile(model, dynamic=False) if "compile" in forms else None

    def __call__(self, x: torch.Tensor, masks: Any = None) -> torch.Tensor:
        if self.compiled is None or not self.model.training:
            return self.model(x, masks)
        if self.shape is None:
            self.shape = x.shape
        return (self.compiled if x.shape == self.shape else self.model)(x, masks)


def step_begins(forms: frozenset[str]) -> None:
    """Tell CUDA graphs' replays that a new step begins: its outputs may be overwritten from here."""
    if "cudagraphs" in forms:
        torch.compiler.cudagraph_mark_step_begin()


@contextmanager
def flags(cuda: bool, tf32: bool, benchmark: bool) -> Iterator[None]:
    """cuDNN's and CUDA matmul's flags set for one step on a GPU, and restored after.

    TF32 (a 10-bit mantissa) only when the user opted in: cuDNN would run
    float32 convolutions in TF32 by default. Measured on an H100: one step
    then differs from the CPU's by 1.3% (LeNet) and 6% (ResNet-18), against
    4e-6 without it; JAX and MXNet compute in full float32, so without the
    opt-in the engines would no longer agree.
    """
    if not cuda:
        yield
        return
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = cudnn.allow_tf32, matmul.allow_tf32, cudnn.benchmark
    cudnn.allow_tf32 = matmul.allow_tf32 = tf32
    cudnn.benchmark = benchmark
    try:
        yield
    finally:
        cudnn.allow_tf32, matmul.allow_tf32, cudnn.benchmark = saved
