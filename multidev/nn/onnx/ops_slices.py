"""Parts and joins of a sample: Slice and Split (one Slice per output) along a sample's axis, Gather of one index
(x[:, 0], a Slice then a Flatten or Reshape) or of a run of indices, Concat along a sample's axis, Pad (one Pad
per axis it pads)."""

from __future__ import annotations

import numpy as np

from multidev.nn.graph import NodeSpec
from multidev.nn.layers import Concat, Flatten, Pad, Reshape, Slice
from multidev.nn.onnx.base import TO_END, bad, kind, rank, reads, writes
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.ops_tokens import class_token
from multidev.nn.onnx.reader import Reader, Value
from multidev.nn.onnx.writer import Writer


def _bounds(r: Reader, node, attrs: dict) -> list[tuple[int, int, int, int]]:
    """(start, end, axis, step) per axis of a Slice: attributes below opset 10, constant inputs from 10."""
    if r.opset < 10:
        starts, ends = [int(v) for v in attrs["starts"]], [int(v) for v in attrs["ends"]]
        axes = [int(a) for a in attrs.get("axes", range(len(starts)))]
        return list(zip(starts, ends, axes, [1] * len(starts)))
    starts, ends = (r.const(node, k, what).reshape(-1).tolist() for k, what in ((1, "starts"), (2, "ends")))
    axes, steps = r.optional(node, 3), r.optional(node, 4)
    if len(node.input) > 3 and node.input[3] and axes is None or len(node.input) > 4 and node.input[4] \
            and steps is None:
        r.const(node, 3 if axes is None else 4, "axes and steps")  # one line: they come from computed values
    axes = axes.reshape(-1).tolist() if axes is not None else list(range(len(starts)))
    steps = steps.reshape(-1).tolist() if steps is not None else [1] * len(starts)
    return [(int(s), int(e), int(a), int(k)) for s, e, a, k in zip(starts, ends, axes, steps)]


def _whole(start: int, end: int, step: int) -> bool:
    return start == 0 and end >= TO_END and step == 1


@reads("Slice", note="along a sample's axes, steps of 1 or more")
def _slice(r: Reader, node, attrs: dict) -> None:
    """One Slice per axis; the batch axis may only be taken whole (torch writes x[:, a:b] on axis 1 alone)."""
    x = r.value(node)
    for start, end, axis, step in _bounds(r, node, attrs):
        if step < 1:
            raise bad(node, f"slices with step {step}: multidev.nn's Slice steps forward (1 or more)")
        if axis % rank(x[1]) == 0 and (_whole(start, end, step) or r.batch is not None and start == 0
                                       and end >= r.batch and step == 1):
            continue
        a = r.axis(node, axis, x, "slices")
        if not _whole(start, end, step):
            layer = r.make(node, Slice, a, start, None if end >= TO_END else end, step)
            x = (r.emit(node, layer, [x], x[1], hint(node, "slice")), x[1])
    r.values[node.output[0]] = x


