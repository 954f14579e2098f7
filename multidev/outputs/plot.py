"""PNG plots of training curves (matplotlib, no display needed).

Every plot tells a dozen runs apart: each run has a name of its own (a
comparison's ``Settings.label``), a colour family per engine with a shade
and a marker per run within it, and the legend sits outside the axes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from multidev.outputs.files import atomic_write
from multidev.outputs.result import Result

#: one colour family per engine (matplotlib colormaps), in the order the engines first appear
FAMILIES = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys", "YlOrBr", "PuRd")
#: one marker per run of an engine, in order
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
#: the divergence plot's markers past float32's "o" and float64's "x" (bf16 runs)
OTHER_MARKERS = ("s", "^", "D", "v", "P")
#: the legend's font size in points ("small" at matplotlib's default 10)
LEGEND_POINTS = 8.33


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write as a PNG whole or not at all (like every other output), and free the figure."""
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        with atomic_write(path, what="plot") as f:
            fig.savefig(f, format="png")
    finally:
        plt.close(fig)
    return Path(path)


def label(result: Result) -> str:
    """A run's name from its result alone, where no settings came with it (``train --plot``): engine, devices,
    GPU and precision. A result records no dtype: name runs by ``Settings.label`` where one is at hand."""
    precision = result.recipe.get("precision", "fp32")
    gpu = " GPU" if any(not d.startswith("cpu") for d in result.devices) else ""
    return f"{result.backend} x{len(result.devices)}{gpu}" + ("" if precision == "fp32" else f" {precision}")


def distinct(labels: Sequence[str]) -> list[str]:
    """``labels`` with a repeated one numbered from its second use on: "torch x1", "torch x1 (2)"."""
    seen: Counter = Counter()
    out = []
    for text in labels:
        seen[text] += 1
        out.append(text if seen[text] == 1 else f"{text} ({seen[text]})")
    return out


def run_styles(engines: Sequence[str]) -> list[tuple[Any, str]]:
    """(colour, marker) for each run of ``engines`` (one engine name per run): the engine's colour family,
    dark to light over its runs, and a marker of its own for each of them."""
    import matplotlib.pyplot as plt

    order = list(dict.fromkeys(engines))
    sizes = Counter(engines)
    seen: Counter = Counter()
    styles = []
    for engine in engines:
        i, n = seen[engine], sizes[engine]
        seen[engine] += 1
        shade = 0.8 if n == 1 else 0.95 - 0.5 * i / (n - 1)
        styles.append((plt.get_cmap(FAMILIES[order.index(engine) % len(FAMILIES)])(shade),
                       MARKERS[i % len(MARKERS)]))
    return styles


def legend_outside(ax, handles=None, title: str | None = None):
    """The legend to the right of the axes, in two columns past 18 entries: it never covers a line."""
    handles = handles if handles is not None else ax.get_legend_handles_labels()[0]
    return ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                     fontsize="small", title=title, title_fontsize="small", ncol=1 if len(handles) <= 18 else 2)


def legend_width(labels: Sequence[str]) -> float:
    """Inches a legend of ``labels`` takes beside the axes (a guess from the longest label, with its handle)."""
    longest = max((len(text) for text in labels), default=0)
    columns = 1 if len(labels) <= 18 else 2
    return columns * (0.75 + 0.6 * LEGEND_POINTS / 72 * longest) + 0.2


def _scheduled(result: Result) -> bool:
    """Whether a run's rate changed at all: a constant rate needs no panel of its own."""
    rates = [r for e in result.epochs for r in e.rates]
    return bool(rates) and max(rates) != min(rates)


