"""Where a run starts: fresh, from ``--resume``'s checkpoint, from its own with ``--resume auto``, or, restarted
after a fault, from the checkpoint its job wrote (contract: Restarts)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from multidev.errors import MultidevError
from multidev.outputs import checkpoint as ckpt
from multidev.processes.faults import restart_count, written_by_this_job
from multidev.settings.run import AUTO, Settings


def check_unfinished(path: str, epochs: int) -> None:
    """One line when the checkpoint a user names has every epoch asked for already."""
    epoch, _ = ckpt.resumes_at(path)
    if epoch > epochs:
        raise MultidevError(f"nothing to train: {path} is already at epoch {epoch - 1}; raise --epochs")


def starting_point(s: Settings) -> Settings:
    """``s`` with ``resume`` the checkpoint this process starts from (None: fresh).

    A run's own checkpoint (``--resume auto``, or a restart) may hold every
    epoch already: the run then trains none and returns the saved history.
    """
    if restart_count() and s.checkpoint is not None and written_by_this_job(s.checkpoint):
        return s.replace(resume=s.checkpoint)
    if s.resume == AUTO:
        return s.replace(resume=s.checkpoint if Path(str(s.checkpoint)).is_file() else None)
    if s.resume is not None:
        check_unfinished(s.resume, s.epochs)
    return s


#: what a run's answer depends on besides its model, recipe and seed (which a resume takes or checks already);
#: the samples' shape is the model's, checked with it (so --image-size and --color, where they change anything)
SAME_RUN = ("dataset", "batch_size", "lr", "batchnorm", "dtype", "augment", "normalize")


class OtherSettingsWarning(UserWarning):
    """A run resumed with other settings than its checkpoint's run: it trains on, but not as that run would."""


def run_settings(s: Settings, data_name: str) -> dict[str, Any]:
    """What a checkpoint keeps of its run's settings (as JSON data), to tell a resume that changes them."""
    kept = {name: value for name, value in s.to_dict().items() if name in SAME_RUN}
    return json.loads(json.dumps({**kept, "dataset": data_name}, default=str))


def check_same_run(s: Settings, data_name: str, meta: dict[str, Any], path: str, say: bool) -> None:
    """One line where a resume's settings are not its checkpoint's run's (a mid-epoch one at another batch size
    cannot go on at all: its position counts that size's steps); checkpoints from before they were kept: none."""
    saved, now = meta.get("settings") or {}, run_settings(s, data_name)
    changed = [name for name in SAME_RUN if name in saved and saved[name] != now[name]]
    if meta.get("position") and "batch_size" in changed:
        raise MultidevError(f"checkpoint {path} stopped mid-epoch at batch size {saved['batch_size']}: resume "
                            f"with --batch-size {saved['batch_size']}")
    if changed and say:
        said = ", ".join(f"{name.replace('_', ' ')} {now[name]} (it had {saved[name]})" for name in changed)
        warnings.warn(f"resuming {path} with other settings than its run: {said}; it trains on, but not as that "
                      f"run would have: give its flags to go on exactly", OtherSettingsWarning, stacklevel=2)
