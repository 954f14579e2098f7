"""What the progress bar says while an engine compiles or times its forms (multidev.engines.activity)."""

import threading
import time

from multidev.engine import KeptChoices, doing
from multidev.engines import activity
from multidev.training import loop
from multidev.training.loop import _tick


def test_the_innermost_work_of_the_busy_thread_is_shown_with_its_outer_work():
    assert activity.current() is None
    with doing("timing sums: reduce"):
        with doing("compiling train"):
            assert activity.current() == "timing sums: reduce / compiling train"
            with doing("timing threads: one"):
                assert activity.current() == "timing sums: reduce / ... / timing threads: one"
        assert activity.current() == "timing sums: reduce"
    assert activity.current() is None


def test_the_seconds_show_once_work_has_lasted_one(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(activity, "_clock", lambda: now[0])
    with doing("compiling train"):
        now[0] += 0.9
        assert activity.current() == "compiling train"
        now[0] += 11.0
        assert activity.current() == "compiling train (12 s)"


class Bar:
    def __init__(self) -> None:
        self.postfix, self.said = "first step", []

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text
        self.said.append(text)

    def refresh(self) -> None:
        pass


def test_the_bar_says_what_the_engine_is_busy_with_and_then_what_it_said_before(monkeypatch):
    monkeypatch.setattr(loop, "TICK", 0.05)
    bar, done = Bar(), threading.Event()
    ticker = threading.Thread(target=_tick, args=(bar, done))
    ticker.start()
    with doing("compiling train"):
        time.sleep(0.3)
    time.sleep(0.3)
    done.set()
    ticker.join()
    assert bar.said[0] == "compiling train", bar.said
    assert bar.postfix == "first step", bar.said


def test_timing_a_form_is_work_the_bar_shows(tmp_path):
    kept, seen = KeptChoices("conv_inputs.json", ("fused", "once"), lambda: tmp_path), []
    chosen = kept.fastest("k", {form: (lambda form=form: seen.append(activity.current()) or len(form))
                                for form in ("fused", "once")})
    assert chosen == "once" and seen == ["timing conv inputs: fused", "timing conv inputs: once"]
