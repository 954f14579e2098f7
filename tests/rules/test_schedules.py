"""Learning-rate schedules (contract: Learning-rate schedules): each update's rate, and settings refused in one line."""

import math

import pytest

from multidev.errors import MultidevError
from multidev.rules.schedules import Schedule


def test_schedules():
    steps, epochs = 10, 3
    constant = Schedule().rates(0.1, steps, epochs)
    assert constant == [0.1] * 30
    step = Schedule("step", milestones=(1, 2), factor=0.5).rates(0.2, steps, epochs)
    assert step[:10] == [0.2] * 10 and step[10:20] == [0.1] * 10 and step[20:] == [0.05] * 10
    cosine = Schedule("cosine", warmup_steps=5).rates(1.0, steps, epochs)
    assert cosine[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert cosine[5] == 1.0 and all(a > b for a, b in zip(cosine[5:], cosine[6:])) and 0 < cosine[-1] < 0.01
    assert cosine[5 + 12] == pytest.approx(0.5 * (1 + math.cos(math.pi * 12 / 25)))
    assert Schedule(warmup_epochs=0.5).warmup(10) == 5


@pytest.mark.parametrize("settings, message", [
    (dict(kind="step"), "--schedule step needs --milestones"),
    (dict(kind="cosine", milestones=(3,)), "milestones belong to --schedule step"),
    (dict(kind="linear"), "unknown schedule 'linear'"),
    (dict(warmup_steps=-1), "warm-up steps must be a whole number of 0 or more"),
    (dict(warmup_steps=2, warmup_epochs=1.0), "not both"),
    (dict(kind="step", milestones=(2,), factor=0.0), "factor must be in"),
])
def test_bad_schedules_are_one_line(settings, message):
    with pytest.raises(MultidevError, match=message):
        Schedule(**settings)


def test_warmup_longer_than_the_run_is_refused():
    with pytest.raises(MultidevError, match=r"the warm-up \(30 steps\) is as long as the run or longer"):
        Schedule(warmup_epochs=3).check(steps_per_epoch=10, epochs=3)
    Schedule(warmup_epochs=2.9).check(steps_per_epoch=10, epochs=3)