def _sizes(r: Reader, node, attrs: dict, x: Value, a: int) -> list[int]:
    """A Split's sizes: given (an attribute below opset 13, an input from 13), else equal parts of the axis."""
    given = attrs.get("split") if r.opset < 13 else r.optional(node, 1)
    if len(node.input) > 1 and node.input[1] and given is None:
        r.const(node, 1, "split sizes")
    if given is not None:
        return [int(v) for v in np.asarray(given).reshape(-1)]
    shape, n = r.onnx_shape(x), int(attrs.get("num_outputs", len(node.output)))
    if shape is None:
        raise bad(node, "splits into equal parts a value whose size multidev.nn does not know: export with a fixed "
                        "input size")
    size = shape[a]
    part = -(-size // n)  # opset 18's last part is the smaller one; before it the parts are equal
    return [part] * (n - 1) + [size - part * (n - 1)]


@reads("Split", note="along a sample's axis: one Slice per output", outputs=True)
def _split(r: Reader, node, attrs: dict) -> None:
    x = r.value(node)
    a = r.axis(node, int(attrs.get("axis", 0)), x, "splits")
    start = 0
    for out, size in zip(node.output, _sizes(r, node, attrs, x, a)):
        if out:
            r.emit(node, r.make(node, Slice, a, start, start + size), [x], x[1], hint(node, "slice"), out=out)
        start += size


def _drop_axis(r: Reader, node, x: Value, a: int) -> None:
    """x[:, i] after its Slice x[:, i:i + 1]: a Flatten where one axis is left, else a Reshape without it."""
    if rank(x[1]) == 3:
        r.emit(node, Flatten(), [x], "feat", hint(node, "flatten"))
        return
    shape = r.shape(x)
    if shape is None:
        raise bad(node, "takes one index of a value whose size multidev.nn does not know: export with a fixed input "
                        "size")
    out = tuple(d for k, d in enumerate(shape) if k != a % len(shape))
    r.emit(node, Reshape(out), [x], kind(len(out) + 1), hint(node, "reshape"))


@reads("Gather", note="of one index or a run of indices along a sample's axis; of shape values")
def _gather(r: Reader, node, attrs: dict) -> None:
    x = r.value(node)
    index = r.const(node, 1, "indices").astype(np.int64)
    a = r.axis(node, int(attrs.get("axis", 0)), x, "gathers")
    flat = index.reshape(-1).tolist()
    steps = {j - i for i, j in zip(flat, flat[1:])}
    if index.ndim > 1 or len(steps) > 1 or steps and min(steps) < 1 or flat[0] < 0 <= flat[-1]:
        raise bad(node, f"gathers indices {flat[:8]} along a sample's axis: multidev.nn takes one index or a run "
                        f"of evenly spaced ones (a Slice)")
    step = steps.pop() if steps else 1
    stop = flat[-1] + 1 if flat[-1] != -1 else None
    y = (r.emit(node, Slice(a, flat[0], stop, step), [x], x[1], hint(node, "slice")), x[1])
    if index.ndim == 0:
        _drop_axis(r, node, y, a)


@reads("Concat", note="along a sample's axis; a learned token before tokens (ClassToken); of shape values")
def _concat(r: Reader, node, attrs: dict) -> None:
    if class_token(r, node, attrs):
        return
    if any(v in r.syms or v in r.consts for v in node.input):
        raise bad(node, "joins constants or shape values with computed values: multidev.nn joins computed values, "
                        "and a learned token only before tokens (ClassToken)")
    inputs = [r.value(node, k) for k in range(len(node.input))]
    if len({rank(k) for _, k in inputs}) != 1:
        raise bad(node, "joins values of different ranks")
    a = r.axis(node, int(attrs.get("axis", 1)), inputs[0], "joins")
    if len(inputs) == 1:
        r.values[node.output[0]] = inputs[0]
        return
    r.emit(node, Concat(axis=a), inputs, inputs[0][1], hint(node, "concat"))


def _onnx_axis(axis: int) -> int:
    return axis + 1 if axis >= 0 else axis


@writes(Concat)
def _w_concat(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    w.add("Concat", ins, out, n.name, axis=_onnx_axis(n.layer.axis))


@writes(Slice)
def _w_slice(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    L, p = n.layer, n.name + "/"
    bounds = [w.ints(p + name, [v]) for name, v in (("starts", L.start), ("ends", 2 ** 63 - 1 if L.stop is None
                                                    else L.stop), ("axes", _onnx_axis(L.axis)), ("steps", L.step))]
    w.add("Slice", ins + bounds, out, n.name)


@reads("Pad", note="constant, along a sample's axes (one Pad per axis)")
def _pad(r: Reader, node, attrs: dict) -> None:
    """ONNX's pads (every axis's begins, then every axis's ends) as one Pad layer per sample axis padded; a Pad that
    adds nothing (torch's Swin pads its patch merging to even sizes, by 0 where they are) passes its input on."""
    mode = attrs.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
        raise bad(node, f"pads in mode {mode!r}: multidev.nn's Pad adds a constant")
    x = r.value(node)
    if x[1] == "gap":
        raise bad(node, "pads pooled (N, C, 1, 1) values: multidev.nn holds them as (N, C); pad before the pool")
    pads = r.const(node, 1, "pads").reshape(-1).tolist() if r.opset >= 11 else list(attrs.get("pads", []))
    given = r.optional(node, 3) if len(node.input) > 3 and node.input[3] else None
    axes = given.reshape(-1).tolist() if given is not None else list(range(len(pads) // 2))
    value = r.optional(node, 2) if len(node.input) > 2 and node.input[2] else None
    value = float(value.reshape(-1)[0]) if value is not None else float(attrs.get("value", 0.0))
    for a, before, after in zip(axes, pads[:len(axes)], pads[len(axes):]):
        if before or after:
            axis = r.axis(node, int(a), x, "pads")
            x = (r.emit(node, r.make(node, Pad, axis, int(before), int(after), value), [x], x[1],
                        hint(node, "pad")), x[1])
    r.values[node.output[0]] = x


@writes(Pad)
def _w_pad(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    L, p = n.layer, n.name + "/"
    rank = len(w.shapes[n.inputs[0]]) + 1
    axis = L.axis % (rank - 1) + 1
    pads = [L.before if k == axis else 0 for k in range(rank)] + [L.after if k == axis else 0 for k in range(rank)]
    w.add("Pad", ins + [w.ints(p + "pads", pads), w.tensor(p + "value", np.asarray(L.value))], out, n.name,
          mode="constant")
