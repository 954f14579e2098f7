"""``python -m bench.summary``: docs/design/benchmarks.md written from every result file under bench/results.

The page says what each script compares and how to run it (from the
scripts' docstrings, read without importing them), then gives one table per
script and machine kind, with the run's date, commit, machine and settings.
It is generated: change the scripts or rerun them, then this.

    python -m bench.summary                                   # bench/results -> docs/design/benchmarks.md
    python -m bench.summary --results /tmp/smoke --out /tmp/smoke/benchmarks.md
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from typing import Any

from bench.harness.cli import RESULTS
from bench.harness.machine import ROOT
from bench.harness.results import table

BENCH = ROOT / "bench"
PAGE = ROOT / "docs" / "design" / "benchmarks.md"
FRAMEWORKS = ("torch", "jax", "flax", "keras", "mxnet", "numpy")

INTRO = """# Benchmarks

<!-- Written by `python -m bench.summary` from bench/results/: edit the scripts or rerun them, not this page. -->

Speed and memory are measured by the scripts in `bench/`, never asserted in
tests. Each comparison runs its contenders in alternating rounds (in one
process, or each in a fresh process of its own) and reports medians and their
ratio, because the machines here are shared and noisy (see
[Design records](index.md)). Run a script from the repository's root:

```bash
python -m bench.bench_jax --devices 1,2 --steps 5 --rounds 2
python -m bench.bench_engines --backends torch,jax,mxnet --devices 1,2
python -m bench.summary        # this page, from bench/results/
.ci/bench-smoke                # every script at its smallest (--smoke), results in a temporary folder
```

A run keeps its figures in `bench/results/<kind>/<script>.json` (`kind`: the
CPU's, such as `amd-epyc-zen3` or `intel-xeon-amx`, or the GPU's, such as
`nvidia-h100`), with the commit, the date, the machine's facts and the
settings; a later run on the same kind replaces them. `--smoke` runs a script
at its smallest to check it still works; its figures go to a temporary folder
(or `--results DIR`). `bash bench/cpu_check.sh` runs the per-CPU checks in one
command, `bash bench/gpu_check.sh` everything a lent GPU runs.

## The scripts

"""

MODEL_TABLE = """## The model table

`bench.bench_models` trains ResNet-50 (torchvision's, 32x32x3), MobileNetV2
(the zoo's: torchvision's blocks, stem and first two stages at stride 1) and
the zoo's ViT on every engine and, beside each, its framework's hand-written
loop of the same network: torchvision's module in a plain PyTorch loop, a
jitted Flax + Optax step over a device mesh, a hybridized Gluon network, and
Keras 3's `DataParallel` on the same JAX. Every contender runs in a fresh
process, in turn, `--rounds` times, and asserts that its network has the
parameter count of multidev's; ResNet-50 and MobileNetV2 reach multidev as
a user brings them, exported by torch to ONNX and read by `nn.from_onnx`.
It needs torchvision (`pip install --no-deps torchvision`), onnx and Keras 3
(`pip install -c constraints.txt keras`; without it the Keras column is
skipped), and a quiet machine:

```bash
python -m bench.bench_models                    # the three networks, batch 32, 1 device
python -m bench.bench_models --devices 1,2      # and on 2 devices
python -m bench.bench_models --models vit --rounds 5 --label vit
python -m bench.bench_models --gpu --engines torch,jax --batch 256   # on a GPU (bench/gpu_check.sh runs it)
python -m bench.summary                         # this page
```

"targets" holds each engine's row to the issue's figures: at least 0.95 of
its hand-written loop, the JAX engine at least 1.1 of Keras, torch and MXNet
at least 0.8 of the fastest engine on that network. The tables below keep
the engines' columns (on a GPU, with each engine's share of the data
sheet's float32 peak); each run's every column is under Results.

"""
#: the model table's columns kept on the page's own table
MODEL_COLUMNS = ("model", "devices", "engine", "params", "engine samples/s", "engine / hand-written", "engine / Keras",
                 "engine / fastest engine", "engine first step s", "targets", "share of fp32 peak")


def scripts() -> list[tuple[str, str]]:
    """(module, first line of its docstring) of every script in bench/."""
    found = []
    for path in sorted(BENCH.glob("*.py")):
        if path.stem.startswith(("bench_", "profile_")):
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            found.append((f"bench.{path.stem}", doc.splitlines()[0] if doc else ""))
    return found


def records(results: Path) -> list[dict[str, Any]]:
    """Every result file under ``results``, by script, then machine kind."""
    found = [json.loads(path.read_text()) for path in sorted(results.glob("*/*.json"))]
    return sorted(found, key=lambda r: (r["script"], r["kind"]))


def section(record: dict[str, Any]) -> str:
    """One run: where and when, its settings, its table, its notes."""
    facts = record["machine"]
    cpu, versions = facts["cpu"], facts["versions"]
    where = f"{cpu['model_name']} (family {cpu['family']} model {cpu['model']}; {', '.join(cpu['flags']) or 'no AVX'}"
    where += f"; {cpu['cores']} cores)" + (f", {facts['gpu']}" if facts.get("gpu") else "")
    made = ", ".join(f"{name} {versions[name]}" for name in FRAMEWORKS if name in versions)
    commit = facts["commit"][:10] + (" with local changes" if facts.get("dirty") else "")
    settings = ", ".join(f"`{k}={v}`" for k, v in record["settings"].items() if k != "smoke" and v not in (None, False))
    lines = [f"### {record['script']} on {record['kind']}", ""]
    if record.get("smoke"):
        lines += ["A smoke run (`--smoke`): these figures only show that the script runs.", ""]
    lines += [f"{record['date'][:10]}, commit {commit}; {where}; {made}.", "",
              f"{record['setup']}.", "", f"Settings: {settings}.", "",
              table(record["rows"]) if record["rows"] else "(no rows)", ""]
    lines += [f"{note}  " for note in record["notes"]]
    return "\n".join(lines).rstrip() + "\n"


def model_tables(found: list[dict[str, Any]]) -> str:
    """The model table's section: how to run it, then per machine kind its rows cut to the engines' rates, ratios
    and targets (every column is in the run's own section under Results)."""
    kept = [r for r in found if r["script"].split("-")[0] == "bench_models"]
    tables = [model_table(r) for r in kept] or \
        ["No model table is kept yet: run `python -m bench.bench_models`, then `python -m bench.summary`.\n"]
    return MODEL_TABLE + "\n".join(tables)


def model_table(record: dict[str, Any]) -> str:
    commit = record["machine"]["commit"][:10]
    lines = [f"### {record['script']} on {record['kind']}", "",
             f"{record['date'][:10]}, commit {commit}{' (a smoke run: no results)' if record.get('smoke') else ''}.",
             "", table([{k: row[k] for k in MODEL_COLUMNS if k in row} for row in record["rows"]])
             if record["rows"] else "(no rows)", ""]
    return "\n".join(lines)


def page(results: Path) -> str:
    listed = "\n".join(f"- `python -m {module}`: {line}" for module, line in scripts())
    found = records(results)
    body = "\n".join(section(r) for r in found) if found else \
        "No results are kept yet: run a script without `--smoke`, then `python -m bench.summary`.\n"
    return INTRO + listed + "\n\n" + model_tables(found) + "\n## Results\n\n" + body


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS, help="the folder of result files (bench/results)")
    p.add_argument("--out", type=Path, default=PAGE, help="the page to write (docs/design/benchmarks.md)")
    args = p.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page(args.results))
    print(f"wrote {args.out} from {len(records(args.results))} result file(s) in {args.results}")


if __name__ == "__main__":
    main()
