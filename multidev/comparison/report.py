"""What ``multidev compare`` writes: the table, the JSON and the plots.

Every run is named by its ``Settings.label`` ("torch x1", "torch x1 float64",
"mxnet x2 bf16") in the table's first column and in every plot, so a row and
a line tell the same run; runs whose labels are alike are told apart by the
settings they differ in (:func:`run_labels`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from multidev.comparison.runs import Outcome
from multidev.outputs.plot import distinct, plot_divergence, run_styles
from multidev.outputs.result import write_text_atomic
from multidev.settings import fields
from multidev.settings.run import Settings


def run_labels(specs: Sequence[Settings]) -> list[str]:
    """Each run's ``Settings.label``; where several share one, with the settings that tell them apart
    ("torch x1 lr=0.1", "torch x1 lr=0.12"), and numbered where nothing does ("torch x1 (2)")."""
    labels = [s.label for s in specs]
    groups: dict[str, list[int]] = {}
    for i, text in enumerate(labels):
        groups.setdefault(text, []).append(i)
    for group in groups.values():
        if len(group) < 2:
            continue
        for f, meta in fields.fields(Settings):
            if f.name == "backend" or meta.agree is not True:  # the engine is in the label; paths are no setting
                continue
            values = [getattr(specs[i], f.name) for i in group]
            texts = ["none" if v is None else meta.text(v) for v in values]
            if len(set(texts)) > 1:
                for i, text in zip(group, texts):
                    labels[i] += f" {f.name}={text}"
    return distinct(labels)


def _distances(o: Outcome) -> str:
    d = o.divergence
    if o.spec.dtype == "float64" and d is None:
        return "truth"
    if d is None or not d.steps:
        return ""
    return " / ".join(f"{d.at(step):.1e}" for step in (d.steps[0], min(8, d.steps[-1]), d.steps[-1])
                      if d.at(step) is not None)


def _samples_per_sec(o: Outcome) -> float:
    return sum(e.samples_per_sec for e in o.result.epochs) / len(o.result.epochs)


def _recipes(outcomes: Sequence[Outcome], names: Sequence[str]) -> str:
    """The recipe above the table, less the precision that the run labels give ("mxnet x2 bf16"); where runs
    differ in it, each recipe with the runs that took it."""
    runs: dict[str, list[str]] = {}
    for o, name in zip(outcomes, names):
        runs.setdefault(replace(o.spec.recipe, precision="fp32").label(), []).append(name)
    if len(runs) == 1:
        only = next(iter(runs))
        return f"Recipe: {only}" if only else ""
    return "Recipes: " + "; ".join(f"{recipe or 'plain sgd'} ({', '.join(names)})" for recipe, names in runs.items())


def markdown(outcomes: Sequence[Outcome]) -> str:
    rows = [("| run | engine | devices | dtype | batch | lr | sec/epoch | samples/s | compile s | test acc | "
             "vs float64: step 1 / 8 / last | difference |"),
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    names = run_labels([o.spec for o in outcomes])
    line = _recipes(outcomes, names)
    if line:
        rows.insert(0, line + "\n")
    for o, name in zip(outcomes, names):
        s = o.spec
        where = s.device_count if s.processes == 1 else f"{s.processes} processes x {s.device_count}"
        head = f"| {name} | {s.engine_name} | {where} | {s.dtype} | {s.batch_size} | {s.lr} |"
        if o.result is None:
            rows.append(f"{head} failed: {o.error} | | | | | |")
            continue
        r = o.result
        rows.append(f"{head} {r.sec_per_epoch:.2f} | {_samples_per_sec(o):.0f} | {r.compile_seconds:.1f} | "
                    f"{r.test_acc:.3f} | {_distances(o)} | {o.verdict or ''} |")
    return "\n".join(rows) + "\n"


def throughput_figure(outcomes: Sequence[Outcome]):
    """The figure of :func:`plot_throughput`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = run_labels([o.spec for o in outcomes])
    done = [i for i, o in enumerate(outcomes) if o.result is not None]
    # the colours of the accuracy plot, which has the finished runs in this order
    colors = dict(zip(done, (c for c, _ in run_styles([outcomes[i].spec.engine_name for i in done]))))
    engines = list(dict.fromkeys(o.spec.engine_name for o in outcomes))
    order = sorted(range(len(outcomes)), key=lambda i: engines.index(outcomes[i].spec.engine_name))
    ys, y = [], 0.0
    for k, i in enumerate(order):  # half a row between engines
        if k and outcomes[i].spec.engine_name != outcomes[order[k - 1]].spec.engine_name:
            y += 0.5
        ys.append(y)
        y += 1
    fig, ax = plt.subplots(figsize=(6.4, 0.3 * y + 1.3), dpi=120)
    rates = {i: _samples_per_sec(outcomes[i]) for i in done}
    top = max(rates.values(), default=1.0)
    for i, y in zip(order, ys):
        if i in rates:
            bars = ax.barh([y], [rates[i]], 0.8, color=colors[i], edgecolor="0.3", linewidth=0.5)
            ax.bar_label(bars, fmt="%.0f", fontsize="small", padding=2)
        else:
            ax.text(top * 0.02, y, "failed", va="center", fontsize="small", style="italic", color="0.4")
    ax.set_yticks(ys, [names[i] for i in order], fontsize="small")
    ax.set_ylim(max(ys, default=0) + 0.7, -0.7)  # the first run on top; failed rows have no bar to make room
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel("training samples / second")
    ax.grid(alpha=0.3, axis="x")
    ax.set_axisbelow(True)
    if outcomes:
        first = outcomes[0].spec
        ax.set_title(f"{first.model} on {first.dataset}: throughput")
    return fig


def plot_throughput(outcomes: Sequence[Outcome], path: Path) -> Path:
    """Samples per second, one bar per run named by its label, grouped by engine; a failed run says so."""
    from multidev.outputs.plot import save_figure

    return save_figure(throughput_figure(outcomes), path)


def write_report(outcomes: Sequence[Outcome], out: Path) -> dict[str, Path]:
    """results.json, results.md, accuracy.png, throughput.png and divergence.png in ``out``."""
    from multidev.outputs.plot import plot_accuracy

    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "results.json", "table": out / "results.md",
             "accuracy": out / "accuracy.png", "throughput": out / "throughput.png",
             "divergence": out / "divergence.png"}
    write_text_atomic(files["json"], json.dumps([o.to_dict() for o in outcomes], indent=2) + "\n")
    write_text_atomic(files["table"], markdown(outcomes))
    labels = run_labels([o.spec for o in outcomes])
    done = [(o.result, name) for o, name in zip(outcomes, labels) if o.result is not None]
    if done:
        first = done[0][0]
        plot_accuracy([r for r, _ in done], files["accuracy"], title=f"{first.model} on {first.dataset}: accuracy",
                      labels=[name for _, name in done])
        plot_throughput(outcomes, files["throughput"])
    else:
        del files["accuracy"], files["throughput"]
    if any(o.divergence and o.divergence.steps for o in outcomes):
        plot_divergence(outcomes, files["divergence"], labels=labels)
    else:
        del files["divergence"]
    return files
