"""--checkpoint-every: mid-epoch saves at a rhythm, each one a point the run resumes from exactly."""

import numpy as np
import pytest

import multidev
from multidev import MultidevError, Settings
from multidev.data import synthetic
from multidev.outputs import checkpoint as ckpt
from multidev.testing.fake import FakeEngine
from multidev.training.rhythm import Rhythm, every

DATA = synthetic(n_train=64, n_test=16, shape=(1, 14, 14))
RUN = dict(model="lenet", dataset=DATA, epochs=2, batch_size=8, lr=0.05, devices=2, momentum=0.9)


def test_every_takes_updates_or_a_duration():
    assert every("50") == 50 and every(7) == 7 and every(" 10m ") == "10m" and every(None) is None
    assert Rhythm(3).due(6) and not Rhythm(3).due(7)
    assert Rhythm("0.5s").seconds == 0.5 and Rhythm("2h").seconds == 7200
    with pytest.raises(MultidevError, match=r"--checkpoint-every takes a number of updates \(e.g. 50\) or a "
                                            r"duration \(e.g. 10m, 90s, 1h\), got '10 minutes'"):
        every("10 minutes")
    with pytest.raises(MultidevError, match="--checkpoint-every must be a whole number of at least 1, got 0"):
        every(0)
    with pytest.raises(MultidevError, match="--checkpoint-every needs --checkpoint PATH"):
        Settings(checkpoint_every=5)


def test_saves_mid_epoch_and_each_save_resumes_to_the_same_end(tmp_path, monkeypatch):
    """8 updates an epoch, a save every 3: after updates 3 and 6 of epoch 1, then 9 (step 1 of epoch 2)..."""
    saved, real_save = [], ckpt.save

    def keep(path, *args, **meta):
        real_save(path, *args, **meta)
        copy = tmp_path / f"save-{len(saved)}.npz"
        copy.write_bytes(path.read_bytes() if hasattr(path, "read_bytes") else open(path, "rb").read())
        saved.append((meta["epoch"], (meta["position"] or {}).get("step"), copy))

    monkeypatch.setattr(ckpt, "save", keep)
    whole = multidev.train(FakeEngine(), **RUN, checkpoint=str(tmp_path / "c.npz"), checkpoint_every=3)
    assert [(e, s) for e, s, _ in saved] == [(0, 3), (0, 6), (1, None), (1, 1), (1, 4), (1, 7), (2, None)]
    final = ckpt.load(tmp_path / "c.npz")[1]
    for epoch, step, copy in saved[:2] + saved[3:4]:  # resumed from mid-epoch saves of either epoch
        out = tmp_path / f"resumed-{epoch}-{step}.npz"
        again = multidev.train(FakeEngine(), **RUN, checkpoint=str(out), resume=str(copy))
        assert again.epochs[-1].loss == pytest.approx(whole.epochs[-1].loss, rel=1e-12)
        for name, value in ckpt.load(out)[1].items():
            np.testing.assert_array_equal(value, final[name], err_msg=f"{name}, resumed at {epoch}/{step}")
