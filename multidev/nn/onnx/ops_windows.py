"""Windows: Conv, MaxPool, AveragePool (square kernels, one stride; any pads, dilation and groups as
``multidev.nn.windows`` states them), GlobalAveragePool, and ReduceMean (over H and W: GlobalAvgPool; over other
axes: Mean)."""

from __future__ import annotations

from multidev.nn import windows as W
from multidev.nn.graph import NodeSpec
from multidev.nn.layers import AvgPool2d, Conv2d, GlobalAvgPool, MaxPool2d, Mean
from multidev.nn.onnx.base import bad, ints, rank, reads, text, writes
from multidev.nn.onnx.base import kind as kind_of
from multidev.nn.onnx.naming import hint
from multidev.nn.onnx.reader import Reader
from multidev.nn.onnx.writer import Writer


def _square(node, attrs: dict, kernel: list[int], layer: str) -> tuple[int, int, int]:
    """(kernel, stride, dilation) of a 2-D window, or one line naming what multidev.nn's ``layer`` lacks."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise bad(node, f"has {what}: multidev.nn's {layer} needs a square 2-D window and one stride and "
                            f"dilation for both axes")
    need(len(kernel) == 2, f"a {len(kernel)}-D window")
    need(kernel[0] == kernel[1], f"kernel {kernel[0]}x{kernel[1]}")
    strides, dilations = ints(attrs.get("strides"), 2, 1), ints(attrs.get("dilations"), 2, 1)
    need(len(set(strides)) == 1, f"strides {strides}")
    need(len(set(dilations)) == 1, f"dilations {dilations}")
    return kernel[0], strides[0], dilations[0]


def _padding(r: Reader, node, attrs: dict, k: int, stride: int, dilation: int) -> W.Padding:
    """ONNX's pads (top, left, bottom, right) or auto_pad as multidev's padding: a number, (rows, columns), the
    four sides or "same"; SAME_LOWER is "same" where its padding is symmetric (checked at the input's size)."""
    mode = text(attrs.get("auto_pad", "NOTSET"))
    if mode == "VALID":
        return 0
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        if mode == "SAME_LOWER" and (stride > 1 or dilation * (k - 1) % 2):
            r.lower.append((node, len(r.layers)))  # the layer emitted next
        return "same"
    if mode != "NOTSET":
        raise bad(node, f"has auto_pad {mode}: ONNX's are NOTSET, VALID, SAME_UPPER and SAME_LOWER")
    top, left, bottom, right = ints(attrs.get("pads"), 4, 0)
    if top == bottom == left == right:
        return top
    return (top, left) if (top, left) == (bottom, right) else (top, bottom, left, right)


@reads("Conv", note="2-D, square kernels")
def _conv(r: Reader, node, attrs: dict) -> None:
    w = r.const(node, 1, "weight")
    if w.ndim != 4:
        raise bad(node, f"is a {w.ndim - 2}-D convolution: multidev.nn's Conv2d is 2-D")
    kernel = ints(attrs.get("kernel_shape"), 2, 0) if "kernel_shape" in attrs else list(w.shape[2:])
    k, stride, dilation = _square(node, attrs, kernel, "Conv2d")
    padding = _padding(r, node, attrs, k, stride, dilation)
    b = r.optional(node, 2)
    params = r.weights(node, {"weight": w, **({} if b is None else {"bias": b})})
    layer = r.make(node, Conv2d, int(w.shape[0]), k, stride=stride, padding=padding, bias=b is not None,
                   groups=int(attrs.get("group", 1)), dilation=dilation)
    r.emit(node, layer, [r.image(node)], "img", hint(node, "conv", node.input[1]), params)


@reads("MaxPool", "AveragePool")
def _pool(r: Reader, node, attrs: dict) -> None:
    cls = MaxPool2d if node.op_type == "MaxPool" else AvgPool2d
    if int(attrs.get("storage_order", 0)):
        raise bad(node, "has storage_order 1 (column-major indices): multidev.nn's MaxPool2d gives no indices")
    if set(ints(attrs.get("dilations"), 2, 1)) != {1}:
        raise bad(node, f"has dilations {ints(attrs['dilations'], 2, 1)}: multidev.nn's {cls.__name__} has no "
                        f"dilation")
    k, stride, _ = _square(node, attrs, ints(attrs.get("kernel_shape"), 0, 0), cls.__name__)
    padding = _padding(r, node, attrs, k, stride, 1)
    extra = {}
    if cls is AvgPool2d and padding != 0:  # without padding, what the divisor counts is the same either way
        extra["count_include_pad"] = bool(int(attrs.get("count_include_pad", 0)))
    layer = r.make(node, cls, k, None if stride == k else stride, padding=padding,
                   ceil_mode=bool(int(attrs.get("ceil_mode", 0))), **extra)
    r.emit(node, layer, [r.image(node)], "img", hint(node, cls.kind))


def _pooled(r: Reader, node, keepdims: bool) -> None:
    """Kept (N, C, 1, 1) unless only a Flatten (or a Reshape to (N, -1)) reads it: multidev's (N, C), "gap"."""
    x = r.image(node)
    flat = keepdims and all(i >= 0 and r.graph.node[i].op_type in ("Flatten", "Reshape")
                            for i in r.readers.get(node.output[0], [-1]))
    kind = "gap" if flat else "img" if keepdims else "feat"
    r.emit(node, GlobalAvgPool(keepdims=keepdims and not flat), [x], kind, hint(node, "gap"))


@reads("GlobalAveragePool")
def _gap(r: Reader, node, attrs: dict) -> None:
    _pooled(r, node, True)


@reads("ReduceMean", note="over a sample's axes (an image's H and W: GlobalAvgPool)")
def _mean(r: Reader, node, attrs: dict) -> None:
    """torch's x.mean((2, 3)) as GlobalAvgPool, other axes as Mean: axes an attribute below opset 18, an input
    from 18."""
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = r.const(node, 1, "axes").reshape(-1).tolist()
    keepdims = bool(int(attrs.get("keepdims", 1)))
    x = r.value(node)
    if not axes or x[1] == "gap":
        raise bad(node, f"averages over {'pooled (N, C, 1, 1) values' if axes else 'every axis'}: "
                        f"multidev.nn's Mean averages a sample's axes, the batch kept")
    if x[1] == "img" and sorted(int(a) % 4 for a in axes) == [2, 3]:
        _pooled(r, node, keepdims)
        return
    sample = tuple(r.axis(node, int(a), x, "averages") for a in axes)
    layer = r.make(node, Mean, sample, keepdims)
    rank_out = rank(x[1]) - (0 if keepdims else len(sample))
    r.emit(node, layer, [x], kind_of(rank_out), hint(node, "mean"))


def _pads(padding: W.Padding, sides: W.Sides) -> dict:
    """multidev's padding as ONNX's attributes: "same" as auto_pad SAME_UPPER, else pads (top, left, bottom,
    right); ``sides``: the padding at the written input's size."""
    if padding == "same":
        return {"auto_pad": "SAME_UPPER"}
    top, bottom, left, right = sides
    return {"pads": [top, left, bottom, right]}


@writes(Conv2d)
def _w_conv(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """A dilated "same" as the pads it gives at the written size: onnxruntime runs no dilation with auto_pad."""
    L = n.layer
    inputs = ins + [w.init(n, "weight")] + ([w.init(n, "bias")] if L.bias else [])
    sides = L.sides(w.shapes[n.inputs[0]])
    w.add("Conv", inputs, out, n.name, kernel_shape=[L.kernel_size] * 2, strides=[L.stride] * 2,
          dilations=[L.dilation] * 2, group=L.groups, **_pads(L.padding if L.dilation == 1 else sides, sides))


@writes(MaxPool2d, AvgPool2d)
def _w_pool(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    L = n.layer
    extra = {"count_include_pad": int(L.count_include_pad)} if type(L) is AvgPool2d else {}
    w.add("MaxPool" if type(L) is MaxPool2d else "AveragePool", ins, out, n.name, kernel_shape=[L.kernel_size] * 2,
          strides=[L.step] * 2, ceil_mode=int(L.ceil_mode), **_pads(L.padding, L.sides(w.shapes[n.inputs[0]])),
          **extra)


@writes(GlobalAvgPool)
def _w_gap(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    if n.layer.keepdims:
        w.add("GlobalAveragePool", ins, out, n.name)
        return
    w.add("GlobalAveragePool", ins, n.name + "/pooled", n.name)
    w.add("Flatten", [n.name + "/pooled"], out, n.name + "/Flatten", axis=1)  # (N, C, 1, 1) to multidev's (N, C)


@writes(Mean)
def _w_mean(w: Writer, n: NodeSpec, ins: list[str], out: str) -> None:
    """ReduceMean over the sample's axes (one past them: the batch first), as an attribute below opset 18."""
    axes = list(n.layer.batched(len(w.shapes[n.inputs[0]])))
    keep = int(n.layer.keepdims)
    if w.opset < 18:
        w.add("ReduceMean", ins, out, n.name, axes=axes, keepdims=keep)
    else:
        w.add("ReduceMean", ins + [w.ints(n.name + "/axes", axes)], out, n.name, keepdims=keep)
