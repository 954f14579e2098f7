"""torch's nn.MultiheadAttention (self-attention, q, k and v projected by one packed weight) read as one
MultiHeadAttention, and MultiHeadAttention written back.

Why whole: torch's exporter writes the attention with the batch inside
(tokens first, then batch x heads), which no layer of the model language
takes alone. It is found from its in-projection, a MatMul by a constant
(D, 3D) (after a Transpose [1, 0, 2] in torch's form), to its
out-projection, by a constant (D, D), and the Reshape and Transpose that
put the batch first again; the nodes between are run by onnx's reference
evaluator on random tokens and must give MultiHeadAttention's values for
some number of heads (within float32's rounding), else they are read one by
one and the first that moves the batch says so.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import MultiHeadAttention, Transpose
from multidev.nn.onnx.base import rank, starts, writes
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.reader import Reader
from multidev.nn.onnx.writer import Writer

#: the ops an attention's nodes may be: projections, its products and softmax, and the plumbing between
PLUMBING = {"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Gather", "Split", "Slice", "Shape", "Concat", "Cast",
            "Mul", "Div", "Sqrt", "MatMul", "Softmax", "Add", "Gemm", "Identity", "Mod", "Sub", "ConstantOfShape",
            "Equal", "Where", "Expand", "Range", "Neg", "Reciprocal"}
LIMIT = 400  # nodes an attention may span


@dataclass
class _Found:
    x: str  # the tokens (N, L, D)
    first: int  # the node reading x
    w_in: np.ndarray  # (3D, D), torch's in_proj_weight
    b_in: Optional[np.ndarray]
    hint_node: object
    order: tuple[int, int]  # the tokens: x's sample axes in this order ((1, 0) where a Transpose comes first)
    nodes: set[int] = field(default_factory=set)  # from x to the out-projection
    w_out: Optional[np.ndarray] = None
    b_out: Optional[np.ndarray] = None
    ends: list[int] = field(default_factory=list)  # the out-projection (its bias), then Reshapes and Transposes
    sizes: list[int] = field(default_factory=list)  # Shape nodes reading those (but the last)


def _in_projection(r: Reader, node) -> Optional[_Found]:
    """The tokens and packed in-projection an attention starts with, at a Transpose [1, 0, 2] or a MatMul."""
    m, order = node, (0, 1)
    if node.op_type == "Transpose":  # torch's form; the other readers are Shape nodes, within the attention
        perm = [[int(p) for p in a.ints] for a in node.attribute if a.name == "perm"]
        readers = r.readers.get(node.output[0], []) if perm and len(perm[0]) == 3 and perm[0][1] == 0 else []
        matmuls = [k for k in readers if k >= 0 and r.graph.node[k].op_type == "MatMul"]
        m = r.graph.node[matmuls[0]] if len(matmuls) == 1 else None
        order = (perm[0][0] - 1, perm[0][2] - 1) if m is not None else order  # torch's exporter merges transposes
    x = node.input[0]
    w = r.consts.get(m.input[1]) if m is not None and len(m.input) == 2 and m.input[0] != m.input[1] else None
    if w is None or w.ndim != 2 or w.shape[1] != 3 * w.shape[0] or x not in r.values:
        return None
    shape = r.shape(r.values[x])
    if rank(r.values[x][1]) != 3 or shape is None or shape[order[1]] != w.shape[0]:
        return None
    adds = [k for k in r.readers.get(m.output[0], []) if k >= 0 and r.graph.node[k].op_type == "Add"]
    add = r.graph.node[adds[0]] if len(adds) == 1 else None
    other = r.others(add, m.output[0]) if add is not None else []
    b = r.consts.get(other[0]) if len(other) == 1 else None
    b = b if b is not None and b.size == w.shape[1] else None
    first = r.producer[node.output[0]]
    return _Found(x, first, w.T, None if b is None else b.reshape(-1), m, order)


def _out_projection(r: Reader, found: _Found, i: int) -> bool:
    """Whether node ``i`` projects (D, D) back: then its weight and bias, and the ends after it, are found."""
    node, d = r.graph.node[i], found.w_in.shape[1]
    w = r.consts.get(node.input[1]) if node.op_type in ("Gemm", "MatMul") and len(node.input) > 1 else None
    if w is None or w.shape != (d, d) or node.input[0] in r.consts:
        return False
    attrs = r.attrs(node)
    if node.op_type == "Gemm" and (attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0
                                   or attrs.get("beta", 1.0) != 1.0):
        return False
    found.w_out = w if node.op_type == "Gemm" and attrs.get("transB", 0) else w.T
    found.b_out = r.optional(node, 2) if node.op_type == "Gemm" else None
    found.ends, at = [i], i
    if node.op_type == "MatMul":
        j = r.only_reader(node.output[0])
        add = r.op(j, "Add")
        other = r.others(add, node.output[0]) if add is not None else []
        b = r.consts.get(other[0]) if len(other) == 1 else None
        if b is not None and b.size == d:
            found.b_out, at = b, j
            found.ends.append(j)  # type: ignore[arg-type]
    while True:  # the Reshapes and Transposes after it; Shape nodes reading them belong to the attention
        out = r.graph.node[at].output[0]
        readers = [k for k in r.readers.get(out, []) if k not in r.dead]
        sizes = [k for k in readers if k >= 0 and r.graph.node[k].op_type == "Shape"]
        data = [k for k in readers if k not in sizes]
        if len(data) != 1 or data[0] < 0 or r.graph.node[data[0]].op_type not in ("Reshape", "Transpose") \
                or r.graph.node[data[0]].input[0] != out:
            return True
        found.sizes.extend(sizes)
        at = data[0]
        found.ends.append(at)


def _span(r: Reader, found: _Found) -> bool:
    """The nodes from x's reader to the out-projection (every reader of theirs, shape arithmetic included), in the
    graph's order, so that the ends after the out-projection are known before a shape value leads to them."""
    todo, projections = [found.first], 0
    while todo:
        i = heapq.heappop(todo)
        if i in found.nodes or i in found.ends:
            continue
        found.nodes.add(i)
        if len(found.nodes) > LIMIT or r.graph.node[i].op_type not in PLUMBING:
            return False
        if i != found.first and _out_projection(r, found, i):
            projections += 1
            for k in found.sizes:
                heapq.heappush(todo, k)
            continue
        for out in r.graph.node[i].output:
            readers = [k for k in r.readers.get(out, []) if k not in r.dead]
            if -1 in readers:
                return False
            for k in readers:
                heapq.heappush(todo, k)
    return projections == 1 and (found.b_in is None) == (found.b_out is None)


