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


def page(results: Path) -> str:
    listed = "\n".join(f"- `python -m {module}`: {line}" for module, line in scripts())
    found = records(results)
    body = "\n".join(section(r) for r in found) if found else \
        "No results are kept yet: run a script without `--smoke`, then `python -m bench.summary`.\n"
    return INTRO + listed + "\n\n## Results\n\n" + body


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
