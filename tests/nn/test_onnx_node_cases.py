"""ONNX's own operator test cases, run against ``from_onnx`` and the float64 reference.

Why: our other ONNX tests build files we chose ourselves; these cases are code
we did not write (the generators shipped in the onnx wheel, each with numpy's
expected outputs), so they test the reader against ONNX's semantics rather than
our reading of them. Every case whose one node is an op in ``SUPPORTED`` runs:
its first input is the model's input (its first axis the samples), its other
inputs are initializers holding the case's values. multidev reads logits
(N, F), so an output of another rank is flattened (a Flatten, axis 1) and
several outputs are flattened and joined (a Concat, axis 1); the expected
outputs are compared alike, at the case's rtol and atol.

One test per op read: it runs that op's generator modules only (all of onnx's
take ~10 s, too long for collection, which each pytest-xdist worker repeats)
and checks each of its cases. A case the reader reads must give ONNX's numbers
(every mismatch is named in the one failure); a case it refuses must say why in
one line (a MultidevError). An op none of whose cases is read is a skip naming
the refusals, never a pass.
"""

import functools
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


#: onnx's generator modules (under onnx.backend.test.case.node) holding an op's one-node cases, where not just the
#: op's name in lower case; from a full collect_testcases() of onnx 1.23, each case's op against the module that made
#: it. CastLike's and Clip's function bodies expand to one Cast or Identity node in some of their "_expanded" cases.
MODULES = {"BatchNormalization": ("batch_normalization",), "Cast": ("cast", "castlike"),
           "Identity": ("clip", "identity")}


def _modules(op: str) -> tuple[str, ...]:
    return MODULES.get(op, (op.lower(),))


@functools.cache
def _cases(op: str) -> tuple:
    """ONNX's one-node cases of ``op``, from its generator modules only; numpy's global random state is kept.

    A generator module records its cases (``expect``, into the package's globals) while its classes are made, at its
    first import; a module already imported (by an earlier op, or by someone's collect_testcases) has its ``export*``
    methods run again, each after seeding numpy as onnx's metaclass (case.base._Exporter) does.
    """
    import importlib
    import sys

    from onnx.backend.test.case import node as gen
    from onnx.backend.test.case.base import Base

    saved = gen._NodeTestCases, gen._existing_names, gen._TargetOpType
    gen._NodeTestCases, gen._existing_names, gen._TargetOpType = [], {}, None
    state = np.random.get_state()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the generators' own overflow notes (Cast to float8...)
            for name in _modules(op):
                name = f"{gen.__name__}.{name}"
                imported = name in sys.modules
                module = importlib.import_module(name)
                if imported:
                    for cls in vars(module).values():
                        if isinstance(cls, type) and issubclass(cls, Base) and cls.__module__ == name:
                            for key in [k for k in vars(cls) if k.startswith("export")]:
                                np.random.seed(seed=0)
                                getattr(cls, key)()
        cases = gen._NodeTestCases
    finally:
        gen._NodeTestCases, gen._existing_names, gen._TargetOpType = saved
        np.random.set_state(state)
    return tuple(c for c in cases if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type == op)


#: cases that import and give other numbers than ONNX's, each with why; left out of their op's test and run apart,
#: each a strict xfail (test_onnx_node_case_known_wrong), so that they are seen to differ still
WRONG = {
    name: ("Dropout", "training_mode is true: ONNX expects numpy's random mask (the case seeds it); multidev reads "
                      "Dropout as its layer, which drops only while training, and the reference predicts in inference "
                      "(no mask)")
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


def _check(case, path) -> str | None:
    """None when the case imports and gives ONNX's numbers; else the refusal (one line) or the mismatch, as a line."""
    _file(case, path)
    try:
        graph = from_onnx(path, warn=False)
    except MultidevError as exc:
        if "\n" in str(exc):  # a failure, not an AssertionError, which test_onnx_node_case_known_wrong expects
            pytest.fail(f"{case.name}: the reader's refusal is not one line: {exc}")
        return f"refused: {exc}"
    inputs, outputs = case.data_sets[0]
    x = _array(inputs[0]).astype(np.float64)
    want = np.concatenate([_array(o).reshape(len(x), -1) for o in outputs], axis=1).astype(np.float64)
    spec = multidev.ModelSpec(case.name, tuple(x.shape[1:]), want.shape[1], graph=graph)
    got = reference.predict(spec, spec.init(0), x)
    try:
        np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
    except AssertionError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        ends = [i for i, line in enumerate(lines) if line.startswith(("ACTUAL", "x:"))] + [len(lines)]
        return "mismatch: " + "; ".join(lines[:ends[0]])  # the tolerance and differences, not the arrays
    return None


def test_every_supported_op_is_named():
    """Each op the reader supports is named in SUPPORTED (each has ONNX cases: test_onnx_node_cases asserts it)."""
    assert all(re.search(rf"(^|, ){op}\b", SUPPORTED) for op in OPS)


@pytest.mark.parametrize("op", sorted(OPS))
def test_onnx_node_cases(tmp_path, op):
    """Each of the op's cases (bar WRONG's) imports and gives ONNX's numbers, or is refused in one line."""
    cases = _cases(op)
    assert cases, f"onnx has no one-node {op} case in the modules {_modules(op)}"
    wrong = {name for name, (of, _) in WRONG.items() if of == op}
    assert wrong <= {c.name for c in cases}, f"WRONG names cases onnx no longer has: {wrong}"
    results = {c.name: _check(c, tmp_path / f"{c.name}.onnx") for c in cases if c.name not in wrong}
    mismatches = [f"{name}: {r}" for name, r in results.items() if r and r.startswith("mismatch")]
    assert not mismatches, f"{len(mismatches)} of {len(results)} {op} cases differ from ONNX's:\n" + "\n".join(
        mismatches)
    refused = [f"{name} {r}" for name, r in results.items() if r]
    if len(refused) == len(results):
        pytest.skip(f"{op}: all {len(results)} cases refused, as {refused[0]}")


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.xfail(strict=True, raises=AssertionError,
                                                                             reason=why))
                                  for name, (_, why) in WRONG.items()])
def test_onnx_node_case_known_wrong(tmp_path, name):
    """The cases WRONG names still import and still differ (strict: one that matches now is a failure)."""
    (case,) = [c for c in _cases(WRONG[name][0]) if c.name == name]
    result = _check(case, tmp_path / f"{name}.onnx")
    if result and result.startswith("refused"):
        pytest.fail(f"{name} no longer imports: {result}")  # not the expected failure, which is a mismatch
    assert result is None, f"{name}: {result}"
