"""PNG plots of training curves (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from multidev.outputs.files import atomic_write
from multidev.outputs.result import Result


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
    return f"{result.backend} x{len(result.devices)}"


def _scheduled(result: Result) -> bool:
    """Whether a run's rate changed at all: a constant rate needs no panel of its own."""
    rates = [r for e in result.epochs for r in e.rates]
    return bool(rates) and max(rates) != min(rates)


def plot_accuracy(results: Sequence[Result], path: str | Path, title: str | None = None) -> Path:
    """Test accuracy per epoch, one line per run; below it the learning rate of every update, where it changed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    scheduled = any(_scheduled(r) for r in results)
    fig, axes = plt.subplots(2 if scheduled else 1, 1, figsize=(6.4, 6.4 if scheduled else 4.2), dpi=120,
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": [3, 1.4][:1 + scheduled]})
    ax = axes[0][0]
    colors = plt.get_cmap("tab20").colors
    for i, r in enumerate(results):
        epochs = [e.epoch for e in r.epochs]
        color = colors[(2 * i) % len(colors)]  # one colour per run: test solid, train dashed
        ax.plot(epochs, [e.test_acc for e in r.epochs], marker="o", color=color, label=f"{label(r)} test")
        ax.plot(epochs, [e.train_acc for e in r.epochs], linestyle="--", alpha=0.5, color=color,
                label=f"{label(r)} train")
        if scheduled:  # update j of epoch e ends at e - 1 + j / n
            xs = [e.epoch - 1 + (j + 1) / len(e.rates) for e in r.epochs for j in range(len(e.rates))]
            axes[1][0].plot(xs, [rate for e in r.epochs for rate in e.rates], color=color, label=label(r))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1][0].set_xlabel("epoch")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if scheduled:
        axes[1][0].set_ylabel("learning rate")
        axes[1][0].grid(alpha=0.3)
    first = results[0]
    ax.set_title(title or f"{first.model} on {first.dataset}, batch {first.batch_size}, lr {first.lr}")
    ax.legend(loc="lower right", fontsize="small")
    return save_figure(fig, path)


def plot_divergence(outcomes, path: str | Path) -> Path:
    """Each float32 run's distance from the float64 run over training steps, log-log: rounding lines lie together."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [o for o in outcomes if o.divergence is not None and o.divergence.steps]
    engines = list(dict.fromkeys(o.spec.backend for o in runs))
    counts = sorted({o.spec.devices for o in runs})
    colors = plt.get_cmap("tab10").colors
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for o in runs:
        d = o.divergence
        ax.plot(d.steps, [max(v, 1e-17) for v in d.max], marker="o" if o.spec.dtype == "float32" else "x",
                markersize=3, color=colors[engines.index(o.spec.backend) % len(colors)],
                linestyle=styles[counts.index(o.spec.devices) % len(styles)], label=o.spec.label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("largest parameter difference\n(relative to each array's largest value)")
    ax.set_title(f"distance from the float64 run ({runs[0].divergence.truth})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return save_figure(fig, path)
