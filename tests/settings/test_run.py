"""A run's settings: one typed value that the command line, train(), compare and the workers all derive from."""

import dataclasses
import re

import pytest

import multidev
from multidev import MultidevError, Settings
from multidev.cli.parser import parser
from multidev.settings import fields
from multidev.settings.run import from_args

#: for every setting, a value off its default (with the settings it needs beside it)
OFF_DEFAULT = {
    "backend": {"backend": "jax"},
    "devices": {"devices": ("cpu:0", "cpu:2")},
    "gpus": {"gpus": 2},
    "model": {"model": "lenet"},
    "dataset": {"dataset": "synthetic"},
    "layout": {"layout": "NHWC"},
    "image_size": {"image_size": "32x48"},
    "color": {"color": "rgb"},
    "image_column": {"image_column": "img"},
    "label_column": {"label_column": "fine_label"},
    "augment": {"augment": "flip,crop"},
    "normalize": {"normalize": "0.5,0.25/0.2,0.1"},
    "data_dir": {"data_dir": "/data/fashion"},
    "epochs": {"epochs": 3},
    "batch_size": {"batch_size": 7},
    "lr": {"lr": 0.25},
    "seed": {"seed": 5},
    "batchnorm": {"batchnorm": "sync"},
    "dtype": {"dtype": "float64"},
    "optimizer": {"optimizer": "adamw"},
    "momentum": {"momentum": 0.9},
    "nesterov": {"nesterov": True, "momentum": 0.9},
    "weight_decay": {"weight_decay": 5e-4},
    "betas": {"betas": (0.8, 0.95), "optimizer": "adamw"},
    "eps": {"eps": 1e-6, "optimizer": "adamw"},
    "schedule": {"schedule": "cosine"},
    "milestones": {"milestones": (3, 5), "schedule": "step"},
    "factor": {"factor": 0.5, "schedule": "step", "milestones": (2,)},
    "warmup_steps": {"warmup_steps": 4},
    "warmup_epochs": {"warmup_epochs": 1.5},
    "accumulate": {"accumulate": 2},
    "shard": {"shard": "parameters"},
    "precision": {"precision": "bf16"},
    "tf32": {"tf32": True},
    "processes": {"processes": 2},
    "nnodes": {"nnodes": 2},
    "node_rank": {"node_rank": 1, "nnodes": 2},
    "master": {"master": "10.1.2.3:1234"},
    "max_restarts": {"max_restarts": 2, "processes": 2},
    "checkpoint": {"checkpoint": "ck.npz"},
    "checkpoint_every": {"checkpoint_every": "10m", "checkpoint": "ck.npz"},
    "resume": {"resume": "ck.npz"},
    "trace": {"trace": "trace-folder"},
    "json": {"json": "out.json"},
    "plot": {"plot": "curve.png"},
    "progress": {"progress": True},  # the API's default is off, the command line's on
    "prefetch": {"prefetch": False},
    "late_sums": {"late_sums": False},
}


def flagged(command="train"):
    return [f.name for f, meta in fields.fields(Settings) if meta.flag and command in meta.commands]


def test_every_flag_has_a_round_trip_case():
    assert sorted(flagged()) == sorted(OFF_DEFAULT)


@pytest.mark.parametrize("name", sorted(OFF_DEFAULT))
def test_to_argv_and_back_is_the_same_settings(name):
    settings = Settings(**OFF_DEFAULT[name])
    assert getattr(settings, name) != getattr(Settings(), name)
    argv = settings.to_argv()
    assert from_args(parser().parse_args(argv)) == settings, argv


def test_all_fields_at_once_round_trip():
    changed = {}
    for name in ("devices", "model", "epochs", "lr", "batchnorm", "optimizer", "betas", "schedule", "warmup_steps",
                 "accumulate", "processes", "resume", "progress", "prefetch"):
        changed.update(OFF_DEFAULT[name])
    settings = Settings(**changed)
    assert from_args(parser().parse_args(settings.to_argv())) == settings


