"""Swin's shifted-window attention (torchvision's ``ShiftedWindowAttention``) read as one WindowAttention and
written back in the form torch writes it.

Why whole: torch's exporter writes the windows with the batch inside
((N * windows, window^2, C)), the shift's mask as a slice-by-slice
ScatterND into zeros, and the roll as slices joined; none of that is a
layer of its own. The attention is found from its Pad, which names the
module's scope (``/features/features.1/features.1.0/attn/``): the one value
of that scope computed from the Pad's input and read outside it is the
attention's output, and the nodes it needs are run by onnx's reference
evaluator on random values. They must give WindowAttention's values for the
relative position table the scope gathers from, within float32's rounding,
else the Pad is read alone (a Pad layer, and the rest node by node).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from multidev.nn import swin
from multidev.nn.graph import NodeSpec
from multidev.nn.layers import WindowAttention
from multidev.nn.onnx.base import rank, starts, writes
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.ops_attention import evaluate
from multidev.nn.onnx.reader import Reader
from multidev.nn.onnx.writer import Writer
from multidev.reference.tokens import window_attention

LIMIT = 2000  # nodes a window attention may span (torch writes about 900 for a shifted one)


def _scope(node) -> str:
    """The module scope torch writes into a node's name, with its trailing slash ("" where there is none)."""
    scope = node.name.rpartition("/")[0]
    return scope + "/" if scope.strip("/") else ""


def _output(r: Reader, first: int, scope: str) -> Optional[str]:
    """The one value of ``scope`` computed from node ``first``'s input (Shape nodes left out: they read sizes)
    that a live node outside the scope reads; None where there is not exactly one."""
    seen, todo, ends = set(), [first], set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        for out in r.graph.node[i].output:
            for k in r.readers.get(out, []):
                if k < 0 or not r.graph.node[k].name.startswith(scope):
                    if k not in r.dead:
                        ends.add(out)
                elif r.graph.node[k].op_type != "Shape":
                    todo.append(k)
    return ends.pop() if len(ends) == 1 else None


def _needed(r: Reader, source: str, end: str) -> Optional[list[int]]:
    """The nodes that compute ``end`` from ``source`` and the reader's constants, in the graph's order; None
    where something else reads what they compute, or they span more than :data:`LIMIT`."""
    nodes, todo = set(), [end]
    while todo:
        value = todo.pop()
        if value == source or value in r.consts or value not in r.producer:
            continue
        i = r.producer[value]
        if i not in nodes:
            nodes.add(i)
            todo.extend(v for v in r.graph.node[i].input if v)
        if len(nodes) > LIMIT:
            return None
    for i in nodes:
        for out in r.graph.node[i].output:
            if out != end and any(k < 0 or (k not in nodes and k not in r.dead) for k in r.readers.get(out, [])):
                return None
    return sorted(nodes)


def _weights(r: Reader, nodes: list[int], scope: str, dim: int) -> Optional[tuple[dict[str, np.ndarray], str]]:
    """The attention's arrays, and the table's initializer (what names the layer): the projections (MatMuls by
    constants (D, 3D) and (D, D)), the biases added to them, and the (offsets, heads) table the scope gathers
    from; None where one is missing or twice."""
    found: dict[str, np.ndarray] = {}
    table_name = ""

    def put(role: str, a: np.ndarray) -> bool:
        seen = role in found
        found[role] = a
        return not seen

    for i in nodes:
        node = r.graph.node[i]
        known = [v for v in node.input if v in r.consts] if len(node.input) == 2 else []
        a = r.consts[known[0]] if len(known) == 1 and (node.op_type == "Add" or known[0] == node.input[1]) else None
        if a is None or a.dtype.kind != "f":
            continue
        role = {("MatMul", (dim, 3 * dim)): "in_weight", ("MatMul", (dim, dim)): "out_weight",
                ("Add", (3 * dim,)): "in_bias", ("Add", (dim,)): "out_bias"}.get((node.op_type, a.shape))
        if role is not None and not put(role, a.T if a.ndim == 2 else a):
            return None
    for node in r.graph.node:
        gathers = node.op_type == "Gather" and node.name.startswith(scope) and node.input[0] in r.inits
        table = r.consts[node.input[0]] if gathers else None
        side = math.isqrt(table.shape[0]) if table is not None and table.ndim == 2 else 0
        if side and side * side == table.shape[0] and side % 2:  # type: ignore[union-attr]
            if not put("table", table):  # type: ignore[arg-type]
                return None
            table_name = node.input[0]
    whole = {"in_weight", "out_weight", "table"} <= set(found) and ("in_bias" in found) == ("out_bias" in found)
    return (found, table_name) if whole else None


