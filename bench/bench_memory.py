"""Data larger than memory: peak memory of a pass over a folder of `.npy` files as the set grows.

Writes (once) a uint8 image set as a folder of ``.npy`` files, x_train of
shape (N, 3, 64, 64) with N rows to reach ``--gigabytes`` GiB, 10 classes,
and a small test set; then, for the first 0.5, 1, 2, 4 GiB of its rows (as
``multidev.data.npy.folder`` reads them: each minibatch's rows read from the
file with ``os.pread``), measures each of these in a fresh process:

* ``epoch``: the core's own read path, no engine: ``Epoch.micro_batches``
  and ``Epoch.shards`` (``job.shards`` -> ``rules/split.py``) over the whole
  epoch at batch size 256, each shard made a contiguous float32 array as an
  engine would before copying it to a device;
* ``train``: ``multidev.train(backend="torch", ...)``, one epoch at batch
  size 512 of a small model (average pooling, then a two-layer MLP), test
  set evaluated; full epochs (multidev has no step limit);
* ``np.load``: for contrast, the naive way on the smallest size only: the
  rows read whole with ``np.load`` (no mmap) into memory, then the same
  ``epoch`` pass over the in-memory array.

Memory is read from the kernel: ``ru_maxrss`` (peak resident set), and
/proc/self/status sampled every 20 ms (VmHWM, RssAnon, RssFile), plus
/proc/self/smaps_rollup once the pass is over.
Rows are read into the process's own buffers, so no file page stays in its
resident set: RSS is what it holds (arrays, the framework, minibatches) and
must stay flat as the set grows. (A memory map, multidev's first version,
kept every page it had read resident: RSS grew to 4.2 GiB for a 4 GiB set,
clean page cache but counted.) The table shows anonymous and file-backed
resident memory apart. The page cache is warm (the set was just written or read
by the previous run), so rows/s is not disk speed.

    python bench/bench_memory.py --gigabytes 4 --sizes 0.5,1,2,4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

GiB, MiB = 2 ** 30, 2 ** 20
SAMPLE = (3, 64, 64)
ROW = int(np.prod(SAMPLE))  # bytes of one uint8 sample
CLASSES, TEST_ROWS = 10, 2048
FILES = ("x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy", "small/x_train.npy", "complete")
LIMIT_MIB = 1024  # the promise: under 1 GB


# ---- writing the set ---------------------------------------------------------------------------------------------

def _write_x(path: Path, rows: int, seed: int, bar) -> None:
    """``rows`` random uint8 samples: the file made (header, size) by ``open_memmap``, then filled chunk by chunk
    with plain writes, so the writer holds one chunk, not the mapped file's pages."""
    made = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(rows, *SAMPLE))
    offset = made.offset
    del made
    rng = np.random.default_rng(seed)
    chunk = 1024
    with open(path, "r+b") as f:
        f.seek(offset)
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            f.write(rng.bytes(n * ROW))
            if bar is not None:
                bar.update(n * ROW)
        f.flush()
        os.fsync(f.fileno())  # on disk, clean in the page cache: as a set written long ago


def _copy_rows(source: Path, target: Path, rows: int) -> None:
    """The first ``rows`` of ``source`` as their own ``.npy`` file (for the naive ``np.load``), in chunks."""
    x = np.load(source, mmap_mode="r")
    made = np.lib.format.open_memmap(target, mode="w+", dtype=x.dtype, shape=(rows, *x.shape[1:]))
    offset = made.offset
    del made
    with open(target, "r+b") as f:
        f.seek(offset)
        f.writelines(np.ascontiguousarray(x[start:min(start + 1024, rows)]).tobytes() for start in range(0, rows, 1024))
        f.flush()
        os.fsync(f.fileno())
    del x


