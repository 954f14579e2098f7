"""Checkpoints: a round trip, a crash mid-write, and files that are refused in one line."""

import json
import subprocess
import sys

import numpy as np
import pytest

from multidev import ModelSpec, MultidevError, Settings, load_checkpoint, save_checkpoint
from multidev.outputs import checkpoint as ckpt
from multidev.rules.optimizers import STEP, Optimizer
from multidev.settings.recipe import Recipe
from multidev.testing import LENET

SPEC = ModelSpec("lenet", (1, 16, 16), 10)


def test_round_trip(tmp_path):
    state = SPEC.init(0)
    save_checkpoint(tmp_path / "c.npz", SPEC, state, epoch=3, seed=0)
    spec, loaded, meta = load_checkpoint(tmp_path / "c.npz")
    assert spec == SPEC and meta["epoch"] == 3
    assert all(np.array_equal(state[k], loaded[k]) for k in state)


def test_crash_mid_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    save_checkpoint(path, SPEC, SPEC.init(0), epoch=1, seed=0)
    before = path.read_bytes()

    def crash(file, **arrays):
        file.write(b"half a checkpoint")
        raise KeyboardInterrupt("crashed mid-write")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(KeyboardInterrupt, match="crashed mid-write"):
        save_checkpoint(path, SPEC, SPEC.init(1), epoch=2, seed=0)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]  # no temporary file left behind


def test_wrong_state_is_refused(tmp_path):
    state = SPEC.init(0)
    del state["fc2.bias"]
    with pytest.raises(MultidevError, match="missing"):
        save_checkpoint(tmp_path / "c.npz", SPEC, state)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 broken zip"])
def test_corrupt_checkpoint_is_a_clear_error(tmp_path, content):
    (tmp_path / "c.npz").write_bytes(content)
    with pytest.raises(MultidevError, match="c.npz"):
        load_checkpoint(tmp_path / "c.npz")


def test_missing_checkpoint(tmp_path):
    with pytest.raises(MultidevError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.npz")


def bad_checkpoints(tmp_path):
    spec = ModelSpec("lenet", (1, 16, 16), 10)
    good = save_checkpoint(tmp_path / "good.npz", spec, spec.init(0), epoch=1, seed=0)
    (tmp_path / "truncated.npz").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    np.savez(tmp_path / "foreign.npz", weights=np.zeros(3))
    with np.load(good) as archive:
        arrays = dict(archive)
    meta = json.loads(arrays["__meta__"].tobytes())
    arrays["__meta__"] = np.frombuffer(json.dumps({**meta, "format": "multidev-checkpoint/99"}).encode(), np.uint8)
    np.savez(tmp_path / "newer.npz", **arrays)
    return {"truncated": ("truncated.npz", "unreadable"), "not multidev": ("foreign.npz", "not a multidev checkpoint"),
            "newer format": ("newer.npz", "newer multidev"), "another model": ("good.npz", "holds lenet")}


@pytest.mark.parametrize("what", ["truncated", "not multidev", "newer format", "another model"])
def test_bad_checkpoint_is_one_clear_line(tmp_path, what):
    name, message = bad_checkpoints(tmp_path)[what]
    proc = subprocess.run([sys.executable, "-m", "multidev", "train", "--model", "resnet18", "--dataset", "synthetic",
                           "--epochs", "2", "--no-progress", "--resume", str(tmp_path / name)],
                          capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert message in lines[0] and name in lines[0], lines[0]


def test_the_recipe_a_checkpoint_records_reads_back():
    """The recipe, as a checkpoint's JSON metadata holds it, reads back the same (flags: tests/settings/test_run.py)."""
    runs = [Settings(), Settings(momentum=0.9, nesterov=True, weight_decay=5e-4, schedule="step", milestones="5,8",
                                 factor=0.2, warmup_epochs=0.5, accumulate=3, precision="bf16", tf32=True),
            Settings(optimizer="adamw", betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05, schedule="cosine",
                     warmup_steps=7)]
    for run in runs:
        assert Recipe.from_settings(json.loads(json.dumps(run.recipe.settings()))) == run.recipe
    assert runs[1].recipe != runs[0].recipe != runs[2].recipe


def test_checkpoint_keeps_optimizer_state(tmp_path):
    opt = Optimizer(momentum=0.9)
    state = opt.init_state(LENET, np.float32)
    state[STEP] = np.array(7, np.int64)
    path = ckpt.save(tmp_path / "c.npz", LENET, LENET.init(0), optimizer_state=state, epoch=1, seed=0,
                     recipe=Recipe(opt).settings())
    spec, params, meta = ckpt.load(path)
    assert spec == LENET and set(params) == {p.name for p in LENET.params()}
    got = ckpt.load_optimizer_state(path)
    assert sorted(got) == sorted(state) and int(got[STEP]) == 7
    assert Recipe.from_settings(meta["recipe"]).optimizer == opt
