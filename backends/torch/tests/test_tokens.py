"""The token layers against torch's own modules in float64: the attention is ``nn.MultiheadAttention`` under other
names, and a ViT's block is ``nn.TransformerEncoderLayer(norm_first=True)``; DropPath's per-sample masks scale
each residual branch. Independent of the reference, so the engine's arithmetic is pinned to torch's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn as tnn

import multidev
from multidev import nn
from multidev.rules.dropout import shard_masks
from multidev.testing import FLOAT64_RTOL, assert_states_close
from multidev_torch.model import build

DIM, HEADS, MLP, DEPTH = 8, 2, 16, 2
SPEC = multidev.ModelSpec("vit", (2, 6, 6), 3, graph=nn.vit(patch=2, dim=DIM, depth=DEPTH, heads=HEADS, mlp=MLP,
                                                             drop_path=0.4).graph())
SIZES = (4, 3)


def random_state(spec: multidev.ModelSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Every parameter drawn (the init's zero class token would hide its gradient's path)."""
    rng = np.random.default_rng(seed)
    return {p.name: rng.normal(0, 0.5, p.shape) for p in spec.params()}


def torch_names(depth: int) -> dict[str, str]:
    """Canonical name -> the name in :class:`TorchViT`."""
    names = {"embed.patch.weight": "patch.weight", "embed.patch.bias": "patch.bias", "embed.cls.token": "cls",
             "embed.pos.embedding": "pos", "norm.gamma": "norm.weight", "norm.beta": "norm.bias",
             "head.weight": "head.weight", "head.bias": "head.bias"}
    for i in range(depth):
        ours, theirs = f"block{i + 1}", f"blocks.{i}"
        names.update({f"{ours}.attention.norm.gamma": f"{theirs}.norm1.weight",
                      f"{ours}.attention.norm.beta": f"{theirs}.norm1.bias",
                      f"{ours}.attention.attn.in_weight": f"{theirs}.self_attn.in_proj_weight",
                      f"{ours}.attention.attn.in_bias": f"{theirs}.self_attn.in_proj_bias",
                      f"{ours}.attention.attn.out_weight": f"{theirs}.self_attn.out_proj.weight",
                      f"{ours}.attention.attn.out_bias": f"{theirs}.self_attn.out_proj.bias",
                      f"{ours}.mlp.norm.gamma": f"{theirs}.norm2.weight",
                      f"{ours}.mlp.norm.beta": f"{theirs}.norm2.bias"})
        names.update({f"{ours}.mlp.fc{k}.{p}": f"{theirs}.linear{k}.{p}" for k in (1, 2) for p in ("weight", "bias")})
    return names


class TorchViT(tnn.Module):
    """nn.vit written with torch's modules, as torchvision's VisionTransformer is (dropout 0)."""

    def __init__(self, channels: int, patch: int, tokens: int, classes: int) -> None:
        super().__init__()
        self.patch = tnn.Conv2d(channels, DIM, patch, stride=patch)
        self.cls = tnn.Parameter(torch.zeros(DIM))
        self.pos = tnn.Parameter(torch.zeros(tokens + 1, DIM))
        self.blocks = tnn.ModuleList(tnn.TransformerEncoderLayer(DIM, HEADS, MLP, dropout=0.0, activation="gelu",
                                                                 layer_norm_eps=1e-6, batch_first=True,
                                                                 norm_first=True) for _ in range(DEPTH))
        self.norm = tnn.LayerNorm(DIM, eps=1e-6)
        self.head = tnn.Linear(DIM, classes)

    def forward(self, x: torch.Tensor, masks: dict[str, torch.Tensor]) -> torch.Tensor:
        h = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(len(x), 1, -1), h], 1) + self.pos
        for i, block in enumerate(self.blocks):
            attention, mlp = (masks.get(f"block{i + 1}.{part}.droppath1") for part in ("attention", "mlp"))
            if attention is None:
                h = block(h)  # torch's own block, whole
                continue
            a = block.norm1(h)
            h = h + block.self_attn(a, a, a, need_weights=False)[0] * attention
            h = h + block.linear2(F.gelu(block.linear1(block.norm2(h)))) * mlp
        return self.head(self.norm(h)[:, 0])


