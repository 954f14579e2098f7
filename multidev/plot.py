"""PNG plots of training curves (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .files import atomic_write
from .result import Result


def save_figure(fig, path: str | Path) -> None:
    """A PNG written whole or not at all, like every other output."""
    with atomic_write(path, what="plot") as f:
        fig.savefig(f, format="png")


def label(result: Result) -> str:
    return f"{result.backend} x{len(result.devices)}"


def plot_accuracy(results: Sequence[Result], path: str | Path, title: str | None = None) -> Path:
    """Test accuracy per epoch, one line per run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    colors = plt.get_cmap("tab20").colors
    for i, r in enumerate(results):
        epochs = [e.epoch for e in r.epochs]
        color = colors[(2 * i) % len(colors)]  # one colour per run: test solid, train dashed
        ax.plot(epochs, [e.test_acc for e in r.epochs], marker="o", color=color, label=f"{label(r)} test")
        ax.plot(epochs, [e.train_acc for e in r.epochs], linestyle="--", alpha=0.5, color=color,
                label=f"{label(r)} train")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    first = results[0]
    ax.set_title(title or f"{first.model} on {first.dataset}, batch {first.batch_size}, lr {first.lr}")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return Path(path)
