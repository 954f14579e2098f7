"""A definition as a graph of layers (a DAG), the forms that write one, and the flat graph every engine builds.

Three ways to write a definition, all ending in one :class:`Graph`:

- ``Sequential(*items)``: each item on the last one's output;
- ``Residual(*body, shortcut=None)``: ``body(x) + shortcut(x)`` (``x`` itself
  without a shortcut);
- the functional form, as Keras users know it: ``x = Input()``,
  ``y = Conv2d(8, 3)(x)``, ``Add()(y, x)``, then ``Model(x, y)``.

A :class:`Graph` is the definition flattened: nodes in an order where every
input comes first, each with its canonical name (``stage1.block1.conv1``),
its layer and the names of its inputs. Names are the layer's own, or the
layer's kind numbered within its scope (``conv1``, ``bn2``); a named
``Sequential`` or ``Residual`` is a scope. A graph is data: it is stored in
checkpoints as JSON and read back without running any code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

from multidev.errors import MultidevError
from multidev.nn.layers import LAYERS, Add, Dense, Dropout, Layer, Param, Shape, State
from multidev.nn.node import Input, Node, Scope, current

FORMAT = "multidev-model/1"
#: (means, stds) per channel: an exported file's own input normalisation
Normalization = tuple[tuple[float, ...], tuple[float, ...]]


Item = Union[Layer, "Sequential", "Residual"]


class _Block:
    """A composite: its items applied within a scope of its own when named, else in its caller's."""

    kind = "block"

    def __init__(self, name: Optional[str]) -> None:
        self.name = name

    def __call__(self, x: Node) -> Node:
        scope = Scope(self.kind, self.name, current[-1]) if self.name is not None or self.kind == "res" \
            else current[-1]
        current.append(scope)
        try:
            return self.run(x)
        finally:
            current.pop()

    def run(self, x: Node) -> Node:
        raise NotImplementedError

    def graph(self) -> "Graph":
        """This definition flattened (with a fresh input)."""
        x = Input()
        return Model(x, self(x)).graph()


def _chain(items: Sequence[Item], x: Node) -> Node:
    for item in items:
        if isinstance(item, type):
            raise MultidevError(f"nn.{item.__name__} is a kind of layer, not a layer: write nn.{item.__name__}(...)")
        if not callable(item):
            raise MultidevError(f"{item!r} is not a layer: give Sequential and Residual layers of multidev.nn")
        x = item(x)
    return x


class Sequential(_Block):
    """Each item applied to the previous one's output."""

    kind = "seq"

    def __init__(self, *items: Item, name: Optional[str] = None) -> None:
        super().__init__(name)
        self.items = items

    def run(self, x: Node) -> Node:
        return _chain(self.items, x)