def write_set(folder: Path, rows: int, small_rows: int) -> bool:
    """The set in ``folder``, written unless a complete one of ``rows`` rows is there; True when written."""
    done = folder / "complete"
    if done.is_file() and done.read_text().strip() == f"{rows} {small_rows}":
        return False
    from tqdm.auto import tqdm

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "small").mkdir(exist_ok=True)
    done.unlink(missing_ok=True)
    need = (rows + small_rows + TEST_ROWS) * ROW
    free = shutil.disk_usage(folder).free
    if free < need + GiB:
        sys.exit(f"{folder}: {free / GiB:.1f} GiB free, the set needs {need / GiB:.1f} GiB (and 1 GiB to spare)")
    with tqdm(total=need, unit="B", unit_scale=True, desc=f"writing {folder}") as bar:
        _write_x(folder / "x_train.npy", rows, 1, bar)
        _write_x(folder / "x_test.npy", TEST_ROWS, 2, bar)
        _copy_rows(folder / "x_train.npy", folder / "small" / "x_train.npy", small_rows)
        bar.update(small_rows * ROW)
    rng = np.random.default_rng(3)
    np.save(folder / "y_train.npy", rng.integers(0, CLASSES, rows, dtype=np.int64))
    np.save(folder / "y_test.npy", rng.integers(0, CLASSES, TEST_ROWS, dtype=np.int64))
    done.write_text(f"{rows} {small_rows}\n")
    return True


def remove_set(folder: Path) -> None:
    """The files this bench writes, and the folders if that leaves them empty; nothing else."""
    for name in FILES:
        (folder / name).unlink(missing_ok=True)
    for d in (folder / "small", folder):
        try:
            d.rmdir()
        except OSError:
            pass


# ---- measuring, in a fresh process ------------------------------------------------------------------------------

def status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem from /proc/self/status, in KiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0])
    return out


def _rollup() -> dict[str, int]:
    """/proc/self/smaps_rollup in KiB (Rss, Anonymous, Private_Clean, ...), and as ``set`` the resident pages of
    the mapped x_train.npy files (from /proc/self/smaps)."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                out[key] = int(value.split()[0])
    out["set"], inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and ":" not in head[0]:  # a mapping's first line: range perms offset dev inode [path]
                inside = head[-1].endswith("x_train.npy")
            elif inside and head[0] == "Rss:":
                out["set"] += int(head[1])
    return out


@contextlib.contextmanager
def sampling(every: float = 0.02) -> Iterator[dict[str, int]]:
    """The highest VmRSS, RssAnon and RssFile seen (KiB), read every ``every`` seconds on a thread."""
    peak, stop = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}, threading.Event()

    def take() -> None:
        now = status()
        for key, value in peak.items():
            peak[key] = max(value, now[key])

    def run() -> None:
        while not stop.is_set():
            take()
            stop.wait(every)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
        take()


def _data(folder: Path, rows: int, naive: bool):
    """The set as ``npy.folder`` reads it, its first ``rows`` rows (``Taken`` of the same file); ``naive``: those
    rows read whole with ``np.load`` (a file of just them), then read per minibatch like the mapped one."""
    from multidev.data import npy
    from multidev.data.dataset import Dataset
    from multidev.data.rows import Pixels, Taken

    data = npy.folder(folder)
    if naive:
        x = Pixels(np.load(folder / "small" / "x_train.npy"))  # the naive way: the whole file in memory
    elif rows == len(data.x_train):
        return data
    else:
        x = Taken(data.x_train, np.arange(rows))
    return Dataset(data.name, x, data.y_train[:rows], data.x_test, data.y_test, data.num_classes)


def _epoch_pass(folder: Path, rows: int, naive: bool, batch: int) -> tuple[int, dict]:
    """The core's read path over one epoch, no engine: micro-batches, this process's shards, float32 copies."""
    from types import SimpleNamespace

    from multidev.settings.run import Settings
    from multidev.training.loop import Epoch

    data = _data(folder, rows, naive)
    epoch = Epoch(1, data, Settings(batch_size=batch), seed=0, rate=lambda step: 0.1)
    replicas = SimpleNamespace(setup=SimpleNamespace(devices=(0,), spec=SimpleNamespace(dropouts=list),
                                                     np_dtype=np.dtype(np.float32)))
    seen, check = 0, 0.0
    for step, last, part, whole, first in epoch.micro_batches(0):
        shards = epoch.shards(replicas, step, part, whole, first)
        for x, y in zip(shards.x, shards.y):
            x = np.ascontiguousarray(x, dtype=np.float32)  # what an engine copies to its device
            y = np.ascontiguousarray(y, dtype=np.int64)
            check += float(x[:, 0, 0, 0].sum())
            seen += len(y)
    return seen, _rollup()


def _tiny_model():
    from multidev.nn import AvgPool2d, Dense, Flatten, ReLU, Sequential

    return Sequential(AvgPool2d(4), Flatten(), Dense(128), ReLU(), Dense())


def _train_pass(folder: Path, rows: int, batch: int) -> tuple[int, dict]:
    """``multidev.train`` on torch, one epoch of the rows; the full set by its folder's path, as a user gives it."""
    import multidev

    data = str(folder) if rows == len(np.load(folder / "y_train.npy", mmap_mode="r")) else _data(folder, rows, False)
    at_end: dict = {}
    result = multidev.train(backend="torch", model=_tiny_model(), dataset=data, epochs=1, batch_size=batch, lr=0.01,
                            progress=False, on_epoch=lambda record: at_end.update(_rollup()))
    return (rows if result.epochs else 0), at_end


