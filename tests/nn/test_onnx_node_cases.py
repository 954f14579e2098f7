"""ONNX's own operator test cases, run against ``from_onnx`` and the float64 reference.

Why: our other ONNX tests build files we chose ourselves; these cases are code
we did not write (the generators shipped in the onnx wheel, each with numpy's
expected outputs), so they test the reader against ONNX's semantics rather than
our reading of them. Every case whose one node is an op in ``SUPPORTED`` runs:
its first input is the model's input (its first axis the samples), its other
inputs are initializers holding the case's values. multidev reads logits
(N, F), so an output of another rank is flattened (a Flatten, axis 1) and
several outputs are flattened and joined (a Concat, axis 1); the expected
outputs are compared alike, at the case's rtol and atol. A case the reader
refuses must say why in one line (a MultidevError) and is a skip with that
line, never a pass; a case it reads must give ONNX's numbers.
"""

import re
import warnings

import numpy as np
import pytest

import multidev
from multidev import MultidevError, reference
from multidev.nn import onnx as nn_onnx
from multidev.nn.onnx import SUPPORTED, from_onnx
from multidev.nn.onnx.base import FLOATS

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (pip install 'multidev[onnx]')")
helper, numpy_helper = onnx.helper, onnx.numpy_helper


#: the ops read. SUPPORTED is the string an error lists them in, each with a note ("Clip (to [0, 6], ReLU6, or
#: [0, inf), ReLU)", unbalanced brackets and all), derived from these readers; the first test checks it names each
OPS = set(nn_onnx.base.READERS)


def _cases() -> list:
    """ONNX's node cases of one supported op; numpy's global random state is kept (the generators seed it)."""
    from onnx.backend.test.case.node import collect_testcases

    state = np.random.get_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own overflow notes (Cast to float8...)
        cases = collect_testcases()
    np.random.set_state(state)
    return [c for c in cases if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in OPS]


CASES = _cases()

#: cases that import and give other numbers than ONNX's, each with why
WRONG = {
    name: "training_mode is true: ONNX expects numpy's random mask (the case seeds it); multidev reads Dropout as its "
          "layer, which drops only while training, and the reference predicts in inference (no mask)"
    for name in ("test_training_dropout", "test_training_dropout_default")
}


def _array(value) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def _tensor(value, name: str):
    if isinstance(value, onnx.TensorProto):
        t = onnx.TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    return numpy_helper.from_array(np.asarray(value), name)


def _logits(graph) -> None:
    """Float outputs of another rank than 2, or several, as one (N, F): each flattened, all joined."""
    outs = list(graph.output)
    types = [o.type.tensor_type for o in outs]
    if len(outs) == 1 and len(types[0].shape.dim) == 2 or any(t.elem_type not in FLOATS for t in types):
        return  # already logits, or not float values (which the reader refuses as they are)
    flat = []
    for o, t in zip(outs, types):
        if len(t.shape.dim) == 2:
            flat.append(o.name)
            continue
        graph.node.append(helper.make_node("Flatten", [o.name], [o.name + ".flat"], name=f"harness flatten {o.name}"))
        flat.append(o.name + ".flat")
    if len(flat) > 1:
        graph.node.append(helper.make_node("Concat", flat, ["harness.out"], name="harness concat", axis=1))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(flat[0] if len(flat) == 1 else "harness.out",
                                                      types[0].elem_type, ["N", "F"]))


def _file(case, path) -> None:
    """The case's model with its inputs after the first as initializers, its outputs as one (N, F)."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph, inputs = model.graph, case.data_sets[0][0]
    graph.initializer.extend(_tensor(v, i.name) for i, v in zip(graph.input[1:], inputs[1:]))
    del graph.input[1:]
    _logits(graph)
    onnx.save(model, str(path))


def test_every_supported_op_has_onnx_cases():
    """Each op the reader supports (each named in SUPPORTED) is one of ONNX's case generators'."""
    assert all(re.search(rf"(^|, ){op}\b", SUPPORTED) for op in OPS)
    assert OPS == {c.model.graph.node[0].op_type for c in CASES}


def _params() -> list:
    """One test per case, named as ONNX names it; a case known to give other numbers is a strict xfail."""
    marks = lambda name: [pytest.mark.xfail(strict=True, reason=WRONG[name])] if name in WRONG else []  # noqa: E731
    return [pytest.param(c, id=c.name, marks=marks(c.name)) for c in CASES]


@pytest.mark.parametrize("case", _params())
def test_onnx_node_case(tmp_path, case):
    path = tmp_path / f"{case.name}.onnx"
    _file(case, path)
    try:
        graph = from_onnx(path, warn=False)
    except MultidevError as exc:
        assert "\n" not in str(exc), f"the reader's refusal is not one line: {exc}"
        pytest.skip(f"{case.model.graph.node[0].op_type} refused: {exc}")
    inputs, outputs = case.data_sets[0]
    x = _array(inputs[0]).astype(np.float64)
    want = np.concatenate([_array(o).reshape(len(x), -1) for o in outputs], axis=1).astype(np.float64)
    spec = multidev.ModelSpec(case.name, tuple(x.shape[1:]), want.shape[1], graph=graph)
    got = reference.predict(spec, spec.init(0), x)
    np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