def test_compare_takes_the_run_flags_of_a_grid():
    compare_flags = flagged("compare")
    assert "progress" in compare_flags and "accumulate" in compare_flags and "processes" in compare_flags
    assert not {"backend", "devices", "gpus", "checkpoint", "resume", "json", "master"} & set(compare_flags)
    settings = Settings(model="lenet", epochs=2, momentum=0.9, progress=False, prefetch=False)
    argv = settings.to_argv("compare")
    args = parser().parse_args([*argv, "--out", "folder", "--devices", "1,2"])
    assert from_args(args) == settings and args.counts == "1,2"


def test_defaults_are_the_quick_starts():
    s = Settings()
    assert (s.backend, s.model, s.dataset, s.epochs, s.batch_size, s.lr, s.seed, s.batchnorm) == (
        "torch", None, "digits", 10, 128, 0.1, 0, "local")  # no model: resnet18, or the checkpoint's
    assert multidev.DEFAULTS["batch_size"] == 128 and s.to_argv() == ["train", "--no-progress"]


def test_train_signature_lists_every_setting():
    import inspect
    params = inspect.signature(multidev.train).parameters
    assert {f.name for f in dataclasses.fields(Settings)} <= set(params)
    assert "batch_size (128)" in multidev.train.__doc__.replace("``", "")