def _window(table: np.ndarray) -> int:
    """The window of a relative position table of (2 window - 1)^2 rows."""
    return (math.isqrt(table.shape[0]) + 1) // 2


def _shift(x: np.ndarray, y: np.ndarray, arrays: dict[str, np.ndarray]) -> Optional[int]:
    """The shift whose WindowAttention gives ``y`` for ``x``, or None: 0 where a window covers the grid (no roll at
    this size, whatever the module would do at another), else half a window (Swin's odd blocks) first."""
    table = np.asarray(arrays["table"], np.float64)
    heads, window = table.shape[1], _window(table)
    args = [np.asarray(arrays[k], np.float64) if k in arrays else None
            for k in ("in_weight", "in_bias", "out_weight", "out_bias")]
    for shift in dict.fromkeys([0, window // 2, *range(1, window)]):
        want, _ = window_attention(x.astype(np.float64), *args, table, heads, window, shift)
        if y.shape == want.shape and np.abs(y - want).max() <= 1e-4 * np.abs(want).max() + 1e-5:
            return shift
    return None


@starts("Pad")
def shifted_window_attention(r: Reader, node) -> bool:
    """Reads the window attention whose scope the Pad ``node`` starts as one WindowAttention; False where the
    nodes are not one."""
    source, scope = node.input[0], _scope(node)
    shape = r.shape(r.values[source]) if source in r.values and rank(r.values[source][1]) == 4 else None
    end = _output(r, r.producer.get(node.output[0], -1), scope) if scope and shape is not None else None
    nodes = _needed(r, source, end) if end is not None else None
    found = _weights(r, nodes, scope, shape[-1]) if nodes else None  # type: ignore[index]
    if found is None:
        return False
    arrays, table_name = found
    x = np.random.default_rng(0).normal(size=(r.batch or 2, *shape)).astype(np.float32)  # type: ignore[misc]
    y = evaluate(r, source, nodes, end, x)  # type: ignore[arg-type]
    shift = _shift(x, y, arrays) if y is not None else None
    if shift is None:
        return False
    table = arrays["table"]
    layer = WindowAttention(table.shape[1], _window(table), shift, bias="in_bias" in arrays)
    r.emit(node, layer, [r.values[source]], r.values[source][1], hint(node, "wattn", table_name),
           r.weights(node, arrays), out=end)
    r.skip.update(nodes)  # type: ignore[arg-type]
    return True


def _w_roll(w: Writer, x: str, axis: int, by: int, size: int, name: str) -> str:
    """``x`` rolled back by ``by`` along ``axis`` (NumPy's roll by -by), as torch writes a roll: two Slices
    joined."""
    if by % size == 0:
        return x
    ax = w.ints(name + "_axis", [axis])
    w.add("Slice", [x, w.ints(name + "_from", [by]), w.ints(name + "_size", [size]), ax], name + "_tail",
          name + "_Slice_tail")
    w.add("Slice", [x, w.ints(name + "_zero", [0]), w.ints(name + "_by", [by]), ax], name + "_head",
          name + "_Slice_head")
    w.add("Concat", [name + "_tail", name + "_head"], name, name + "_Concat", axis=axis)
    return name


def _w_windows(w: Writer, x: str, p: str, shape: list[int], back: bool) -> str:
    """(n, rows, cols, C) to (n * windows, window^2, C) by a Reshape, a Transpose and a Reshape; ``back``: the
    reverse (``shape``: rows // k, k, cols // k, k, C in the grid's order)."""
    r1, k1, r2, k2, c = shape
    first = [-1, r1, r2, k1, k2, c] if back else [-1, r1, k1, r2, k2, c]
    last = [-1, r1 * k1, r2 * k2, c] if back else [-1, k1 * k2, c]
    w.add("Reshape", [x, w.ints(p + "_split", first)], p + "_split_out", p + "_Reshape_split")
    w.add("Transpose", [p + "_split_out"], p + "_moved", p + "_Transpose", perm=[0, 1, 3, 2, 4, 5])
    w.add("Reshape", [p + "_moved", w.ints(p + "_join", last)], p, p + "_Reshape_join")
    return p


def _w_scores(w: Writer, n: NodeSpec, parts: str, p: str, plan: swin.Plan, c: int) -> str:
    """q k^T of each window and head (q scaled first), plus the relative position bias and the shift's mask."""
    L, size, area = n.layer, c // n.layer.heads, n.layer.window ** 2
    qkv = p + "qkv"
    w.add("MatMul", [parts, w.init(n, "in_weight", w.state[f"{n.name}.in_weight"].T)], qkv, p + "in_proj")
    if L.bias:
        w.add("Add", [qkv, w.init(n, "in_bias")], p + "qkv_bias", p + "in_bias")
        qkv = p + "qkv_bias"
    w.add("Reshape", [qkv, w.ints(p + "heads_shape", [0, 0, 3, L.heads, size])], p + "heads", p + "Reshape")
    w.add("Transpose", [p + "heads"], p + "qkv_first", p + "Transpose", perm=[2, 0, 3, 1, 4])
    for i, part in enumerate("qkv"):
        w.add("Gather", [p + "qkv_first", w.ints(f"{p}{part}_index", i)], p + part, f"{p}Gather_{part}", axis=0)
    w.add("Mul", [p + "q", w.const(p + "scale", 1 / math.sqrt(size))], p + "q_scaled", p + "Mul")
    w.add("Transpose", [p + "k"], p + "k_t", p + "Transpose_k", perm=[0, 1, 3, 2])
    w.add("MatMul", [p + "q_scaled", p + "k_t"], p + "scores", p + "MatMul_scores")
    w.add("Gather", [w.init(n, "table"), w.ints(p + "relative_index", swin.relative_index(L.window))],
          p + "bias_rows", p + "Gather_table", axis=0)
    w.add("Transpose", [p + "bias_rows"], p + "bias", p + "Transpose_bias", perm=[2, 0, 1])
    w.add("Add", [p + "scores", p + "bias"], p + "biased", p + "Add_bias")
    if not plan.shifted:
        return p + "biased"
    windows = swin.mask(plan, L.window).shape[0]
    by_window = w.ints(p + "by_window_shape", [-1, windows, L.heads, area, area])
    w.add("Reshape", [p + "biased", by_window], p + "by_window", p + "Reshape_by_window")
    w.add("Add", [p + "by_window", w.tensor(p + "mask", swin.mask(plan, L.window)[:, None])], p + "masked",
          p + "Add_mask")
    w.add("Reshape", [p + "masked", w.ints(p + "flat", [-1, L.heads, area, area])], p + "masked_flat",
          p + "Reshape_masked")
    return p + "masked_flat"


@writes(WindowAttention)
def _w_window_attention(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """Pad, roll, windows, attention with the gathered bias (and the mask), windows back, roll back and crop: the
    form torch writes, which from_onnx reads back as one layer."""
    L, p = n.layer, n.name + "/"
    h, wd, c = w.shapes[n.inputs[0]]
    k, plan = L.window, swin.plan(h, wd, L.window, L.shift)
    w.add("Pad", [ins[0], w.ints(p + "pads", [0, 0, 0, 0, 0, plan.pad_bottom, plan.pad_right, 0])], p + "padded",
          p + "Pad")
    grid = _w_roll(w, _w_roll(w, p + "padded", 1, plan.shift_rows, plan.rows, p + "roll_rows"), 2,
                   plan.shift_cols, plan.cols, p + "roll_cols")
    grid_shape = [plan.rows // k, k, plan.cols // k, k, c]
    parts = _w_windows(w, grid, p + "windows", grid_shape, back=False)
    w.add("Softmax", [_w_scores(w, n, parts, p, plan, c)], p + "weights", p + "Softmax", axis=-1)
    w.add("MatMul", [p + "weights", p + "v"], p + "mixed", p + "MatMul_values")
    w.add("Transpose", [p + "mixed"], p + "tokens_first", p + "Transpose_back", perm=[0, 2, 1, 3])
    w.add("Reshape", [p + "tokens_first", w.ints(p + "joined_shape", [0, 0, c])], p + "joined", p + "Reshape_back")
    y = p + "projected"
    w.add("MatMul", [p + "joined", w.init(n, "out_weight", w.state[f"{n.name}.out_weight"].T)], y, p + "out_proj")
    if L.bias:
        w.add("Add", [y, w.init(n, "out_bias")], p + "projected_bias", p + "out_bias")
        y = p + "projected_bias"
    grid = _w_windows(w, y, p + "grid", grid_shape, back=True)
    grid = _w_roll(w, _w_roll(w, grid, 1, plan.rows - plan.shift_rows, plan.rows, p + "unroll_rows"), 2,
                   plan.cols - plan.shift_cols, plan.cols, p + "unroll_cols")
    crop = [w.ints(p + "crop_from", [0, 0]), w.ints(p + "crop_to", [h, wd]), w.ints(p + "crop_axes", [1, 2])]
    w.add("Slice", [grid, *crop], out, p + "crop")
