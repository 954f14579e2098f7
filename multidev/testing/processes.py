"""contract: Process groups, checked on every engine that claims ``multi_process`` (slow: real jobs).

N processes x K devices must give the parameters of one process with N*K
devices; a dead worker, a port in use and ranks started with other settings
must each end the job with one line. The jobs run through the ``multidev``
command as a user runs them, so the engine must be installed under its name.

With local BatchNorm both forms of a job run the same per-device programs on
the same shards, with the same CPU threads per device (``THREADS``), and sum
two devices' values (exact in any order): they give the same float32
parameters, bit for bit on torch and JAX here, and the checks allow
SAME_ENGINE_RTOL. Sync BatchNorm's exchange across processes may add in
another order than across the devices of one process (torch: 2e-14 apart in
float64, 4e-4 after 3 float32 steps, a ReLU flipped), so it is checked in
float64 where the engine claims it, at FLOAT64_RTOL.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

import pytest

from multidev.engines.registry import installed
from multidev.engines.vocabulary import lacking
from multidev.nn.zoo import vit
from multidev.outputs import checkpoint as ckpt
from multidev.processes.launch import ephemeral_ports
from multidev.testing._helpers import assert_states_close
from multidev.testing.kit import FLOAT64_RTOL, SAME_ENGINE_RTOL, EngineFixtures

#: seconds a killed worker may take to end the whole job (contract: Process groups)
KILL_DEADLINE = 30.0
#: LeNet needs 14x14 images: the synthetic set's 16x16, batch 101 (51 / 50 rows), the last one 7 (4 / 3)
LENET_JOB = ["--model", "lenet", "--dataset", "synthetic", "--batch-size", "101"]
#: the jobs whose promise is not about the network (launches, faults, resumes): LeNet's, seconds an epoch
JOB = [*LENET_JOB, "--epochs", "1", "--lr", "0.1", "--seed", "3"]
#: epochs enough that a long job is still running when a test stops it after its first
LONG = ["--epochs", "500"]
#: CPU threads of each process, in both forms: what 2 workers get on this machine
THREADS = str(max(1, len(os.sched_getaffinity(0)) // 2))


def free_port(after: int = 3) -> int:
    """A port to meet at, free with the ``after`` ports a restarted job moves to, outside the ephemeral range.

    See :meth:`multidev.processes.launch.Launch.port_risk` (seen once in CI:
    machine 0 could not listen, machine 1 waited for ever).
    """
    low, high = ephemeral_ports()
    below = range(10_000, low - after) if low - after > 10_000 else range(high + 1, 65_535 - after)
    for port in random.sample(below, 200):
        try:
            for p in range(port, port + after + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise AssertionError("processes: no free port outside the ephemeral range")


def command(engine: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "multidev", "train", "--backend", engine, "--no-progress", *args]


def run(engine: str, *args: str, env: Optional[dict[str, str]] = None) -> None:
    """The kit's job with ``args`` (and ``env`` added to this environment), which must succeed."""
    meet = ["--master", f"127.0.0.1:{free_port()}"] if "--processes" in args else []  # not a port another job holds
    done = subprocess.run(command(engine, *JOB, "--threads", THREADS, *meet, *args), capture_output=True, text=True,
                          timeout=900, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]


def assert_same(got: Path, want: Path, promise: str, rtol: float = SAME_ENGINE_RTOL) -> None:
    assert_states_close(ckpt.load(got)[1], ckpt.load(want)[1], rtol=rtol, promise=promise)


def both_forms(engine: str, folder: Path, *args: str) -> tuple[Path, Path]:
    """The job ``args`` as 2 processes x 1 device and as 1 process x 2 devices: the two checkpoints."""
    paths = folder / "processes.npz", folder / "devices.npz"
    for form, path in zip((["--processes", "2"], ["--devices", "2"]), paths):
        run(engine, *form, *args, "--checkpoint", str(path))
    return paths


def first_epoch(out) -> str:
    """The job's output up to its first epoch line (a framework may print lines of its own first)."""
    seen = ""
    for line in out:
        seen += line
        if line.startswith("epoch 1/"):
            return line
    return seen


