"""A contender in a fresh Python process: the one way a benchmark times something apart from the rest.

In one process, whatever runs later inherits the earlier contenders' threads,
memory and compiled programs (measured on an AMD EPYC: Keras 0.94 / 1.08 of
the JAX engine in one process, 0.79 / 0.82 timed alone), and a framework fixes
some settings when it loads (JAX its CPU device count, MXNet its threads).
So a benchmark names a function of its own module, and the harness calls it
in a new interpreter with the keyword arguments and environment given:

    from bench.harness import fresh
    rate = fresh(time_engine, env={"MULTIDEV_JAX_CPU_DEVICES": "2"}, devices=2, steps=5)

The function must be a module-level function of a module under ``bench``
(run as ``python -m bench.<script>``); its arguments and its return value
travel as JSON. The child is ``python -m bench.harness.child MODULE
FUNCTION KWARGS RESULT``; a failure raises :class:`ChildFailed` with the last
line the child wrote to stderr, and up to three of its warning lines are
passed on to this process's stderr on success too (what it ran under).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the other imports: a child's clock starts with its interpreter

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Mapping, Optional  # noqa: E402

from bench.harness.machine import ROOT  # noqa: E402


class ChildFailed(RuntimeError):
    """A contender's process ended without a result: its exit status and its last line on stderr."""


def since_start() -> float:
    """Seconds since this process started its first import (in a child: imports and all included)."""
    return time.perf_counter() - STARTED


def target_name(fn: Callable[..., Any]) -> tuple[str, str]:
    """(module, function name) a child imports ``fn`` by; a script run with ``-m`` is named by its module."""
    module = fn.__module__
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is None:
            raise ChildFailed(f"{fn.__qualname__} is in a script run by path: run it as `python -m bench.<script>`")
        module = spec.name
    return module, fn.__qualname__


def child_env(changes: Optional[Mapping[str, Optional[str]]]) -> dict[str, str]:
    """This process's environment with ``changes`` (None removes a variable) and the repository importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    for key, value in (changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


class Child:
    """One started child process; :meth:`result` waits for it."""

    def __init__(self, fn: Callable[..., Any], kwargs: Mapping[str, Any],
                 env: Optional[Mapping[str, Optional[str]]], label: str) -> None:
        module, name = target_name(fn)
        self.label = label or name
        self._folder = tempfile.TemporaryDirectory(prefix="bench-child-")
        self._out = Path(self._folder.name) / "result.json"
        self._stderr = open(Path(self._folder.name) / "stderr", "w+")
        self._stdout = open(Path(self._folder.name) / "stdout", "w+")
        command = [sys.executable, "-m", "bench.harness.child", module, name, json.dumps(dict(kwargs)),
                   str(self._out)]
        self.process = subprocess.Popen(command, env=child_env(env), stdout=self._stdout, stderr=self._stderr,
                                        start_new_session=True)

    def result(self, timeout: Optional[float] = None) -> Any:
        """What the function returned (None where the child exited cleanly without returning, as a server does)."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise ChildFailed(f"{self.label}: timed out after {timeout:.0f} s") from None
        try:
            self._stderr.seek(0)
            lines = [line.rstrip() for line in self._stderr if line.strip()]
            if self.process.returncode != 0:
                raise ChildFailed(f"{self.label} failed (exit {self.process.returncode}): "
                                  f"{lines[-1] if lines else 'no message'}")
            for line in [ln for ln in lines if "warning" in ln.lower()][:3]:
                print(f"{self.label}: {line}", file=sys.stderr)
            return json.loads(self._out.read_text()) if self._out.exists() else None
        finally:
            self._close()

    def stop(self) -> None:
        """End the child and what it started (its own session), unless it has ended."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def _close(self) -> None:
        self._stderr.close()
        self._stdout.close()
        self._folder.cleanup()


def start(fn: Callable[..., Any], /, *, env: Optional[Mapping[str, Optional[str]]] = None, label: str = "",
          **kwargs: Any) -> Child:
    """``fn(**kwargs)`` started in a fresh process (several may run at once: the ranks of a job)."""
    return Child(fn, kwargs, env, label)


def fresh(fn: Callable[..., Any], /, *, env: Optional[Mapping[str, Optional[str]]] = None,
          timeout: Optional[float] = None, label: str = "", **kwargs: Any) -> Any:
    """``fn(**kwargs)`` in a fresh process, waited for: what it returned."""
    return start(fn, env=env, label=label, **kwargs).result(timeout)
