"""Data larger than memory: peak memory of a pass over a folder of `.npy` files as the set grows.

Writes (once) a uint8 image set as a folder of ``.npy`` files, x_train of
shape (N, 3, 64, 64) with N rows to reach ``--gigabytes`` GiB, 10 classes,
and a small test set; then, for the first 0.5, 1, 2, 4 GiB of its rows (as
``multidev.data.load_dataset`` reads a folder: each minibatch's rows read
from the file with ``os.pread``), measures each of these in a fresh process
(``bench.harness.fresh``):

* ``epoch``: the core's read path, no engine: the set as
  ``multidev.data.load_dataset`` reads it, an epoch's order and minibatches
  (``multidev.data.epoch_order``, ``batches``) at batch size 256, each
  minibatch's rows read and cut into shards (``multidev.cut``), each shard
  made a contiguous float32 array as an engine would before copying it to a
  device;
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
must stay flat as the set grows (a memory map would keep every page read
resident: clean page cache, but counted). The table shows anonymous and
file-backed resident memory apart. The page cache is warm (the set was just written or read
by the previous run), so rows/s is not disk speed.

    python -m bench.bench_memory --gigabytes 4 --sizes 0.5,1,2,4
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import harness
from bench.harness.memory import sampling, status
from bench.memory_set import GiB, ROW, SAMPLE, remove_set, write_set

LIMIT_MIB = 1024  # the promise: under 1 GB
SMOKE = {"gigabytes": 0.004, "sizes": "0.002", "folder": Path(f"/tmp/multidev-bench-memory-smoke-{os.getpid()}")}
LABELS = {"epoch": "core read path (multidev.data)", "train": "multidev.train torch",
          "np.load": "np.load (no mmap), same pass"}


# ---- measuring, in a fresh process ------------------------------------------------------------------------------

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


class First:
    """The first ``rows`` samples of a set read a minibatch at a time: a view, nothing read until asked."""

    def __init__(self, base: Any, rows: int) -> None:
        self.base, self.shape = base, (rows, *base.shape[1:])

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def dtype(self) -> np.dtype:
        return self.base.dtype

    def __getitem__(self, index: Any) -> np.ndarray:
        index = np.arange(len(self))[index] if isinstance(index, slice) else np.asarray(index)
        if index.size and int(index.max()) >= len(self):
            raise IndexError(f"row {int(index.max())} of the first {len(self)}")
        return self.base[index]


def _data(folder: Path, rows: int):
    """The set as ``multidev.data.load_dataset`` reads a folder of ``.npy`` files, cut to its first ``rows``."""
    from multidev.data import load_dataset

    data = load_dataset(str(folder))
    if rows == len(data.x_train):
        return data
    return dataclasses.replace(data, x_train=First(data.x_train, rows), y_train=data.y_train[:rows])


def _epoch_pass(folder: Path, rows: int, naive: bool, batch: int) -> tuple[int, dict]:
    """The core's read path over one epoch, no engine: an epoch's order, its minibatches read and cut into shards,
    each shard a float32 copy; ``naive``: the rows first read whole with ``np.load`` (a file of just them)."""
    import multidev
    from multidev.data import batches, epoch_order

    data = _data(folder, rows)
    if naive:  # the naive way: the whole file in memory, scaled per minibatch as the core scales uint8 pixels
        stored = np.load(folder / "small" / "x_train.npy")
        read = lambda index: stored[index].astype(np.float32) / np.float32(255)  # noqa: E731
    else:
        read = lambda index: data.x_train[index]  # noqa: E731
    seen, check = 0, 0.0
    for index in batches(epoch_order(rows, 0, 1), batch):
        shards = multidev.cut(read(index), data.y_train[index], multidev.shard_sizes(len(index), 1))
        for x, y in zip(shards.x, shards.y):
            x = np.ascontiguousarray(x, dtype=np.float32)  # what an engine copies to its device
            check += float(x[:, 0, 0, 0].sum())
            seen += len(np.ascontiguousarray(y, dtype=np.int64))
    return seen, _rollup()


def _train_pass(folder: Path, rows: int, batch: int) -> tuple[int, dict]:
    """``multidev.train`` on torch, one epoch of the rows; the full set by its folder's path, as a user gives it."""
    import multidev
    from multidev.nn import AvgPool2d, Dense, Flatten, ReLU, Sequential

    whole = rows == len(np.load(folder / "y_train.npy", mmap_mode="r"))
    at_end: dict = {}
    result = multidev.train(backend="torch", model=Sequential(AvgPool2d(4), Flatten(), Dense(128), ReLU(), Dense()),
                            dataset=str(folder) if whole else _data(folder, rows), epochs=1, batch_size=batch,
                            lr=0.01, progress=False, on_epoch=lambda record: at_end.update(_rollup()))
    return (rows if result.epochs else 0), at_end


def measure(mode: str, folder: str, rows: int, batch: int) -> dict:
    """One pass of ``mode`` over ``rows`` rows in this (fresh) process, with its memory and time."""
    if mode == "train":
        import torch  # noqa: F401  (the framework's own memory counts in the baseline, not in the pass)
    import multidev  # noqa: F401
    start = status()
    clock = time.perf_counter()
    with sampling() as peak:
        if mode == "train":
            seen, rollup = _train_pass(Path(folder), rows, batch)
        else:
            seen, rollup = _epoch_pass(Path(folder), rows, mode == "np.load", batch)
    seconds = time.perf_counter() - clock
    return {"mode": mode, "rows": rows, "seen": seen, "seconds": seconds,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "hwm_kib": max(status()["VmHWM"], peak["VmRSS"]),
            "anon_start_kib": start["RssAnon"], "peak_anon_kib": peak["RssAnon"],
            "peak_file_kib": peak["RssFile"], "rollup_kib": rollup}


