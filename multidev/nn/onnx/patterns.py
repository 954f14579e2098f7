"""Several ONNX nodes that make one layer, as torch's exporter writes them: GELU's erf and tanh forms below opset
20, x * sigmoid(x) (SiLU) and x * hardsigmoid(x) (HardSwish below opset 14).

Found before the pass: the members are skipped and the last node gives the
layer. A member that something else reads breaks the pattern, and the nodes
are read one by one.
"""

from __future__ import annotations

import math
from typing import Optional

from multidev.nn.layers import GELU, HardSwish, SiLU
from multidev.nn.onnx.base import pattern, scalar
from multidev.nn.onnx.ops_activations import torchs_hardsigmoid
from multidev.nn.onnx.reader import Reader

GELU_CUBIC = 0.044715  # tanh form: x + 0.044715 x^3


def _scaled(r: Reader, i: Optional[int], factor: float) -> Optional[str]:
    """The other input of node ``i`` when it is a Mul by ``factor`` or a Div by 1 / ``factor``."""
    node = r.graph.node[i] if i is not None else None
    if node is None or node.op_type not in ("Mul", "Div") or len(node.input) != 2:
        return None
    a, b = node.input
    if node.op_type == "Mul" and a in r.consts:
        a, b = b, a
    if a in r.consts:
        return None
    return a if scalar(r.consts.get(b), factor if node.op_type == "Mul" else 1 / factor) else None


def _tail(r: Reader, plus_at: int, x: str) -> tuple[list[int], Optional[int]]:
    """(members, last) of x * (1 + f) * 0.5 from the Add of 1, in its three usual orders; last None if none."""
    m1_at = r.only_reader(r.graph.node[plus_at].output[0])
    m1 = r.op(m1_at, "Mul")
    if m1 is None:
        return [], None
    plus, other = r.graph.node[plus_at], r.others(m1, r.graph.node[plus_at].output[0])

    def half(values: list[str]) -> bool:
        return len(values) == 1 and scalar(r.consts.get(values[0]), 0.5)

    m2_at = r.only_reader(m1.output[0])
    m2 = r.op(m2_at, "Mul", m1.output[0])
    if other == [x] and m2 is not None and half(r.others(m2, m1.output[0])) \
            or half(other) and m2 is not None and r.others(m2, m1.output[0]) == [x]:
        return [m1_at, m2_at], m2_at  # (x * (1 + f)) * 0.5, or ((1 + f) * 0.5) * x
    if len(other) == 1 and other[0] != plus.output[0] and r.only_reader(other[0]) == m1_at:
        h_at = r.producer.get(other[0])
        if _scaled(r, h_at, 0.5) == x:
            return [h_at, m1_at], m1_at  # (x * 0.5) * (1 + f)
    return [], None


def _one_plus(r: Reader, i: int) -> Optional[int]:
    """The Add of 1 that alone reads node ``i``'s output."""
    j = r.only_reader(r.graph.node[i].output[0])
    plus = r.op(j, "Add")
    return j if plus is not None and any(scalar(r.consts.get(v), 1.0) for v in plus.input) else None


def _fuse(r: Reader, members: list[int], last: Optional[int], layer, x: str, at) -> None:
    if last is not None:
        r.skip.update(m for m in members if m != last)
        r.fused[last] = (layer, x, at)


@pattern
def erf_gelu(r: Reader) -> None:
    """x / 2 * (1 + erf(x / sqrt 2)): GELU as torch writes it below opset 20."""
    for i, erf in enumerate(r.graph.node):
        if erf.op_type != "Erf" or r.only_reader(erf.input[0]) != i:
            continue
        k = r.producer.get(erf.input[0])
        x, j = _scaled(r, k, 1 / math.sqrt(2)), _one_plus(r, i)
        if x is not None and j is not None:
            members, last = _tail(r, j, x)
            _fuse(r, [k, i, j] + members, last, GELU(), x, erf)


def _cube(r: Reader, value: str, x: str) -> Optional[list[int]]:
    """The nodes of x * x * x (or Pow(x, 3)) giving ``value``, or None."""
    k = r.producer.get(value)
    node = r.graph.node[k] if k is not None else None
    if node is None:
        return None
    if node.op_type == "Pow" and node.input[0] == x and scalar(r.consts.get(node.input[1]), 3.0):
        return [k]
    if node.op_type != "Mul" or x not in node.input:
        return None
    square = r.others(node, x) or [x]
    k2 = r.producer.get(square[0])
    inner = r.graph.node[k2] if k2 is not None else None
    ok = inner is not None and inner.op_type == "Mul" and list(inner.input) == [x, x] and r.only_reader(square[0]) == k
    return [k, k2] if ok else None


def _tanh_argument(r: Reader, tanh_at: int) -> Optional[tuple[str, list[int]]]:
    """(x, members) of sqrt(2 / pi) * (x + 0.044715 x^3), the argument of GELU's tanh, or None."""
    tanh = r.graph.node[tanh_at]
    k = r.producer.get(tanh.input[0])
    inner = _scaled(r, k, math.sqrt(2 / math.pi))
    s_at = r.producer.get(inner) if inner is not None and r.only_reader(tanh.input[0]) == tanh_at else None
    s = r.op(s_at, "Add")
    if s is None or len(s.input) != 2 or r.only_reader(inner) != k:
        return None
    for x, a in (s.input, s.input[::-1]):
        a_at = r.producer.get(a)
        cube = _scaled(r, a_at, GELU_CUBIC) if r.only_reader(a) == s_at else None
        members = _cube(r, cube, x) if cube is not None and r.only_reader(cube) == a_at else None
        if members is not None:
            return x, [k, s_at, a_at] + members
    return None


@pattern
def tanh_gelu(r: Reader) -> None:
    """x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))): GELU(approximate="tanh") below opset 20."""
    for i, node in enumerate(r.graph.node):
        found = _tanh_argument(r, i) if node.op_type == "Tanh" else None
        j = _one_plus(r, i) if found is not None else None
        if j is not None:
            x, members = found
            tail, last = _tail(r, j, x)
            _fuse(r, members + [i, j] + tail, last, GELU(approximate="tanh"), x, node)


@pattern
def gated(r: Reader) -> None:
    """x * sigmoid(x) as SiLU, x * hardsigmoid(x) (torch's alpha and beta) as HardSwish, in either order."""
    for i, node in enumerate(r.graph.node):
        if node.op_type != "Mul" or len(node.input) != 2:
            continue
        for x, gate in (node.input, node.input[::-1]):
            k = r.producer.get(gate)
            g = r.graph.node[k] if k is not None else None
            if g is None or list(g.input) != [x] or r.only_reader(gate) != i:
                continue
            if g.op_type == "Sigmoid":
                _fuse(r, [k, i], i, SiLU(), x, node)
            elif g.op_type == "HardSigmoid" and torchs_hardsigmoid(r, g):
                _fuse(r, [k, i], i, HardSwish(), x, node)
            break