def _closed(r: Reader, found: _Found, nodes: list[int], end: str) -> bool:
    """Whether only ``nodes`` read what they compute (but ``end``), and they read only x, constants and their own."""
    inside = set(nodes)
    made = {v for i in nodes for v in r.graph.node[i].output}
    for i in nodes:
        node = r.graph.node[i]
        if any(v and v not in made and v not in r.consts and not (v == found.x and i == found.first)
               for v in node.input):
            return False
        for out in node.output:
            if out != end and any(k not in inside and k not in r.dead for k in r.readers.get(out, [])):
                return False
    return sum(r.graph.node[i].op_type == "Softmax" for i in nodes) == 1


def evaluate(r: Reader, source: str, nodes: list[int], end: str, x: np.ndarray) -> Optional[np.ndarray]:
    """The nodes' value of ``end`` for ``x`` as ONNX value ``source``, by onnx's reference evaluator (the other
    values they read are the reader's constants); None where it fails."""
    from onnx.reference import ReferenceEvaluator

    h, graph = r.onnx.helper, r.graph
    used = {v for i in nodes for v in graph.node[i].input if v in r.consts}
    inits = [r.onnx.numpy_helper.from_array(np.asarray(r.consts[v]), v) for v in sorted(used)]
    f32 = r.onnx.TensorProto.FLOAT
    model = h.make_model(h.make_graph([graph.node[i] for i in nodes], "attention",
                                      [h.make_tensor_value_info(source, f32, list(x.shape))],
                                      [h.make_tensor_value_info(end, f32, None)], inits),
                         opset_imports=[h.make_opsetid("", r.opset)])
    try:
        return np.asarray(ReferenceEvaluator(model).run(None, {source: x})[0])
    except Exception:  # noqa: BLE001 - nodes the evaluator cannot run are simply not the layer sought
        return None


