"""Floating-point work of the models and the machine's matrix-multiply peak."""

from __future__ import annotations

import time

import numpy as np

from multidev.nn.zoo import resnet18_blocks
from multidev.rules.models import ModelSpec


def forward_flops(spec: ModelSpec) -> int:
    """Multiply-adds x 2 of one sample's forward pass (convolutions and dense layers)."""
    c, h, w = spec.in_shape
    if spec.name == "lenet":
        h1, w1 = h - 2, w - 2
        h2, w2 = h1 // 2 - 4, w1 // 2 - 4
        flat = 50 * (h2 // 2) * (w2 // 2)  # the second pooling's output, flattened
        return 2 * (c * 20 * 9 * h1 * w1 + 20 * 50 * 25 * h2 * w2 + flat * 128
                    + 128 * spec.num_classes)
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


def _cpuinfo() -> dict[str, str]:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return {}
    first = text.split("\n\n")[0]
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in first.splitlines())}


def vector_peak(cores: int) -> tuple[float, str]:
    """fp32 GFLOP/s of the CPU's vector units: lanes x 2 FMA units x 2 flops x cores x clock (0.0 if unreadable).

    Lanes: 16 with AVX-512 (8 on AMD family 25, Zen 3/4, whose units are 256
    bits wide), 8 with AVX2, 4 otherwise; two FMA units per core, as every
    server core these machines have. The clock is /proc/cpuinfo's, which in
    a virtual machine is the nominal one: turbo can go above it.
    """
    info = _cpuinfo()
    flags, mhz = info.get("flags", "").split(), float(info.get("cpu MHz", 0) or 0)
    if not mhz:
        return 0.0, "clock not readable"
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    if lanes == 16 and info.get("vendor_id") == "AuthenticAMD" and info.get("cpu family") == "25":
        lanes = 8
    gflops = lanes * 2 * 2 * cores * mhz / 1e3
    return gflops, f"{lanes} fp32 lanes x 2 FMA units x 2 x {cores} cores x {mhz / 1e3:.2f} GHz"


def peak(cores: int) -> tuple[float, str]:
    """The larger of the best measured matrix product and the vector units' peak, with what each was."""
    measured, source = matmul_peak()
    vector, how = vector_peak(cores)
    text = f"matmul {measured:.0f} GFLOP/s ({source}), vector units {vector:.0f} ({how})"
    return max(measured, vector), text