@contextlib.contextmanager
def long_job(engine: str, saved: Path) -> Iterator[subprocess.Popen]:
    """A 2-process job of many epochs, handed over once its first epoch is done; killed on the way out."""
    meet = f"127.0.0.1:{free_port()}"  # not a port another job holds
    argv = command(engine, *JOB, *LONG, "--processes", "2", "--checkpoint", str(saved), "--master", meet)
    # Ctrl-C as a terminal gives it, even when the tests run where SIGINT is ignored (a background job of a
    # non-interactive shell): an ignored SIGINT is inherited, and a launcher started so rightly ignores it.
    # Python's own handler is set in the launcher itself (a preexec_fn would fork a multithreaded process).
    start = (f"import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             f"sys.argv = {['multidev', *argv[3:]]!r}; runpy.run_module('multidev', run_name='__main__')")
    launcher = [argv[0], "-c", start]
    job = subprocess.Popen(launcher, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = first_epoch(job.stdout)
        assert first.startswith(f"epoch 1/{LONG[1]}"), first + job.stderr.read()
        yield job
    finally:
        job.kill()


#: a job whose epoch 2 has 32 updates, saved every 5: a fault lands after a mid-epoch save (float64 where claimed)
FAULTED = ["--model", "lenet", "--dataset", "synthetic", "--epochs", "2", "--batch-size", "16", "--lr", "0.05",
           "--seed", "3", "--threads", "1", "--checkpoint-every", "5"]


def saved_mid_epoch(path: Path, epoch: int, jobs: Sequence[subprocess.Popen]) -> tuple[int, int]:
    """Wait until ``path`` holds a save from inside ``epoch`` (or later); where it is. A job that ends first fails."""
    while not any(job.poll() is not None for job in jobs):
        try:
            at = ckpt.resumes_at(path) if path.exists() else (0, 0)
        except Exception:  # noqa: BLE001 - read while it is being replaced: try again
            at = (0, 0)
        if at >= (epoch, 1):
            return at
        time.sleep(0.005)
    raise AssertionError(f"the job ended before it saved inside epoch {epoch}: "
                         + "".join(job.communicate()[1][-1500:] for job in jobs))


def outcomes(launches: Sequence[subprocess.Popen], timeout: float) -> list[tuple[str, str]]:
    """Every launch's (stdout, stderr) once all have ended; past ``timeout`` s all are killed and the check fails
    with what each said (one machine's end may be the cause of another's wait)."""
    deadline, done = time.monotonic() + timeout, []
    try:
        for launch in launches:
            done.append(launch.communicate(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        for launch in launches:
            launch.kill()
        said = [launch.communicate()[1][-1500:] for launch in launches]
        raise AssertionError(f"processes: a launch did not end in {timeout:.0f} s; their stderr: {said}") from None
    return done


def kill_rank(marker: str, rank: int, launchers: Sequence[subprocess.Popen]) -> None:
    """SIGKILL the worker of ``rank`` among the processes whose command line holds ``marker``."""
    found = [p for p in job_processes(marker) if p not in {job.pid for job in launchers}
             and f"RANK={rank}\0".encode() in Path(f"/proc/{p}/environ").read_bytes()]
    assert found, f"processes: no worker of rank {rank} found"
    os.kill(found[0], signal.SIGKILL)


def job_processes(marker: str) -> list[int]:
    """Every process of this machine whose command line holds ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def user_model(folder: Path) -> str:
    """A user's file with the README's kind of network (residual block, max pooling, dropout): ``--model``'s text."""
    (folder / "net.py").write_text("from multidev.testing.layers import readme_definition\n\n\n"
                                   "def build():\n    return readme_definition(16)\n")
    return f"{folder / 'net.py'}:build"


def user_images(folder: Path) -> str:
    """The synthetic set as a user's folder of PNG files (train/, test/, a folder per class): ``--dataset``'s text."""
    from multidev.data import synthetic
    from multidev.testing.images import as_uint8_images, write_images

    data = synthetic()
    for split, x, y in (("train", data.x_train, data.y_train), ("test", data.x_test, data.y_test)):
        write_images(folder / "images", as_uint8_images((x + 3) / 6), y, split=split)
    return str(folder / "images")


class MultiProcessChecks(EngineFixtures):
    """contract: Process groups: one job over several processes, the same answers, faults that end it cleanly."""

    @staticmethod
    def needs_processes(engine) -> None:
        EngineFixtures.require(engine, "multi_process")
        if engine.name not in installed():
            pytest.skip(f"{engine.name} is not installed: its workers start as "
                        f"`multidev train --backend {engine.name}`")

    @pytest.mark.slow
    # The README network (residual blocks, BatchNorm) with each BatchNorm. ResNet-18 in two processes took a JAX
    # engine 4 minutes and takes no other code path; the kit's single-process cases check its own steps.
    # LeNet's (full: test_float64_processes_equal_devices_bit_for_bit holds it bit for bit) beyond CI's time
    @pytest.mark.parametrize("model, batchnorm", [("definition", "sync"),
                                                  pytest.param("lenet", "local", marks=pytest.mark.full),
                                                  ("definition", "local"), ("augmented images", "local"),
                                                  ("vit", "local")])
    def test_two_processes_equal_two_devices(self, engine, model, batchnorm, tmp_path):
        self.needs_processes(engine)
        lenet = LENET_JOB
        shape = {"lenet": lenet, "definition": ["--model", user_model(tmp_path)],
                 "augmented images": [*lenet, "--dataset", user_images(tmp_path), "--augment", "crop,flip",
                                      "--normalize", "auto"], "vit": [*lenet, "--model", "vit"]}[model]
        dtype, rtol = "float32", SAME_ENGINE_RTOL
        if model == "vit" and lacking(engine, frozenset(type(n.layer).__name__ for n in vit().graph().nodes)):
            pytest.skip(f"the {engine.name} engine states it does not build the ViT's layers (its layers)")
        if model == "vit" and "float64" in engine.capabilities:
            dtype, rtol = "float64", FLOAT64_RTOL  # no BatchNorm: the same sums whichever form runs them
        if model == "augmented images" and "float64" in engine.capabilities:
            dtype, rtol = "float64", FLOAT64_RTOL  # contract: Data: the core's crops and flips, judged in float64
        if batchnorm == "sync":
            self.require(engine, "sync_batchnorm_processes")
            if "float64" in engine.capabilities:
                dtype, rtol = "float64", FLOAT64_RTOL
        processes, devices = both_forms(engine.name, tmp_path, *shape, "--batchnorm", batchnorm, "--dtype", dtype)
        assert_same(processes, devices, f"processes: {model} as 2 processes x 1 device ({batchnorm} BatchNorm, "
                                        f"{dtype}) does not train as 1 process x 2 devices", rtol)

    @pytest.mark.slow
    def test_float64_processes_equal_devices_bit_for_bit(self, engine, tmp_path):
        """Local BatchNorm in float64 adds the same numbers in both forms: the same bits (contract: Process groups).

        Catches a runtime that carries float64 sums in float32: MXNet's server did (2.2e-6 after one epoch). LeNet
        shows it as ResNet-18 does (which took 3 min for JAX on a Zen 3 EPYC); the ResNet-18 forms are judged above.
        """
        self.needs_processes(engine)
        self.require(engine, "float64")
        processes, devices = both_forms(engine.name, tmp_path, *LENET_JOB, "--dtype", "float64")
        assert_same(processes, devices, "processes: LeNet in float64 as 2 processes x 1 device does not train as "
                                        "1 process x 2 devices", rtol=0.0)  # bit for bit

    @pytest.mark.slow
    def test_recipe_in_two_processes_equals_two_devices(self, engine, tmp_path):
        """Nesterov with decay, cosine with warm-up, micro-batches of 50 (updates of 100, the last uneven)."""
        self.needs_processes(engine)
        self.require(engine, "optimizers")
        self.require(engine, "accumulate")
        recipe = ["--model", "lenet", "--dataset", "synthetic", "--batch-size", "50", "--accumulate", "2",
                  "--momentum", "0.9", "--nesterov", "--weight-decay", "5e-4", "--schedule", "cosine",
                  "--warmup-steps", "2"]
        processes, devices = both_forms(engine.name, tmp_path, *recipe)
        promise = "processes: a recipe as 2 processes x 1 device does not train as 1 process x 2 devices"
        assert_same(processes, devices, promise)
        got, want = ckpt.load_optimizer_state(processes), ckpt.load_optimizer_state(devices)
        assert sorted(got) == sorted(want) and len(got) > 1, f"{promise}: the optimizer states differ in names"
        assert_states_close(got, want, rtol=SAME_ENGINE_RTOL, promise=f"{promise} (optimizer state)")

    @pytest.mark.slow
    def test_two_launches_equal_one(self, engine, tmp_path):
        """The many-machine form, as two launches on this machine meeting over 127.0.0.1."""
        self.needs_processes(engine)
        args = [*JOB, "--threads", THREADS, "--nnodes", "2", "--master", f"127.0.0.1:{free_port()}"]
        nodes = [subprocess.Popen(command(engine.name, *args, "--node-rank", str(r),
                                          "--checkpoint", str(tmp_path / f"node{r}.npz")),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
        outputs = outcomes(nodes, 600)
        assert [n.returncode for n in nodes] == [0, 0], outputs
        assert not (tmp_path / "node1.npz").exists(), "processes: a rank other than 0 wrote the checkpoint"
        run(engine.name, "--devices", "2", "--checkpoint", str(tmp_path / "devices.npz"))
        assert_same(tmp_path / "node0.npz", tmp_path / "devices.npz",
                    "processes: two launches of one process each do not train as 2 devices")

    @pytest.mark.slow
    def test_a_killed_worker_ends_the_job(self, engine, tmp_path):
        self.needs_processes(engine)
        saved = tmp_path / "killed.npz"
        with long_job(engine.name, saved) as job:
            kill_rank(str(saved), 1, [job])
            killed = time.monotonic()
            _, err = job.communicate(timeout=KILL_DEADLINE + 30)
            seconds = time.monotonic() - killed
        assert job.returncode not in (0, None), "processes: the job went on after a worker was killed"
        assert seconds <= KILL_DEADLINE, f"processes: the job took {seconds:.1f} s to end after a worker was killed"
        assert "rank 1" in err.strip().splitlines()[-1] and "SIGKILL" in err, err[-2000:]
        assert "Traceback" not in err, err[-3000:]
        time.sleep(1)
        assert not job_processes(str(saved)), "processes: a process of the job is still running"
        ckpt.load(saved)  # whole

    @pytest.mark.slow
    def test_an_error_of_one_worker_ends_the_job_at_once_saying_why(self, engine, tmp_path):
        """Rank 0 fails alone while rank 1 waits for it in a collective: not a wait until a timeout, the error said."""
        self.needs_processes(engine)
        (tmp_path / "net.py").write_text(
            "import os\nfrom multidev.testing.layers import readme_definition\n\n\ndef build():\n"
            "    if os.environ.get('RANK') == '0':\n"
            "        raise OSError(28, 'No space left on device (one worker alone)')\n"
            "    return readme_definition(16)\n")
        temp = tmp_path / "tmp"
        temp.mkdir()
        start = time.monotonic()
        done = subprocess.run(command(engine.name, *LENET_JOB, "--model", f"{tmp_path / 'net.py'}:build",
                                      "--processes", "2", "--threads", THREADS, "--master", f"127.0.0.1:{free_port()}"),
                              capture_output=True, text=True, timeout=400, env={**os.environ, "TMPDIR": str(temp)})
        seconds = time.monotonic() - start
        left = sorted(p.name for p in temp.iterdir())
        assert not left, f"processes: the job left {left} in the temporary folder"
        assert done.returncode not in (0, None), "processes: the job succeeded though a worker failed"
        assert "No space left on device (one worker alone)" in done.stderr, done.stderr[-3000:]
        assert "worker rank 0 exited with code 1" in done.stderr.strip().splitlines()[-1], done.stderr[-3000:]
        assert seconds <= 2 * KILL_DEADLINE, f"processes: the job took {seconds:.0f} s to end after a worker failed"

    @staticmethod
    def faulted(engine) -> list[str]:
        return [*FAULTED, "--dtype", "float64" if "float64" in engine.capabilities else "float32"]

    @pytest.fixture(scope="class")
    @classmethod
    def uninterrupted(cls, engine, tmp_path_factory) -> Path:
        """The faulted jobs' settings run once without a fault: the checkpoint each of them must end with."""
        cls.needs_processes(engine)
        path = tmp_path_factory.mktemp("uninterrupted") / "straight.npz"
        run(engine.name, *cls.faulted(engine), "--processes", "2", "--checkpoint", str(path))
        return path

    @pytest.mark.slow
    def test_a_killed_worker_restarts_and_the_job_ends_as_if_never_hit(self, engine, tmp_path, uninterrupted):
        """contract: Restarts: rank 1 killed in epoch 2, ``--max-restarts 1``: one line, and the same parameters."""
        self.needs_processes(engine)
        self._killed_and_restarted(engine, tmp_path, uninterrupted, rtol=0.0)

    @pytest.mark.slow
    @pytest.mark.full  # the restart and the sharded checkpoint's resume each hold in a slow test of their own
    def test_a_killed_sharded_worker_restarts_as_the_replicated_job(self, engine, tmp_path, uninterrupted):
        """contract: Sharding: at ``--shard parameters`` every rank gathers each mid-epoch save, the restarted job
        resumes sharded and ends as the replicated one (the same bits where the engine keeps its additions)."""
        self.needs_processes(engine)
        self.require(engine, "shard_parameters")
        self.require(engine, "shard_processes")
        self._killed_and_restarted(engine, tmp_path, uninterrupted, getattr(self, "shard_rtol", FLOAT64_RTOL),
                                   "--shard", "parameters")

    def _killed_and_restarted(self, engine, tmp_path: Path, straight: Path, rtol: float, *extra: str) -> None:
        hit = tmp_path / "hit.npz"
        argv = command(engine.name, *self.faulted(engine), *extra, "--processes", "2", "--max-restarts", "1",
                       "--checkpoint", str(hit), "--json", str(tmp_path / "hit.json"),
                       "--master", f"127.0.0.1:{free_port()}")
        job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            epoch, step = saved_mid_epoch(hit, 2, [job])
            kill_rank(str(hit), 1, [job])
            _, err = job.communicate(timeout=600)
        finally:
            job.kill()
        assert job.returncode == 0, err[-3000:]
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("multidev: worker rank 1 was killed by SIGKILL: restart 1 of "
                                                       "1, from epoch 2, step "), err[-3000:]
        time.sleep(1)
        assert not job_processes(str(hit)), "restarts: a process of the job is still running"
        assert_same(hit, straight, "restarts: the restarted job does not end as the uninterrupted one", rtol=rtol)
        restarts = json.loads((tmp_path / "hit.json").read_text())["restarts"]
        assert [(r["failed"], r["how"], r["epoch"]) for r in restarts] == [("worker rank 1", "was killed by SIGKILL",
                                                                             2)], restarts
        assert restarts[0]["step"] >= step, (restarts, step)  # from the last save before the fault, or a later one

    @pytest.mark.slow
    def test_sigterm_saves_and_the_same_command_goes_on(self, engine, tmp_path, uninterrupted):
        """contract: Restarts: preemption as clusters do it, then the same command with ``--resume auto``."""
        self.needs_processes(engine)
        straight, stopped = uninterrupted, tmp_path / "stopped.npz"
        again = [*self.faulted(engine), "--processes", "2", "--checkpoint", str(stopped), "--resume", "auto",
                 "--master", f"127.0.0.1:{free_port()}"]
        job = subprocess.Popen(command(engine.name, *again), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            saved_mid_epoch(stopped, 2, [job])
            job.send_signal(signal.SIGTERM)
            _, err = job.communicate(timeout=120)
        finally:
            job.kill()
        assert job.returncode == 143, err[-3000:]
        assert err.strip().splitlines()[-1].startswith("multidev: interrupted at epoch 2, step "), err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        time.sleep(1)
        assert not job_processes(str(stopped)), "restarts: a worker outlived SIGTERM on the launcher"
        run(engine.name, *again)
        assert_same(stopped, straight, "restarts: SIGTERM and the same command again do not end as one run", rtol=0.0)

    @pytest.mark.slow
    def test_two_machines_restart_together(self, engine, tmp_path, uninterrupted):
        """Two launches as two machines, ``--max-restarts 1``: machine 1's worker killed, both go on, same end."""
        self.needs_processes(engine)
        straight, hit = uninterrupted, tmp_path / "hit.npz"
        args = [*self.faulted(engine), "--nnodes", "2", "--master", f"127.0.0.1:{free_port()}", "--max-restarts", "1",
                "--checkpoint", str(hit)]  # one folder both machines read
        nodes = [subprocess.Popen(command(engine.name, *args, "--node-rank", str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in (0, 1)]
        try:
            saved_mid_epoch(hit, 2, nodes)
            kill_rank(str(hit), 1, nodes)
            errs = [err for _, err in outcomes(nodes, 600)]
        finally:
            for node in nodes:
                node.kill()
        assert [node.returncode for node in nodes] == [0, 0], [e[-2000:] for e in errs]
        assert "worker rank 1 was killed by SIGKILL: restart 1 of 1" in errs[1], errs[1][-2000:]
        time.sleep(1)
        assert not job_processes(str(hit)), "restarts: a process of the job is still running"
        assert_same(hit, straight, "restarts: two machines restarted do not end as the uninterrupted job", rtol=0.0)

    @pytest.mark.slow
    def test_a_killed_worker_ends_every_machine(self, engine, tmp_path):
        """Two launches as two machines: killing machine 1's worker ends machine 0's part of the job too."""
        self.needs_processes(engine)
        args = [*JOB, *LONG, "--threads", THREADS, "--nnodes", "2", "--master", f"127.0.0.1:{free_port()}"]
        marker = str(tmp_path / "node")
        nodes = [subprocess.Popen(command(engine.name, *args, "--node-rank", str(r),
                                          "--checkpoint", f"{marker}{r}.npz"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
        try:
            first = first_epoch(nodes[0].stdout)
            assert first.startswith(f"epoch 1/{LONG[1]}"), first + nodes[0].stderr.read()
            kill_rank(f"{marker}1.npz", 1, nodes)
            killed = time.monotonic()
            errs = [err for _, err in outcomes(nodes, KILL_DEADLINE + 30)]
            seconds = time.monotonic() - killed
        finally:
            for node in nodes:
                node.kill()
        assert all(node.returncode not in (0, None) for node in nodes), errs
        assert seconds <= KILL_DEADLINE, f"processes: machine 0 took {seconds:.1f} s to end after a worker was killed"
        assert "rank 1" in errs[1].strip().splitlines()[-1] and "SIGKILL" in errs[1], errs[1][-2000:]
        assert errs[0].strip().splitlines()[-1].startswith("multidev: error:"), errs[0][-2000:]
        time.sleep(1)
        assert not job_processes(marker), "processes: a process of the job is still running"

    @pytest.mark.slow
    def test_a_port_in_use_is_one_line(self, engine):
        self.needs_processes(engine)
        with socket.socket() as taken:
            port = free_port()
            taken.bind(("127.0.0.1", port))
            taken.listen()
            run = subprocess.run(command(engine.name, "--processes", "2", "--master", f"127.0.0.1:{port}"),
                                 capture_output=True, text=True, timeout=300)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1, run.stderr[-2000:]
        assert lines[0].startswith("multidev: error:") and str(port) in lines[0], lines

    @pytest.mark.slow
    def test_ranks_with_other_settings_stop_before_the_first_step(self, engine, tmp_path):
        self.needs_processes(engine)
        master = f"127.0.0.1:{free_port()}"
        args = [*JOB, "--nnodes", "2", "--master", master]
        nodes = [subprocess.Popen(command(engine.name, *args, "--node-rank", str(r), "--lr", lr),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r, lr in ((0, "0.1"), (1, "0.2"))]
        outputs = outcomes(nodes, 300)
        for node, (out, err) in zip(nodes, outputs):
            assert node.returncode == 2, (out, err)
            assert "epoch 1" not in out, "processes: ranks with other settings trained"
            assert "rank 1 was started with other settings than rank 0" in err, err[-2000:]
            assert "Traceback" not in err, err[-2000:]

    @pytest.mark.slow
    def test_resume_with_another_number_of_processes(self, engine, tmp_path):
        """A checkpoint of 2 processes, resumed by 1 process with 2 devices, continues the uninterrupted run."""
        self.needs_processes(engine)
        split, straight = str(tmp_path / "split.npz"), str(tmp_path / "straight.npz")
        run(engine.name, "--processes", "2", "--checkpoint", split)
        run(engine.name, "--devices", "2", "--epochs", "2", "--resume", split, "--checkpoint", split)
        run(engine.name, "--devices", "2", "--epochs", "2", "--checkpoint", straight)
        assert ckpt.load(split)[2]["epoch"] == 2
        assert_same(tmp_path / "split.npz", tmp_path / "straight.npz",
                    "processes: a 2-process checkpoint resumed in 1 process does not continue the run")

    @pytest.mark.slow
    def test_ctrl_c_on_the_launcher_stops_every_worker_and_keeps_the_checkpoint(self, engine, tmp_path):
        self.needs_processes(engine)
        saved = tmp_path / "stopped.npz"
        with long_job(engine.name, saved) as job:
            job.send_signal(signal.SIGINT)
            _, err = job.communicate(timeout=90)
        assert job.returncode == 130, err[-2000:]
        assert "interrupted at epoch" in err and "Traceback" not in err, err[-3000:]
        said = [line for line in err.splitlines() if line.startswith("multidev: interrupted at")]
        assert len(said) == 1 and "checkpoint saved to" in said[0], f"processes: one line for the job, not {said}"
        time.sleep(1)
        assert not job_processes(str(saved)), "processes: a worker outlived Ctrl-C on the launcher"
        _, _, meta = ckpt.load(saved)
        assert meta["epoch"] >= 1
