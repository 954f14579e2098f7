"""Every command takes the flags that apply to it; the parser is derived from the run's settings."""

import pytest

from multidev import MultidevError
from multidev.cli.parser import parser
from multidev.settings.run import from_args


def test_compare_takes_the_run_flags_train_takes():
    args = parser().parse_args(["compare", "--out", "o", "--no-progress", "--no-prefetch", "--momentum", "0.9",
                                "--accumulate", "2", "--threads", "1", "--no-compile-cache", "--processes", "2"])
    run = from_args(args)
    assert (run.progress, run.prefetch, run.momentum, run.accumulate, run.processes) == (False, False, 0.9, 2, 2)
    assert args.threads == 1 and args.no_compile_cache


@pytest.mark.parametrize("flag", ["--checkpoint", "--resume", "--json", "--master", "--dtype"])
def test_compare_refuses_what_belongs_to_one_run(flag):
    with pytest.raises(MultidevError, match=f"unrecognized arguments: {flag}"):
        parser().parse_args(["compare", "--out", "o", flag, "x"])


def test_train_keeps_devices_and_gpus_apart():
    with pytest.raises(MultidevError, match="argument --gpus: not allowed with argument --devices"):
        parser().parse_args(["train", "--devices", "2", "--gpus", "2"])
    assert from_args(parser().parse_args(["train", "--devices", "cpu:0,cpu:1"])).devices == ("cpu:0", "cpu:1")


def test_help_shows_the_settings_by_section(capsys):
    with pytest.raises(SystemExit, match="^0$"):  # --help exits 0
        parser().parse_args(["train", "--help"])
    text = capsys.readouterr().out
    assert "recipe (docs/contract.md" in text and "--checkpoint-every" in text and "--warmup-epochs" in text