def measure(mode: str, folder: Path, rows: int, batch: int) -> dict:
    """One pass of ``mode`` over ``rows`` rows in this process, with its memory and time."""
    if mode == "train":
        import torch  # noqa: F401  (the framework's own memory counts in the baseline, not in the pass)
    import multidev.training.loop  # noqa: F401
    start = status()
    clock = time.perf_counter()
    with sampling() as peak:
        if mode == "train":
            seen, rollup = _train_pass(folder, rows, batch)
        else:
            seen, rollup = _epoch_pass(folder, rows, mode == "np.load", batch)
    seconds = time.perf_counter() - clock
    return {"mode": mode, "rows": rows, "seen": seen, "seconds": seconds,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "hwm_kib": max(status()["VmHWM"], peak["VmRSS"]),
            "anon_start_kib": start["RssAnon"], "peak_anon_kib": peak["RssAnon"],
            "peak_file_kib": peak["RssFile"], "rollup_kib": rollup}


def in_child(mode: str, folder: Path, rows: int, batch: int) -> dict:
    command = [sys.executable, __file__, "--measure", mode, "--folder", str(folder), "--rows", str(rows),
               "--batch-size", str(batch)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- the report ----------------------------------------------------------------------------------------------------

def _mib(kib: int) -> int:
    return round(kib / 1024)


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=4.0, help="size of the written x_train, GiB")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/multidev-bench-memory"),
                        help="where the set is written (reused when a complete one of the right size is there)")
    parser.add_argument("--sizes", default="0.5,1,2,4", help="GiB of rows measured (those above --gigabytes are "
                        "dropped; --gigabytes itself always is measured)")
    parser.add_argument("--modes", default="epoch,train,np.load", help="which passes: epoch, train, np.load")
    parser.add_argument("--keep", action="store_true", help="keep the set; by default the files this run wrote "
                        "are deleted at the end (a set found already there is left as it was)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.folder, args.rows, args.batch_size)))
        return

    total = int(args.gigabytes * GiB // ROW)
    sizes = sorted({s for s in (float(v) for v in args.sizes.split(",")) if s < args.gigabytes} | {args.gigabytes})
    counts = [min(total, int(s * GiB // ROW)) for s in sizes]
    modes = args.modes.split(",")
    wrote = write_set(args.folder, total, counts[0])
    try:
        print(f"# {total} rows of {'x'.join(map(str, SAMPLE))} uint8 ({total * ROW / GiB:.2f} GiB) in "
              f"{args.folder}; {_cpu()}, {os.cpu_count()} cores, "
              f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / GiB:.0f} GiB RAM; "
              f"numpy {np.__version__}, python {platform.python_version()}", flush=True)
        print("| path | set (GiB) | rows | peak RSS, VmHWM (MiB) | ru_maxrss (MiB) | peak anonymous (MiB) | "
              "anonymous at start (MiB) | peak file-backed (MiB) | seconds | rows/s |\n"
              "|---|---|---|---|---|---|---|---|---|---|", flush=True)
        results = []
        plan = [(m, n) for m in ("epoch", "train") if m in modes for n in counts]
        plan += [("np.load", counts[0])] if "np.load" in modes else []
        for mode, rows in plan:
            r = in_child(mode, args.folder, rows, 512 if mode == "train" else 256)
            assert r["seen"] == rows, r
            results.append(r)
            label = {"epoch": "core read path (Epoch.shards)", "train": "multidev.train torch",
                     "np.load": "np.load (no mmap), same pass"}[mode]
            print(f"| {label} | {rows * ROW / GiB:.2f} | {rows} | {_mib(r['hwm_kib'])} | {_mib(r['maxrss_kib'])} "
                  f"| {_mib(r['peak_anon_kib'])} "
                  f"| {_mib(r['anon_start_kib'])} | {_mib(r['peak_file_kib'])} | {r['seconds']:.1f} "
                  f"| {rows / r['seconds']:.0f} |", flush=True)
        print("\nWhere the RSS is once the pass is over, the set still open (smaps_rollup, MiB):\n")
        print("| path | set (GiB) | Rss | Anonymous | x_train.npy pages mapped | Private_Clean | Shared_Clean | "
              "Private_Dirty |\n|---|---|---|---|---|---|---|---|")
        for r in results:
            u = r["rollup_kib"]
            print(f"| {r['mode']} | {r['rows'] * ROW / GiB:.2f} | {_mib(u.get('Rss', 0))} "
                  f"| {_mib(u.get('Anonymous', 0))} "
                  f"| {_mib(u['set'])} | {_mib(u.get('Private_Clean', 0))} | {_mib(u.get('Shared_Clean', 0))} "
                  f"| {_mib(u.get('Private_Dirty', 0))} |")
        print("\n(ru_maxrss can carry the launching process's peak through exec; VmHWM is this process's own. "
              "File-backed memory is the x_train.npy pages and the libraries' code (numpy's, torch's). "
              "Private_Clean file pages are the page cache: the kernel drops them when memory runs short.)")
        verdict(results)
    finally:
        if wrote and not args.keep:
            remove_set(args.folder)


def verdict(results: list[dict]) -> None:
    print()
    for mode in ("epoch", "train"):
        runs = [r for r in results if r["mode"] == mode]
        if not runs:
            continue
        small, big = runs[0], runs[-1]
        rss, anon = _mib(max(r["hwm_kib"] for r in runs)), _mib(max(r["peak_anon_kib"] for r in runs))
        grew = _mib(big["peak_anon_kib"] - small["peak_anon_kib"])
        gb = big["rows"] * ROW / GiB
        print(f"verdict ({mode}, up to {gb:.2f} GiB): peak RSS {rss} MiB, {'under' if rss < LIMIT_MIB else 'OVER'} "
              f"1 GiB; the memory the "
              f"process holds (anonymous) peaks at {anon} MiB, {'under' if anon < LIMIT_MIB else 'OVER'} 1 GiB, "
              f"{grew:+d} MiB from {small['rows'] * ROW / GiB:.2f} to {gb:.2f} GiB of rows")
    naive = [r for r in results if r["mode"] == "np.load"]
    mapped = [r for r in results if r["mode"] == "epoch" and naive and r["rows"] == naive[0]["rows"]]
    if naive and mapped:
        print(f"np.load of {naive[0]['rows'] * ROW / GiB:.2f} GiB holds {_mib(naive[0]['peak_anon_kib'])} MiB "
              f"anonymous against {_mib(mapped[0]['peak_anon_kib'])} MiB read per minibatch: it grows with the set")


if __name__ == "__main__":
    main()