@pytest.mark.parametrize("kwargs, line", [
    ({"epochs": 0}, "epochs must be a whole number of at least 1, got 0"),
    ({"epochs": True}, "epochs must be a whole number of at least 1, got True"),
    ({"batch_size": 2.5}, "batch size must be a whole number of at least 1, got 2.5"),
    ({"lr": float("nan")}, "learning rate must be a positive finite number, got nan"),
    ({"batchnorm": "global"}, "unknown batchnorm 'global': choose one of local, sync"),
    ({"dtype": "float16"}, "unknown dtype 'float16': choose one of float32, float64"),
    ({"precision": "bf16", "dtype": "float64"}, "precision bf16 keeps float32 master weights"),
    ({"accumulate": 0}, "accumulate must be a whole number of micro-batches of at least 1, got 0"),
    ({"warmup_steps": -1}, "warm-up steps must be a whole number of 0 or more, got -1"),
    ({"betas": "0.9"}, "--betas takes two numbers separated by a comma"),
    ({"devices": 2, "gpus": 2}, "give either gpus or devices, not both"),
    ({"devices": "tpu:0"}, "bad device name 'tpu:0'"),
    ({"devices": 0}, "devices must be at least 1, got 0"),
    ({"node_rank": 2, "nnodes": 2}, "--node-rank 2 with --nnodes 2: number the machines 0 to 1"),
    ({"master": "nohost"}, "--master 'nohost': write HOST:PORT"),
    ({"seed": -1}, "seed must be a whole number of 0 or more, got -1"),
    ({"backend": 3}, "backend must be an engine's name (see `multidev backends`) or an engine object, got 3"),
    ({"seed": 1.5}, "seed must be a whole number of 0 or more, got 1.5"),
    ({"betas": 0.9}, "betas takes two numbers, e.g. (0.9, 0.999); got 0.9"),
    ({"milestones": 5.5}, "milestones must be epochs, e.g. (5, 8) or '5,8'; got 5.5"),
    ({"shard_weights": "a,b"}, "shard_weights takes one number per device, e.g. (1, 2); got 'a,b'"),
    ({"dataset": (list(range(1000)), [0])}, "dataset got a tuple: wrap your arrays as multidev.data.arrays("),
    ({"image_size": 100000}, "--image-size takes a size of 1 to 4096"),
    ({"shard": "zero3"}, "shard must be one of none, optimizer, gradients, parameters (ZeRO's stages 0-3), got "
                         "'zero3'"),
    ({"shard": "optimizer", "processes": 2, "checkpoint": "c.npz", "checkpoint_every": "10m"},
     "--checkpoint-every 10m with --shard optimizer over processes: every process gathers the checkpoint at once"),
    ({"shard": "parameters", "nnodes": 2, "trace": "t"}, "--trace with --shard parameters over processes"),
])
def test_a_bad_setting_is_one_line_when_made(kwargs, line):
    with pytest.raises(MultidevError, match=line.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Settings(**kwargs)


def test_one_milestone_may_be_a_number():
    assert Settings(schedule="step", milestones=5).milestones == (5,)


def test_settings_are_frozen_and_replace_checks_again():
    s = Settings(devices=2)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'epochs'"):
        s.epochs = 3
    assert s.replace(gpus=1).devices is None  # one of the pair replaces the other
    with pytest.raises(MultidevError, match="epochs must be"):
        s.replace(epochs=-1)


def test_objects_cannot_reach_other_processes():
    with pytest.raises(MultidevError, match="a Dataset object cannot reach other processes"):
        Settings(dataset=multidev.data.synthetic()).to_argv()
    with pytest.raises(MultidevError, match="shard weights are for one process"):
        Settings(shard_weights=(1, 2)).to_argv()


def test_a_data_set_made_in_python_reaches_other_processes_as_arrays(tmp_path):
    """Its image options applied when it was made: the workers read the saved arrays as they are, class names
    included."""
    from multidev.training.run import dataset_of

    data = multidev.data.synthetic()
    data = dataclasses.replace(data, classes=tuple("abcdefghij"[:data.num_classes]))
    shared = Settings(dataset=data, color="gray", image_size=8).shareable(tmp_path)
    assert (shared.color, shared.image_size, shared.layout) == ("auto", None, "NCHW")
    assert dataset_of(shared, 2).classes == data.classes


def test_ranks_agree_on_what_shapes_training_not_on_paths():
    a = Settings(devices=2, checkpoint="a.npz", trace="t1", progress=True, json="a.json", data_dir="/a")
    b = a.replace(checkpoint="b.npz", trace="t2", progress=False, json=None, data_dir="/b", node_rank=0)
    assert a.agreement() == b.agreement()
    assert a.agreement() != a.replace(lr=0.2).agreement()
    assert a.agreement() != a.replace(resume="ck.npz").agreement()
    assert a.replace(resume="x.npz").agreement() == a.replace(resume="elsewhere/x.npz").agreement()


def test_labels_tell_every_run_of_a_comparison_apart():
    runs = [Settings(backend=b, devices=k, dtype=d, processes=p, precision=r)
            for b in ("torch", "jax") for k in (1, 2) for p in (1, 2) for d, r in
            (("float32", "fp32"), ("float64", "fp32"), ("float32", "bf16"))]
    labels = [s.label for s in runs]
    assert len(set(labels)) == len(labels)
    assert Settings(backend="jax", devices=1, processes=2, dtype="float64").label == "jax 2p x1 float64"


def test_a_definition_reaches_a_worker_as_data():
    from multidev import nn
    net = nn.Sequential(nn.Conv2d(4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.3), nn.GlobalAvgPool(),
                        nn.Dense())
    s = Settings(model=net, epochs=2)
    argv = s.to_argv()
    assert argv[argv.index("--model") + 1].startswith("{")  # JSON: the worker runs no code to get it
    back = from_args(parser().parse_args(argv))
    assert back.model == net.graph() and back.agreement() == s.agreement()


@pytest.mark.parametrize("model, says", [
    ("resnet19", "unknown model 'resnet19'"),
    ("missing.py:build", "model file missing.py does not exist"),
    ("net.onnx", "model file net.onnx does not exist"),
    (42, "model must be"),
])
def test_a_bad_model_setting_is_one_line(model, says):
    with pytest.raises(MultidevError, match=re.escape(says)):
        Settings(model=model)


def test_a_python_data_set_becomes_a_shareable_folder_once(tmp_path):
    import numpy as np

    from multidev.data import arrays, load_dataset
    rng = np.random.default_rng(0)
    data = arrays(rng.integers(0, 256, (20, 4, 4, 1), dtype=np.uint8), np.arange(20) % 2, layout="NHWC",
                  name="my set")
    s = Settings(dataset=data, layout="NHWC")
    shared = s.shareable(tmp_path)
    assert shared.dataset.endswith("my_set") and shared.layout == "NCHW" and shared.to_argv()
    assert s.shareable(tmp_path).dataset == shared.dataset  # saved once, found again
    back = load_dataset(shared.dataset)
    assert np.array_equal(back.x_train[np.arange(16)], data.x_train) and np.array_equal(back.y_test, data.y_test)
    assert Settings().shareable(tmp_path) == Settings()