# ---- the report ----------------------------------------------------------------------------------------------------

def _mib(kib: int) -> int:
    return round(kib / 1024)


def parse():
    p = harness.parser(__doc__)
    p.add_argument("--gigabytes", type=float, default=4.0, help="size of the written x_train, GiB")
    p.add_argument("--folder", type=Path, default=Path("/tmp/multidev-bench-memory"),
                   help="where the set is written (reused when a complete one of the right size is there)")
    p.add_argument("--sizes", default="0.5,1,2,4", help="GiB of rows measured (those above --gigabytes are "
                   "dropped; --gigabytes itself always is measured)")
    p.add_argument("--modes", default="epoch,train,np.load", help="which passes: epoch, train, np.load")
    p.add_argument("--keep", action="store_true", help="keep the set; by default the files this run wrote "
                   "are deleted at the end (a set found already there is left as it was)")
    return harness.parse(p, SMOKE)


def main() -> None:
    args = parse()
    total = int(args.gigabytes * GiB // ROW)
    sizes = sorted({s for s in (float(v) for v in args.sizes.split(",")) if s < args.gigabytes} | {args.gigabytes})
    counts = [min(total, int(s * GiB // ROW)) for s in sizes]
    modes = args.modes.split(",")
    wrote = write_set(args.folder, total, counts[0])
    try:
        report = harness.report(__file__, args, f"{total} rows of {'x'.join(map(str, SAMPLE))} uint8 "
                                f"({total * ROW / GiB:.2f} GiB) in {args.folder}, the page cache warm")
        plan = [(m, n) for m in ("epoch", "train") if m in modes for n in counts]
        plan += [("np.load", counts[0])] if "np.load" in modes else []
        results = []
        for mode, rows in plan:
            r = harness.fresh(measure, label=mode, mode=mode, folder=str(args.folder), rows=rows,
                              batch=512 if mode == "train" else 256, timeout=900)
            assert r["seen"] == rows, r
            results.append(r)
            report.add(row(r))
        report.note("(ru_maxrss can carry the launching process's peak through exec; VmHWM is this process's own. "
                    "Private_Clean file pages are the page cache: the kernel drops them when memory runs short.)")
        for line in verdict(results):
            report.note(line)
        report.save()
    finally:
        if wrote and not args.keep:
            remove_set(args.folder)


def row(r: dict) -> dict[str, Any]:
    """A pass's row: its peaks, and where its resident memory was once it was over (smaps_rollup)."""
    u = r["rollup_kib"]
    return {"path": LABELS[r["mode"]], "set (GiB)": r["rows"] * ROW / GiB, "rows": r["rows"],
            "peak RSS, VmHWM (MiB)": _mib(r["hwm_kib"]), "ru_maxrss (MiB)": _mib(r["maxrss_kib"]),
            "peak anonymous (MiB)": _mib(r["peak_anon_kib"]), "anonymous at start (MiB)": _mib(r["anon_start_kib"]),
            "peak file-backed (MiB)": _mib(r["peak_file_kib"]), "seconds": r["seconds"],
            "rows/s": r["rows"] / r["seconds"], "at the end: Rss (MiB)": _mib(u.get("Rss", 0)),
            "Anonymous": _mib(u.get("Anonymous", 0)), "x_train.npy pages mapped": _mib(u["set"]),
            "Private_Clean": _mib(u.get("Private_Clean", 0))}


def verdict(results: list[dict]) -> list[str]:
    """Whether memory stays under 1 GiB and flat as the set grows, one line per path."""
    lines = []
    for mode in ("epoch", "train"):
        runs = [r for r in results if r["mode"] == mode]
        if not runs:
            continue
        small, big = runs[0], runs[-1]
        rss, anon = _mib(max(r["hwm_kib"] for r in runs)), _mib(max(r["peak_anon_kib"] for r in runs))
        grew = _mib(big["peak_anon_kib"] - small["peak_anon_kib"])
        gb = big["rows"] * ROW / GiB
        lines.append(f"verdict ({mode}, up to {gb:.2f} GiB): peak RSS {rss} MiB, "
                     f"{'under' if rss < LIMIT_MIB else 'OVER'} 1 GiB; the memory the "
                     f"process holds (anonymous) peaks at {anon} MiB, "
                     f"{'under' if anon < LIMIT_MIB else 'OVER'} 1 GiB, "
                     f"{grew:+d} MiB from {small['rows'] * ROW / GiB:.2f} to {gb:.2f} GiB of rows")
    naive = [r for r in results if r["mode"] == "np.load"]
    mapped = [r for r in results if r["mode"] == "epoch" and naive and r["rows"] == naive[0]["rows"]]
    if naive and mapped:
        lines.append(f"np.load of {naive[0]['rows'] * ROW / GiB:.2f} GiB holds "
                     f"{_mib(naive[0]['peak_anon_kib'])} MiB anonymous against {_mib(mapped[0]['peak_anon_kib'])} "
                     "MiB read per minibatch: it grows with the set")
    return lines


if __name__ == "__main__":
    main()