@pytest.mark.parametrize("bias", [True, False])
def test_attention_is_torchs_multihead_attention(bias):
    spec = multidev.ModelSpec("attn", (5, DIM), 3, graph=nn.Sequential(
        nn.MultiHeadAttention(4, bias=bias, name="attn"), nn.Flatten(), nn.Dense(name="head")).graph())
    ours = build(spec).double()
    state = {k: torch.from_numpy(v) for k, v in random_state(spec).items()}
    ours.load_state_dict(state)
    assert list(ours.state_dict()) == [p.name for p in spec.params()]
    theirs = tnn.MultiheadAttention(DIM, 4, bias=bias, batch_first=True).double()
    names = {"attn.in_weight": "in_proj_weight", "attn.in_bias": "in_proj_bias", "attn.out_weight": "out_proj.weight",
             "attn.out_bias": "out_proj.bias"}
    theirs.load_state_dict({names[k]: v for k, v in state.items() if k in names})
    x = torch.randn(3, 5, DIM, dtype=torch.float64, requires_grad=True)
    got, want = ours.attn(x), theirs(x, x, x, need_weights=False)[0]
    torch.testing.assert_close(got, want, rtol=FLOAT64_RTOL, atol=0)
    g_ours = torch.autograd.grad((got * want.detach()).sum(), [x, ours.attn.in_weight, ours.attn.out_weight])
    g_theirs = torch.autograd.grad((want * want.detach()).sum(), [x, theirs.in_proj_weight, theirs.out_proj.weight])
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, rtol=FLOAT64_RTOL, atol=1e-12)


def test_vit_with_droppath_is_torchs_encoder_on_two_devices():
    """Gradients over uneven shards with the core's DropPath masks (one per sample), and logits in inference."""
    state = random_state(SPEC)
    names = torch_names(DEPTH)
    theirs = TorchViT(2, 2, 9, 3).double()
    theirs.load_state_dict({names[k]: torch.from_numpy(v) for k, v in state.items()})
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(sum(SIZES), 2, 6, 6)), rng.integers(0, 3, sum(SIZES))
    per_device = shard_masks(SPEC.dropouts(), seed=1, epoch=0, update=0, first=0, sizes=SIZES, dtype=np.float64)
    whole = {node: np.concatenate(parts) for node, parts in per_device.items()}
    assert all(m.shape[1:] == (1, 1) and 0 < (m == 0).mean() < 1 for m in whole.values()), "whole samples dropped"

    setup = multidev.Setup(SPEC, tuple(multidev.resolve_devices(devices=2)), "local", "float64")
    reps = multidev.replicate(multidev.load_backend("torch"), setup, state)
    got = reps.gradients(reps.place(dataclasses.replace(multidev.cut(x, y, SIZES), masks=per_device)))
    loss = F.cross_entropy(theirs(torch.from_numpy(x), {k: torch.from_numpy(v) for k, v in whole.items()}),
                           torch.from_numpy(y))
    grads = dict(zip([n for n, _ in theirs.named_parameters()], torch.autograd.grad(loss, list(theirs.parameters()))))
    want = {k: grads[names[k]].numpy() for k in got}
    assert_states_close(got, want, rtol=FLOAT64_RTOL, promise="ViT gradients with DropPath against torch's modules")

    logits = reps.predict(reps.place(multidev.cut(x, None, SIZES)))
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x), {}).numpy()
    assert_states_close({"logits": logits}, {"logits": expected}, rtol=FLOAT64_RTOL,
                        promise="ViT logits against torch's TransformerEncoderLayer")