class Residual(_Block):
    """``body(x) + shortcut(x)``: the shortcut is ``x`` itself, or the given layers (e.g. a 1x1 Conv2d)."""

    kind = "res"

    def __init__(self, *body: Item, shortcut: Optional[Item | Sequence[Item]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(name)
        self.body = body
        self.shortcut = () if shortcut is None else tuple(shortcut) if isinstance(shortcut, (list, tuple)) \
            else (shortcut,)

    def run(self, x: Node) -> Node:
        return Add(name="add")(_chain(self.body, x), _chain(self.shortcut, x))


class Model:
    """The functional form's definition: from ``inputs`` (an ``Input()``) to ``outputs``."""

    def __init__(self, inputs: Node, outputs: Node) -> None:
        self.inputs, self.outputs = inputs, outputs

    def graph(self) -> "Graph":
        order = _reachable(self.outputs)
        if self.inputs not in order:
            raise MultidevError("the model's output does not depend on its input: build it from nn.Input()")
        nodes = sorted(order, key=lambda n: n.order)
        names = _Names(n for n in nodes if n.layer is not None)
        specs, name_of = [], {self.inputs: "input"}
        for node in nodes:
            if node.layer is None:
                if node is not self.inputs:
                    raise MultidevError("the model has a second nn.Input(): one input per model")
                continue
            name_of[node] = names.name(node)
            specs.append(NodeSpec(name_of[node], node.layer, tuple(name_of[i] for i in node.inputs)))
        return Graph(tuple(specs))


def _reachable(out: Node) -> set[Node]:
    seen, todo = set(), [out]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(node.inputs)
    return seen


class _Names:
    """Canonical names: a layer's own, else its kind numbered within its scope; scopes likewise.

    A number is skipped where a layer of the same scope has that name of its own (``Dense(name="fc1")``
    after an unnamed ``Dense``): the user named one layer ``fc1``, so the other is ``fc2``.
    """

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.scopes: dict[Scope, str] = {}
        self.taken: set[str] = set()
        self.given: set[str] = set()
        nodes = list(nodes)
        for n in nodes:  # scopes numbered in node order, as naming them meets them
            self.prefix(n.scope)
        #: the names layers were given
        self.given = {self.prefix(n.scope) + n.layer.name for n in nodes if n.layer.name}

    def _next(self, prefix: str, kind: str) -> str:
        key = (prefix, kind)
        while True:
            self.counts[key] = self.counts.get(key, 0) + 1
            name = f"{prefix}{kind}{self.counts[key]}"
            if name not in self.given:
                return name

    def prefix(self, scope: Optional[Scope]) -> str:
        if scope is None:
            return ""
        if scope not in self.scopes:
            outer = self.prefix(scope.parent)
            self.scopes[scope] = (outer + scope.name if scope.name else self._next(outer, scope.kind)) + "."
        return self.scopes[scope]

    def name(self, node: Node) -> str:
        prefix = self.prefix(node.scope)
        name = prefix + node.layer.name if node.layer.name else self._next(prefix, node.layer.kind)
        if name in self.taken:
            raise MultidevError(f"two layers are named {name!r}: give each layer of a scope its own name")
        self.taken.add(name)
        return name


@dataclass(frozen=True)
class NodeSpec:
    name: str
    layer: Layer
    inputs: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Graph:
    """A definition flattened: every node after its inputs; the last node is the output (the logits).

    Two graphs are equal when their data (:meth:`to_dict`) is. ``weights``:
    initial values that came with the definition (an imported ONNX file's),
    used instead of the seed's; ``source``: the file it was read from, which is
    how the workers of a job get it.
    """

    nodes: tuple[NodeSpec, ...]
    weights: Optional[State] = field(default=None, repr=False)
    source: Optional[str] = None
    #: (means, stds) an exported file applied to its input before this network (``multidev export`` writes it)
    normalization: Optional[Normalization] = field(default=None, repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(repr(self.to_dict()))

    def graph(self) -> "Graph":
        return self

    def resolved(self, num_classes: Optional[int]) -> "Graph":
        """The graph with a last ``Dense`` of open width given the data's class count."""
        last = self.nodes[-1]
        if isinstance(last.layer, Dense) and last.layer.out_features is None and num_classes is not None:
            layer = Dense(num_classes, bias=last.layer.bias, name=last.layer.name)
            return Graph(self.nodes[:-1] + (NodeSpec(last.name, layer, last.inputs),), self.weights, self.source,
                         self.normalization)
        return self

    def dropouts(self, in_shape: Shape) -> list[tuple[str, float, Shape]]:
        """(node name, rate, shape of one sample's values) of every Dropout: where the core draws masks."""
        shapes = self.shapes(in_shape)
        return [(n.name, float(n.layer.p), n.layer.mask_shape(shapes[n.inputs[0]])) for n in self.nodes
                if isinstance(n.layer, Dropout)]

    def shapes(self, in_shape: Shape) -> dict[str, Shape]:
        """Every node's output shape for inputs of ``in_shape``; a layer that does not fit is one line."""
        shapes: dict[str, Shape] = {"input": tuple(in_shape)}
        for node in self.nodes:
            shapes[node.name] = node.layer.infer(node.name, [shapes[i] for i in node.inputs])
        return shapes

    def params(self, in_shape: Shape, num_classes: Optional[int] = None) -> list[Param]:
        """Every parameter and running statistic, canonical name ``node.param``, in the graph's order.

        Checked first: every layer fits its input, and the output is one value per class.
        """
        graph = self.resolved(num_classes)
        shapes = graph.shapes(in_shape)
        out = shapes[graph.nodes[-1].name]
        if num_classes is not None and out != (num_classes,):
            do = (f"end it with Dense({num_classes}), or Dense() to take the data's count" if len(out) == 1 else
                  "put Flatten or GlobalAvgPool before its last Dense, which works on the last axis alone")
            raise MultidevError(f"the model ends in {out} values per sample, the data has {num_classes} classes: {do}")
        return [Param(f"{n.name}.{p}", shape, role) for n in graph.nodes
                for p, shape, role in n.layer.params([shapes[i] for i in n.inputs])]

    def to_dict(self) -> dict[str, Any]:
        """The definition as JSON-ready data: what a checkpoint stores."""
        return {"format": FORMAT, "nodes": [
            {"name": n.name, "layer": type(n.layer).__name__, "args": n.layer.arguments(), "inputs": list(n.inputs)}
            for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Graph":
        """A definition read back from data: no code runs; an unknown layer or a newer format is one line."""
        fmt = str(data.get("format", "")) if isinstance(data, dict) else ""
        if not fmt.startswith("multidev-model/"):
            raise MultidevError(f"not a multidev model definition (format {fmt!r})")
        if fmt != FORMAT:
            raise MultidevError(f"the model definition is {fmt}, from a newer multidev (this one reads {FORMAT}): "
                                f"upgrade multidev")
        nodes: list[NodeSpec] = []
        known = {"input"}  # the names an input may take: the model's, and every node's so far
        for i, n in enumerate(data.get("nodes") or [None]):
            try:
                name, layer, args, inputs = n["name"], n["layer"], n["args"], tuple(n["inputs"])
            except (TypeError, KeyError):
                raise MultidevError(f"node {i} of the model definition is not a layer's name, layer, args and "
                                    f"inputs: write it as a checkpoint or to_dict() holds it") from None
            if layer not in LAYERS:
                raise MultidevError(f"layer {layer!r} of node {name!r} is unknown to this multidev "
                                    f"(it knows {', '.join(LAYERS)}): upgrade multidev")
            missing = [x for x in inputs if x not in known]
            if missing or not inputs:
                raise MultidevError(f"node {name!r} takes {', '.join(map(repr, missing)) or 'no input'}, not a node "
                                    f"before it: list every node after its inputs ('input' is the model's input)")
            try:
                built = LAYERS[layer](**args)
            except TypeError:
                raise MultidevError(f"node {name!r}: {layer} takes no argument {', '.join(map(repr, args))} of this "
                                    f"multidev's: the definition is from a newer multidev, upgrade multidev") from None
            nodes.append(NodeSpec(name, built, inputs))
            known.add(name)
        return cls(tuple(nodes))
