"""The torch engine's image layout on CPUs (multidev_torch.cpu_layout): shipped per CPU kind, precision and kind of
network; with MULTIDEV_TORCH_LAYOUT=measure timed once per model, shard shape and precision and kept per CPU kind;
pinned by nchw or nhwc; a run that measured equals one that only ran its choice."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import multidev
from multidev import nn
from multidev.engine import KeptChoices
from multidev.testing import batch
from multidev_torch import cpu_layout


def definition() -> nn.Model:
    x = nn.Input()
    h = nn.ReLU()(nn.BatchNorm()(nn.Conv2d(4, 3, padding=1, bias=False)(x)))
    h = nn.Dropout(0.2)(nn.MaxPool2d(2)(h))
    return nn.Model(x, nn.Dense()(nn.Flatten()(h)))


SPEC = multidev.ModelSpec("layout", (2, 8, 8), 3, graph=definition().graph())


@pytest.fixture
def unpinned(monkeypatch, tmp_path):
    """No pin, and a choices file of this test's own (in tmp_path, as ~/.cache would hold it)."""
    monkeypatch.delenv(cpu_layout.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    kept = KeptChoices("layout.json", cpu_layout.FORMS, cpu_layout._folder)
    monkeypatch.setattr(cpu_layout, "_kept", kept)
    return kept


@pytest.fixture
def measuring(unpinned, monkeypatch):
    """Runs that time both layouts (``MULTIDEV_TORCH_LAYOUT=measure``), with a choices file of the test's own."""
    monkeypatch.setenv(cpu_layout.ENV, "measure")
    return unpinned


def as_kind(monkeypatch, kind: str) -> None:
    monkeypatch.setattr(cpu_layout, "this_cpu_kind", lambda: kind)


def never() -> float:
    raise AssertionError("a run that takes the shipped layout times none")


def replicas(rows=8, **setup):
    made = multidev.Setup(SPEC, tuple(multidev.resolve_devices(devices=2)), rows=rows, **setup)
    return multidev.replicate(multidev.load_backend("torch"), made, SPEC.init(1))


def test_a_run_times_both_layouts_once_and_keeps_the_choice(measuring, tmp_path):
    reps = replicas()
    assert len(measuring.measured) == 1, "the layout was not timed"
    assert cpu_layout.describe().startswith("measured on this CPU")
    files = list(tmp_path.glob("multidev/torch/*/layout.json"))
    assert len(files) == 1, f"the choice is not kept per CPU kind: {files}"
    kept = json.loads(files[0].read_text())
    assert list(kept.values()) in (["nchw"], ["nhwc"]) and list(kept)[0].endswith(":4:fp32")  # 8 rows, 2 devices
    assert ("channels_last" in reps.forms) == (list(kept.values()) == ["nhwc"])
    measuring.forget()
    replicas()
    assert len(measuring.measured) == 1, "a later run timed again instead of reading the kept choice"
    assert "NHWC (channels_last) for 1" in cpu_layout.describe() or "NCHW for 1" in cpu_layout.describe()


def test_a_run_that_measured_equals_one_pinned_to_its_choice(measuring, monkeypatch):
    """The timing runs on a copy: the replicas' state and first step are those of a run that never timed."""
    x, y = batch(SPEC, 8)
    shards = dataclasses.replace(multidev.cut(x, y, (4, 4)), masks={
        node: [np.ones((4, *shape), np.float32)] * 2 for node, _, shape in SPEC.dropouts()})
    measured = replicas()
    form = "nhwc" if "channels_last" in measured.forms else "nchw"
    monkeypatch.setenv(cpu_layout.ENV, form)
    pinned = replicas()
    for reps in (measured, pinned):
        reps.train_step(reps.place(shards), lr=0.1)
    got, want = measured.state(), pinned.state()
    assert all(np.array_equal(got[n], want[n]) for n in want), "timing the layouts changed the run"


def test_nhwc_when_it_is_the_faster(measuring, monkeypatch):
    monkeypatch.setattr(cpu_layout, "_timer", lambda model, setup, rows, form: lambda: {"nchw": 2.0, "nhwc": 1.0}[form])
    reps = replicas()
    x, y = batch(SPEC, 8)
    placed = reps.place(multidev.cut(x, y, (4, 4)))
    assert reps.forms == {"channels_last"} and placed[0].x.is_contiguous(memory_format=torch.channels_last)
    assert "NHWC (channels_last) for 1" in cpu_layout.describe()


@pytest.mark.parametrize("setup", [dict(dtype="float64"), dict(rows=None)], ids=["float64", "no-batch-size"])
def test_what_measures_nothing(measuring, setup):
    reps = replicas(**setup)
    assert measuring.measured == [] and reps.forms == frozenset()


def test_the_environment_pins_the_layout(monkeypatch):
    monkeypatch.setenv(cpu_layout.ENV, "nhwc")
    assert replicas().forms == {"channels_last"} and "MULTIDEV_TORCH_LAYOUT=nhwc" in cpu_layout.describe()
    monkeypatch.setenv(cpu_layout.ENV, "NCHW")
    assert replicas().forms == frozenset()
    monkeypatch.setenv(cpu_layout.ENV, "channels_last")
    for call in (replicas, cpu_layout.describe):  # a run, and multidev backends' line
        with pytest.raises(multidev.MultidevError, match="give one of nchw, nhwc") as err:
            call()
        assert "\n" not in str(err.value)


def test_a_jobs_processes_take_the_kept_choice_and_time_nothing(measuring):
    from multidev_torch.model import build
    job = multidev.Setup(SPEC, (multidev.Device.parse("cpu:0"),), rows=8, group=multidev.ProcessGroup(rank=1, size=2))
    assert cpu_layout.chosen(job, build(SPEC), cuda=False) == frozenset() and measuring.measured == []
    replicas()  # one process of 2 devices and 8 rows: the job's shard shape (4 rows), timed and kept
    assert cpu_layout.chosen(job, build(SPEC), cuda=False) == replicas().forms and len(measuring.measured) == 1


@pytest.mark.parametrize("kind, precision, network, form", [
    ("intel-xeon-amx", "fp32", "resnet18", "nchw"), ("intel-xeon-amx", "bf16", "resnet18", "nhwc"),
    ("intel-xeon-amx", "fp32", "mobilenet_v2", "nhwc"), ("intel-xeon-amx", "fp32", "vit", "nchw"),
    ("amd-epyc-zen4", "bf16", "resnet18", "nchw"), ("amd-epyc-zen3", "fp32", "mobilenet_v2", "nhwc"),
    ("intel-avx2", "bf16", "resnet18", "nhwc"), ("aarch64", "fp32", "mobilenet_v2", "nchw")])
def test_a_run_takes_its_kinds_shipped_layout_and_times_nothing(unpinned, monkeypatch, kind, precision, network,
                                                                  form):
    """Per precision and kind of network; a kind never met takes its vendor's nearest table, another CPU NCHW."""
    from multidev_torch.model import build

    as_kind(monkeypatch, kind)
    monkeypatch.setattr(cpu_layout, "_timer", lambda *_: never)
    spec = multidev.ModelSpec(network, (3, 32, 32), 10)
    setup = multidev.Setup(spec, (multidev.Device.parse("cpu:0"),), rows=8, precision=precision)
    assert cpu_layout.chosen(setup, build(spec), cuda=False) == ({"channels_last"} if form == "nhwc" else set())
    assert unpinned.measured == [] and unpinned.counts() == {"nchw": 0, "nhwc": 0}


def test_the_note_says_what_is_shipped_and_what_is_kept(unpinned, monkeypatch):
    as_kind(monkeypatch, "intel-xeon-amx")
    assert cpu_layout.describe().startswith("NCHW; NHWC (channels_last) in bf16 and for networks with depthwise "
                                            "convolutions; shipped for intel-xeon-amx (MULTIDEV_TORCH_LAYOUT=measure")
    as_kind(monkeypatch, "aarch64")
    assert cpu_layout.describe().startswith("NCHW (MULTIDEV_TORCH_LAYOUT=measure")
    unpinned.put("key:4:fp32", "nhwc")
    assert "taken first where kept: measured on this CPU" in cpu_layout.describe()


def test_a_kept_choice_stands_before_the_shipped_one(measuring, monkeypatch):
    """A run after a measuring one computes as it did, whatever its kind ships."""
    monkeypatch.setattr(cpu_layout, "_timer", lambda model, setup, rows, form: lambda: {"nchw": 2.0, "nhwc": 1.0}[form])
    assert replicas().forms == {"channels_last"}
    monkeypatch.delenv(cpu_layout.ENV)
    as_kind(monkeypatch, "aarch64")  # ships NCHW
    assert replicas().forms == {"channels_last"} and len(measuring.measured) == 1
