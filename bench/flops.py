"""Floating-point work of the models and the machine's matrix-multiply peak."""

from __future__ import annotations

import time

import numpy as np

from multidev.rules.models import ModelSpec, lenet_flat_features, resnet18_blocks


def forward_flops(spec: ModelSpec) -> int:
    """Multiply-adds x 2 of one sample's forward pass (convolutions and dense layers)."""
    c, h, w = spec.in_shape
    if spec.name == "lenet":
        h1, w1 = h - 2, w - 2
        h2, w2 = h1 // 2 - 4, w1 // 2 - 4
        return 2 * (c * 20 * 9 * h1 * w1 + 20 * 50 * 25 * h2 * w2 + lenet_flat_features(h, w) * 128
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
    """Best fp32 GFLOP/s of an n x n product, from numpy and (if installed) torch."""
    best, source = 0.0, "numpy"
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    candidates = {"numpy": lambda: a @ a}
    try:
        import torch
        t = torch.from_numpy(a)
        candidates["torch"] = lambda: t @ t
    except ImportError:
        pass
    for name, fn in candidates.items():
        fn()
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            rate = 2 * n ** 3 / (time.perf_counter() - start) / 1e9
            if rate > best:
                best, source = rate, name
    return best, source
