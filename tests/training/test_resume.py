"""Where a run starts: --resume's file, its own with --resume auto, or after a restart the file its job wrote."""

import os

import numpy as np
import pytest

from multidev import Settings
from multidev.errors import MultidevError
from multidev.processes.faults import CHECKPOINT_AT_LAUNCH, MAX_RESTARTS, RESTART_COUNT, identity, launched_with
from multidev.processes.faults import will_restart, written_by_this_job
from multidev.training.api import train
from multidev.training.resume import starting_point
from multidev.testing.fake import FakeEngine

SMALL = dict(model="mlp", dataset="synthetic", epochs=1, batch_size=64, devices=1)


@pytest.fixture
def saved(tmp_path):
    """A whole checkpoint of one epoch."""
    path = tmp_path / "ck.npz"
    train(FakeEngine(), checkpoint=str(path), **SMALL)
    return path


def test_auto_starts_fresh_without_the_file_and_resumes_with_it(tmp_path, saved):
    missing = Settings(resume="auto", checkpoint=str(tmp_path / "none.npz"), **SMALL)
    assert starting_point(missing).resume is None
    assert starting_point(Settings(resume="auto", checkpoint=str(saved), **SMALL)).resume == str(saved)


def test_auto_on_a_finished_file_returns_its_history_and_a_named_file_is_refused(saved):
    done = train(FakeEngine(), resume="auto", checkpoint=str(saved), **SMALL)
    assert [e.epoch for e in done.epochs] == [1]
    with pytest.raises(MultidevError, match=f"nothing to train: {saved} is already at epoch 1; raise --epochs"):
        starting_point(Settings(resume=str(saved), **SMALL))


def test_a_resume_with_other_settings_says_which_and_goes_on(saved):
    from multidev.training.resume import OtherSettingsWarning

    run = {**SMALL, "epochs": 2}
    with pytest.warns(OtherSettingsWarning, match=r"other settings than its run: batch size 32 \(it had 64\), lr "
                                                  r"0\.05 \(it had 0\.1\); it trains on"):
        train(FakeEngine(), resume=str(saved), **{**run, "batch_size": 32, "lr": 0.05})
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same settings: not a word
        train(FakeEngine(), resume=str(saved), **run)


def test_a_mid_epoch_checkpoint_resumes_only_at_its_batch_size(tmp_path):
    from multidev.outputs import checkpoint as ckpt
    from multidev.training.loop import Position

    path = tmp_path / "mid.npz"
    train(FakeEngine(), checkpoint=str(path), **SMALL)
    spec, state, meta = ckpt.load(path)
    ckpt.save(path, spec, state, **{**meta, "epoch": 0, "history": [],
                                    "position": vars(Position(1, 1, 0.0, 0, 0.0))})
    with pytest.raises(MultidevError, match=f"checkpoint {path} stopped mid-epoch at batch size 64: resume with "
                                            f"--batch-size 64"):
        train(FakeEngine(), resume=str(path), **{**SMALL, "batch_size": 32})


def test_a_resume_on_other_data_names_the_data_it_was_trained_on(saved):
    with pytest.raises(MultidevError, match=r"checkpoint .* was trained on synthetic of shape \(1, 16, 16\) with 10 "
                                            r"classes; digits has \(1, 8, 8\) with 10: resume on the data it was "
                                            r"trained on \(--dataset\)"):
        train(FakeEngine(), resume=str(saved), **{**SMALL, "model": None, "dataset": "digits", "epochs": 2})


def test_another_model_that_does_not_fit_the_data_names_the_checkpoints_model(saved):
    """LeNet's 5x5 windows do not fit digits' 8x8: the mismatch with the checkpoint is the mistake to name."""
    with pytest.raises(MultidevError, match=r"checkpoint .* holds mlp for \(1, 16, 16\), this run trains lenet on "
                                            r"digits: resume with the same settings \(leave --model out"):
        train(FakeEngine(), resume=str(saved), **{**SMALL, "model": "lenet", "dataset": "digits", "epochs": 2})


def test_auto_needs_a_checkpoint_path():
    with pytest.raises(MultidevError, match="--resume auto needs --checkpoint PATH"):
        Settings(resume="auto")


def test_a_restart_resumes_only_from_a_file_saved_since_the_launch(monkeypatch, tmp_path, saved):
    s = Settings(checkpoint=str(saved), **{**SMALL, "epochs": 2})
    monkeypatch.setenv(RESTART_COUNT, "1")
    with launched_with(str(saved)):  # the file is the one an earlier job left
        assert not written_by_this_job(str(saved)) and starting_point(s).resume is None
        os.replace(saved, tmp_path / "old.npz")
        train(FakeEngine(), checkpoint=str(saved), **SMALL)  # this job's rank 0 saves
        assert written_by_this_job(str(saved)) and starting_point(s).resume == str(saved)
    monkeypatch.setenv(RESTART_COUNT, "0")
    assert starting_point(s).resume is None  # the first start starts as asked


def test_identity_and_restarts_left():
    assert identity(None) == identity("/no/such/file") == "absent"
    env = {RESTART_COUNT: "1", MAX_RESTARTS: "2"}
    assert will_restart(env) and not will_restart({**env, RESTART_COUNT: "2"}) and not will_restart({})
    assert CHECKPOINT_AT_LAUNCH not in os.environ  # launched_with leaves the environment as it found it


def test_a_resume_of_the_same_folder_named_otherwise_says_nothing(tmp_path, monkeypatch):
    """A data set is known by its folder's resolved name: `.` and the folder's full path are one."""
    import warnings

    from multidev.data import arrays
    from multidev.data.npy import save_folder

    rng = np.random.default_rng(0)
    folder = tmp_path / "photos"
    save_folder(arrays(rng.random((40, 4), np.float32), np.arange(40) % 2), folder)
    monkeypatch.chdir(folder)
    run = dict(model="mlp", epochs=1, batch_size=8, devices=1, layout="NCHW")
    train(FakeEngine(), dataset=".", checkpoint=str(tmp_path / "ck.npz"), **run)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(FakeEngine(), dataset=str(folder), resume=str(tmp_path / "ck.npz"), **{**run, "epochs": 2,
                                                                                          "layout": "NHWC"})


def test_train_refuses_what_is_not_settings_or_a_function():
    with pytest.raises(MultidevError, match="settings must be a multidev.Settings, got dict"):
        train(FakeEngine(), settings={"epochs": 1})
    with pytest.raises(MultidevError, match="on_epoch must be a function of one EpochRecord, got 5"):
        train(FakeEngine(), on_epoch=5, **SMALL)