def attend(x: np.ndarray, w_in: np.ndarray, b_in: Optional[np.ndarray], w_out: np.ndarray,
           b_out: Optional[np.ndarray], heads: int) -> np.ndarray:
    """MultiHeadAttention(heads) of tokens x (B, L, D) in float64, as the layer states it."""
    b, n, d = x.shape
    qkv = x @ w_in.T + (0 if b_in is None else b_in)
    q, k, v = (t.reshape(b, n, heads, d // heads).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1))
    s = (q / math.sqrt(d // heads)) @ k.transpose(0, 1, 3, 2)
    s = np.exp(s - s.max(-1, keepdims=True))
    o = (s / s.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
    return o @ w_out.T + (0 if b_out is None else b_out)


def _heads(found: _Found, x: np.ndarray, y: np.ndarray) -> Optional[int]:
    """The number of heads whose attention gives ``y`` for ``x``, or None."""
    d = x.shape[-1]
    args = [np.asarray(a, np.float64) if a is not None else None for a in (found.w_in, found.b_in, found.w_out,
                                                                            found.b_out)]
    for heads in (k for k in range(1, d + 1) if d % k == 0):
        want = attend(x.astype(np.float64), args[0], args[1], args[2], args[3], heads)  # type: ignore[arg-type]
        if y.shape == want.shape and np.abs(y - want).max() <= 1e-4 * np.abs(want).max() + 1e-5:
            return heads
    return None


def _emit(r: Reader, node, found: _Found, heads: int, end: str) -> None:
    """The layer (after a Transpose of x's sample where the tokens are its columns), as ONNX value ``end``."""
    value = r.values[found.x]
    if found.order != (0, 1):
        value = (r.emit(node, Transpose((1, 0)), [value], value[1], hint(node, "transpose")), value[1])
    params = {"in_weight": found.w_in, "out_weight": found.w_out}
    if found.b_in is not None:
        params.update(in_bias=found.b_in, out_bias=np.asarray(found.b_out).reshape(-1))
    layer = MultiHeadAttention(heads, bias=found.b_in is not None)
    name = hint(found.hint_node, "attn", r.named(found.hint_node.input[1]))  # type: ignore[attr-defined]
    r.emit(node, layer, [value], value[1], name, r.weights(node, params), out=end)


@starts("Transpose", "MatMul")
def attention(r: Reader, node) -> bool:
    """Reads the attention that starts at ``node`` as one MultiHeadAttention; False where it is not one."""
    found = _in_projection(r, node)
    if found is None or not _span(r, found):
        return False
    shape = r.shape(r.values[found.x])
    x = np.random.default_rng(0).normal(size=(r.batch or 2, *shape)).astype(np.float32)  # type: ignore[misc]
    tokens = np.transpose(x, (0, found.order[0] + 1, found.order[1] + 1))
    for k in range(len(found.ends)):
        nodes = sorted(found.nodes | set(found.ends[:k + 1]))
        end = r.graph.node[found.ends[k]].output[0]
        y = evaluate(r, found.x, nodes, end, x) if _closed(r, found, nodes, end) else None
        heads = _heads(found, tokens, y) if y is not None else None
        if heads is not None:
            _emit(r, node, found, heads, end)
            r.skip.update(nodes)
            return True
    return False


@writes(MultiHeadAttention)
def _w_attention(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """Batch first, as from_onnx reads it back: x W_in^T + b_in, heads apart (Reshape, Transpose, Split), the
    queries scaled by 1 / sqrt(d), softmax(q k^T) v, the heads side by side, then W_out^T + b_out."""
    L, p = n.layer, n.name + "/"
    d = w.shapes[n.inputs[0]][-1]
    size = d // L.heads
    state = {k: w.state[f"{n.name}.{k}"] for k in ("in_weight", "out_weight")}
    w.add("MatMul", ins + [w.init(n, "in_weight", state["in_weight"].T)], p + "qkv", p + "in_proj")
    qkv = p + "qkv"
    if L.bias:
        w.add("Add", [qkv, w.init(n, "in_bias")], p + "qkv_bias", p + "in_bias")
        qkv = p + "qkv_bias"
    w.add("Reshape", [qkv, w.ints(p + "heads_shape", [0, 0, 3 * L.heads, size])], p + "heads", p + "Reshape")
    w.add("Transpose", [p + "heads"], p + "heads_first", p + "Transpose", perm=[0, 2, 1, 3])
    w.nodes.append(w.onnx.helper.make_node("Split", [p + "heads_first", w.ints(p + "split", [L.heads] * 3)],
                                           [p + "q", p + "k", p + "v"], name=p + "Split", axis=1))
    w.add("Mul", [p + "q", w.const(p + "scale", 1 / math.sqrt(size))], p + "q_scaled", p + "Mul")
    w.add("Transpose", [p + "k"], p + "k_t", p + "Transpose_k", perm=[0, 1, 3, 2])
    w.add("MatMul", [p + "q_scaled", p + "k_t"], p + "scores", p + "MatMul_scores")
    w.add("Softmax", [p + "scores"], p + "weights", p + "Softmax", axis=-1)
    w.add("MatMul", [p + "weights", p + "v"], p + "mixed", p + "MatMul_values")
    w.add("Transpose", [p + "mixed"], p + "tokens_first", p + "Transpose_back", perm=[0, 2, 1, 3])
    w.add("Reshape", [p + "tokens_first", w.ints(p + "joined_shape", [0, 0, d])], p + "joined", p + "Reshape_back")
    out_weight = w.init(n, "out_weight", state["out_weight"].T)
    if not L.bias:
        w.add("MatMul", [p + "joined", out_weight], out, p + "out_proj")
        return
    w.add("MatMul", [p + "joined", out_weight], p + "projected", p + "out_proj")
    w.add("Add", [p + "projected", w.init(n, "out_bias")], out, n.name)
