"""Floating-point work of the models and the machine's float32 peak, for a run's share of it."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from bench.harness.machine import cpu, gpu
from multidev.engine import ModelSpec, resnet18_blocks


def forward_flops(spec: ModelSpec) -> int:
    """Multiply-adds x 2 of one sample's forward pass (convolutions and dense layers)."""
    c, h, w = spec.in_shape
    if spec.name == "lenet":
        h1, w1 = h - 2, w - 2
        h2, w2 = h1 // 2 - 4, w1 // 2 - 4
        flat = 50 * (h2 // 2) * (w2 // 2)  # the second pooling's output, flattened
        return 2 * (c * 20 * 9 * h1 * w1 + 20 * 50 * 25 * h2 * w2 + flat * 128
                    + 128 * spec.num_classes)
    if spec.name == "mlp":  # the image flattened, two hidden layers of 256
        return 2 * (c * h * w * 256 + 256 * 256 + 256 * spec.num_classes)
    if spec.name != "resnet18":
        raise ValueError(f"no count of {spec.name}'s work: time resnet18, lenet or mlp for a share of the peak")
    flops = 2 * c * 64 * 9 * h * w
    for b in resnet18_blocks():
        h, w = -(-h // b.stride), -(-w // b.stride)
        flops += 2 * 9 * h * w * (b.in_channels * b.out_channels + b.out_channels ** 2)
        if b.projection:
            flops += 2 * h * w * b.in_channels * b.out_channels
    return flops + 2 * 512 * spec.num_classes


def training_flops(spec: ModelSpec) -> int:
    """Forward plus backward (about twice the forward): the usual 3x rule."""
    return 3 * forward_flops(spec)


def matmul_peak(n: int = 2048, repeats: int = 5) -> tuple[float, str]:
    """Best fp32 GFLOP/s of an n x n product, from numpy, torch and JAX (those installed), and whose it was."""
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    candidates = {"numpy": lambda: a @ a}
    try:
        import torch
        t = torch.from_numpy(a)
        candidates["torch"] = lambda: t @ t
    except ImportError:
        pass
    try:
        import jax
        import jax.numpy as jnp
        j = jnp.asarray(a)
        product = jax.jit(lambda m: jnp.dot(m, m, precision=jax.lax.Precision.HIGHEST))
        candidates["jax"] = lambda: product(j).block_until_ready()
    except ImportError:
        pass
    best, source = 0.0, "numpy"
    for name, fn in candidates.items():
        fn()
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            rate = 2 * n ** 3 / (time.perf_counter() - start) / 1e9
            if rate > best:
                best, source = rate, name
    return best, source


def vector_peak(cores: int) -> tuple[float, str]:
    """fp32 GFLOP/s of the CPU's vector units: lanes x 2 FMA units x 2 flops x cores x clock (0.0 if unreadable).

    Lanes: 16 with AVX-512 (8 on AMD family 25, Zen 3/4, whose units are 256
    bits wide), 8 with AVX2, 4 otherwise; two FMA units per core, as every
    server core these machines have. The clock is /proc/cpuinfo's, which in
    a virtual machine is the nominal one: turbo can go above it.
    """
    info = cpu()
    if not info.mhz:
        return 0.0, "clock not readable"
    lanes = 16 if "avx512f" in info.flags else 8 if "avx2" in info.flags else 4
    if lanes == 16 and info.vendor == "AuthenticAMD" and info.family == 25:
        lanes = 8
    gflops = lanes * 2 * 2 * cores * info.mhz / 1e3
    return gflops, f"{lanes} fp32 lanes x 2 FMA units x 2 x {cores} cores x {info.mhz / 1e3:.2f} GHz"


#: dense peak TFLOP/s by GPU name (vendor data sheets; SXM parts): float32 without TF32, TF32 and bf16 on tensor
#: cores (without the sparsity the sheets' larger figures assume)
GPU_PEAKS = {"H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.0},
             "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.0},
             "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0}}


def gpu_peak(precision: str) -> Optional[float]:
    """The GPU's dense peak for ``precision`` from its data sheet (None for an unknown GPU or none)."""
    name = gpu()
    return next((p[precision] for kind, p in GPU_PEAKS.items() if kind in name), None)


def peak(cores: int, n: int = 2048) -> tuple[float, str]:
    """The larger of the best measured matrix product and the vector units' peak, with what each was."""
    measured, source = matmul_peak(n)
    vector, how = vector_peak(cores)
    text = f"matmul {measured:.0f} GFLOP/s ({source}), vector units {vector:.0f} ({how})"
    return max(measured, vector), text