def accuracy_figure(results: Sequence[Result], title: str | None = None,
                    labels: Sequence[str] | None = None):
    """The figure of :func:`plot_accuracy` (for tests, and for callers that lay it out themselves)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    if labels is not None and len(labels) != len(results):
        raise ValueError(f"{len(labels)} labels for {len(results)} runs")
    names = distinct(labels if labels is not None else [label(r) for r in results])
    styles = run_styles([r.backend for r in results])
    scheduled = any(_scheduled(r) for r in results)
    legend_title = "solid: test, dashed: train"
    width = 6.4 + legend_width([*names, legend_title])
    height = max(6.4 if scheduled else 4.2, 0.2 * len(names) / (1 if len(names) <= 18 else 2) + 1.2)
    fig, axes = plt.subplots(2 if scheduled else 1, 1, figsize=(width, height), dpi=120, sharex=True,
                             squeeze=False, gridspec_kw={"height_ratios": [3, 1.4][:1 + scheduled]})
    ax = axes[0][0]
    handles = []
    for r, name, (color, marker) in zip(results, names, styles):
        epochs = [e.epoch for e in r.epochs]
        ax.plot(epochs, [e.test_acc for e in r.epochs], marker=marker, markersize=4, color=color)
        ax.plot(epochs, [e.train_acc for e in r.epochs], linestyle="--", alpha=0.5, color=color)
        handles.append(Line2D([], [], color=color, marker=marker, markersize=4, label=name))
        if scheduled:  # update j of epoch e ends at e - 1 + j / n
            xs = [e.epoch - 1 + (j + 1) / len(e.rates) for e in r.epochs for j in range(len(e.rates))]
            axes[1][0].plot(xs, [rate for e in r.epochs for rate in e.rates], color=color)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1][0].set_xlabel("epoch")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if scheduled:
        axes[1][0].set_ylabel("learning rate")
        axes[1][0].grid(alpha=0.3)
    if results:
        first = results[0]
        ax.set_title(title or f"{first.model} on {first.dataset}, batch {first.batch_size}, lr {first.lr}")
    legend_outside(ax, handles, legend_title)
    return fig


def plot_accuracy(results: Sequence[Result], path: str | Path, title: str | None = None,
                  labels: Sequence[str] | None = None) -> Path:
    """Test accuracy per epoch, one line per run, train accuracy dashed; below it the learning rate of every
    update, where it changed. ``labels`` name the runs (a comparison's ``Settings.label``); without them each
    is named from its result (:func:`label`)."""
    return save_figure(accuracy_figure(results, title, labels), path)


def divergence_figure(outcomes, labels: Sequence[str] | None = None):
    """The figure of :func:`plot_divergence`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(labels) if labels is not None else [o.spec.label for o in outcomes]
    if len(names) != len(outcomes):
        raise ValueError(f"{len(names)} labels for {len(outcomes)} runs")
    runs = [(o, name) for o, name in zip(outcomes, names) if o.divergence is not None and o.divergence.steps]
    engines = list(dict.fromkeys(o.spec.engine_name for o, _ in runs))
    wheres = sorted({(o.spec.processes, o.spec.device_count) for o, _ in runs})  # "x2", "2p x1"
    markers = {("float32", "fp32"): "o", ("float64", "fp32"): "x"}
    for o, _ in runs:  # any other dtype and precision: a marker of its own
        markers.setdefault((o.spec.dtype, o.spec.precision), OTHER_MARKERS[(len(markers) - 2) % len(OTHER_MARKERS)])
    colors = plt.get_cmap("tab10").colors
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(6.4 + legend_width([name for _, name in runs]),
                                    max(4.2, 0.2 * len(runs) + 1.2)), dpi=120)
    births: dict[int, list[tuple[float, str, Any]]] = {}  # per step: (height, array, colour) of each star
    for o, name in runs:
        d, color = o.divergence, colors[engines.index(o.spec.engine_name) % len(colors)]
        ax.plot(d.steps, [max(v, 1e-17) for v in d.max], marker=markers[o.spec.dtype, o.spec.precision],
                markersize=3, color=color,
                linestyle=styles[wheres.index((o.spec.processes, o.spec.device_count)) % len(styles)], label=name)
        if d.born is not None:  # where the run left its reach: a star, and the array it left it in
            height = max(d.at(d.born.step), 1e-17)  # on the run's line: its largest distance there
            ax.plot([d.born.step], [height], marker="*", markersize=11, color=color, markeredgecolor="black",
                    markeredgewidth=0.5, linestyle="none")
            births.setdefault(d.born.step, []).append((height, d.born.array, color))
    for step, stars in births.items():  # the arrays' names stacked below the step's highest star, in its order
        top = max(height for height, _, _ in stars)
        for k, (_, array, color) in enumerate(sorted(stars, key=lambda star: -star[0])):
            ax.annotate(array, (step, top), xytext=(7, -9 * (k + 1)), textcoords="offset points",
                        fontsize="x-small", color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("largest parameter difference\n(relative to each array's largest value)\n"
                  "\u2605 where a difference was born", fontsize="small")
    truths = list(dict.fromkeys(o.divergence.truth for o, _ in runs))
    ax.set_title(f"distance from the float64 run{'s' if len(truths) > 1 else ''} ({', '.join(truths)})",
                 fontsize="medium" if len(truths) > 2 else None)
    ax.grid(alpha=0.3, which="both")
    legend_outside(ax)
    return fig


def plot_divergence(outcomes, path: str | Path, labels: Sequence[str] | None = None) -> Path:
    """Each run's distance from the float64 run of its device count over training steps, log-log: rounding
    lines lie together; a star marks the step and array where a run left its reach. Colour: engine; line
    style: devices and processes; marker: dtype and precision. ``labels``
    name the outcomes (default: their ``Settings.label``)."""
    return save_figure(divergence_figure(outcomes, labels), path)
