"""The core's kept choices (multidev.engines.choices): pins checked, a form measured once and kept per CPU kind."""

from __future__ import annotations

import json

import pytest

from multidev import MultidevError
from multidev.engines.choices import Kept, pinned_form

FORMS = ("matvec", "reduce")


def test_a_pin_is_read_in_any_case_and_unset_means_measure(monkeypatch):
    monkeypatch.delenv("MULTIDEV_TEST_FORM", raising=False)
    assert pinned_form("MULTIDEV_TEST_FORM", FORMS) is None
    monkeypatch.setenv("MULTIDEV_TEST_FORM", "  ")
    assert pinned_form("MULTIDEV_TEST_FORM", FORMS) is None
    monkeypatch.setenv("MULTIDEV_TEST_FORM", " Reduce ")
    assert pinned_form("MULTIDEV_TEST_FORM", FORMS) == "reduce"


def test_a_pin_that_names_no_form_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("MULTIDEV_TEST_FORM", "matvek")
    with pytest.raises(MultidevError) as err:
        pinned_form("MULTIDEV_TEST_FORM", FORMS)
    assert str(err.value) == ("MULTIDEV_TEST_FORM='matvek' names no form: give one of matvec, reduce, "
                              "or unset it for the engine's own choice")


def test_a_form_is_timed_once_and_kept_for_later_processes(tmp_path):
    timed: list[str] = []

    def timer(form: str, seconds: float):
        def run() -> float:
            timed.append(form)
            return seconds
        return run

    kept = Kept("forms.json", FORMS, lambda: tmp_path)
    timers = {"matvec": timer("matvec", 2.0), "reduce": timer("reduce", 1.0)}
    assert kept.fastest("shape", timers) == "reduce" and timed == ["matvec", "reduce"]
    assert kept.fastest("shape", timers) == "reduce" and len(timed) == 2
    assert json.loads((tmp_path / "forms.json").read_text()) == {"shape": "reduce"}
    later = Kept("forms.json", FORMS, lambda: tmp_path)  # another process on the same CPU kind
    assert later.fastest("shape", timers) == "reduce" and len(timed) == 2 and later.measured == []
    assert "reduce for 1" in later.summary("per shape", "MULTIDEV_TEST_FORM")


def test_a_kept_file_that_cannot_be_read_or_names_no_form_is_measured_again(tmp_path):
    (tmp_path / "forms.json").write_text(json.dumps({"a": "matvec", "b": "gone"}))
    kept = Kept("forms.json", FORMS, lambda: tmp_path)
    assert kept.get("a") == "matvec" and kept.get("b") is None
    (tmp_path / "forms.json").write_text("{not json")
    assert Kept("forms.json", FORMS, lambda: tmp_path).get("a") is None
    alone = Kept("forms.json", FORMS, lambda: None)  # the cache off: this process only
    alone.put("a", "reduce")
    assert alone.get("a") == "reduce" and "this process only" in alone.where()
