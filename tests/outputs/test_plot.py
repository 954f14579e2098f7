"""What the comparison's table and plots show for a dozen runs: every run named apart, legends beside the axes."""

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from multidev.comparison.divergence import Birth, Divergence
from multidev.comparison.report import markdown, run_labels, throughput_figure, write_report
from multidev.comparison.runs import Outcome
from multidev.outputs.plot import accuracy_figure, divergence_figure, label, plot_accuracy
from multidev.outputs.result import EpochRecord, Result
from multidev.settings.run import Settings

#: a comparison of three engines: float32 and float64, one and two devices, two processes, bf16 (engine names
#: are only names here: nothing is trained)
DOZEN = [Settings(backend="torch", devices=1, dtype="float64"), Settings(backend="torch", devices=2, dtype="float64"),
         Settings(backend="torch", devices=1), Settings(backend="torch", devices=2),
         Settings(backend="jax", devices=1), Settings(backend="jax", devices=2),
         Settings(backend="jax", devices=1, processes=2), Settings(backend="jax", devices=1, dtype="float64"),
         Settings(backend="mxnet", devices=1), Settings(backend="mxnet", devices=2),
         Settings(backend="mxnet", devices=2, precision="bf16"), Settings(backend="mxnet", devices=1, dtype="float64")]


def result(s: Settings, k: int = 0) -> Result:
    n = s.device_count * s.processes
    epochs = [EpochRecord(e, 1.0 / e, 0.9 - 0.3 / e, 0.88 - 0.3 / e - 0.001 * k, 1.0, 100.0 * n + k, [0.1] * 4)
              for e in (1, 2, 3)]
    return Result(s.engine_name, [f"cpu:{i}" for i in range(n)], "lenet", "synthetic", 64, 0.1, 0, "local", 128,
                  epochs=epochs, recipe=s.recipe.settings())


def dozen() -> list[Outcome]:
    outcomes = []
    for k, s in enumerate(DOZEN):
        o = Outcome(s, result(s, k))
        if k > 1:  # the first two are the float64 truths
            o.divergence = Divergence(f"torch x{s.device_count} float64", [1, 2, 4], [1e-7 * k, 2e-7 * k, 4e-7 * k],
                                      [1e-8, 2e-8, 4e-8])
            o.verdict = "rounding"
        outcomes.append(o)
    return outcomes


def legend_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def beside_axes(fig) -> bool:
    """Whether every legend lies right of its axes (covering no line)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return all(ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
               for ax in fig.axes if ax.get_legend())


def test_the_labels_of_a_dozen_runs_are_their_settings_labels_and_all_distinct():
    outcomes = dozen()
    labels = run_labels([o.spec for o in outcomes])
    assert labels == [o.spec.label for o in outcomes]
    assert len(set(labels)) == 12 and "torch x1 float64" in labels and "mxnet x2 bf16" in labels


def test_runs_alike_in_label_are_told_apart_by_what_differs():
    specs = [Settings(lr=0.1), Settings(lr=0.1), Settings(lr=0.12), Settings(devices=2, json="a.json")]
    assert run_labels(specs) == ["torch x1 lr=0.1", "torch x1 lr=0.1 (2)", "torch x1 lr=0.12", "torch x2"]


def test_accuracy_plot_names_each_run_by_its_label_beside_the_axes(tmp_path):
    outcomes = dozen()
    labels = [o.spec.label for o in outcomes]
    fig = accuracy_figure([o.result for o in outcomes], labels=labels)
    try:
        assert legend_texts(fig) == labels
        ax = fig.axes[0]
        tests = ax.get_lines()[::2]  # test accuracy, train accuracy, per run
        assert len({(str(line.get_color()), line.get_marker()) for line in tests}) == 12
        assert beside_axes(fig)
    finally:
        plt.close(fig)
    png = plot_accuracy([o.result for o in outcomes], tmp_path / "accuracy.png", labels=labels)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_accuracy_plot_without_labels_names_runs_from_their_results():
    """`train --plot`: one result, no settings; a float32 and a bf16 run still read apart, twins are numbered."""
    runs = [result(Settings()), result(Settings(precision="bf16")), result(Settings())]
    assert label(runs[0]) == "torch x1" and label(runs[1]) == "torch x1 bf16"
    fig = accuracy_figure(runs)
    try:
        assert legend_texts(fig) == ["torch x1", "torch x1 bf16", "torch x1 (2)"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="2 labels for 3 runs"):
        accuracy_figure(runs, labels=["a", "b"])


def test_throughput_plot_has_one_bar_per_run_and_a_row_for_a_failure():
    outcomes = dozen() + [Outcome(Settings(backend="nosuchengine"), error="unknown backend 'nosuchengine'")]
    fig = throughput_figure(outcomes)
    try:
        ax = fig.axes[0]
        rows = [t.get_text() for t in ax.get_yticklabels()]
        assert sorted(rows) == sorted(o.spec.label for o in outcomes) and len(set(rows)) == 13
        assert len(ax.patches) == 12  # one bar per finished run: float64 bars no longer hide float32 ones
        assert "failed" in [t.get_text() for t in ax.texts]
        assert rows[:4] == ["torch x1 float64", "torch x2 float64", "torch x1", "torch x2"]  # grouped by engine
    finally:
        plt.close(fig)


def test_divergence_plot_tells_every_measured_run_apart_beside_the_axes():
    outcomes = dozen()
    fig = divergence_figure(outcomes)
    try:
        assert legend_texts(fig) == [o.spec.label for o in outcomes[2:]]
        looks = {(str(line.get_color()), line.get_linestyle(), line.get_marker()) for line in fig.axes[0].get_lines()}
        assert len(looks) == 10
        assert beside_axes(fig)
    finally:
        plt.close(fig)


def test_divergence_plot_stars_where_a_difference_was_born():
    """A run born at step 2 gets a star there, in its colour, and the array's name beside it; the others none."""
    outcomes = dozen()
    born = outcomes[3].divergence
    born.born = Birth(2, "layer4.1.bn2.weight", born.at(2), 1e-6)
    fig = divergence_figure(outcomes)
    try:
        lines = fig.axes[0].get_lines()
        stars = [line for line in lines if line.get_marker() == "*"]
        assert len(stars) == 1 and list(stars[0].get_xdata()) == [2] and list(stars[0].get_ydata()) == [born.at(2)]
        run = next(line for line in lines if line.get_label() == outcomes[3].spec.label)
        assert stars[0].get_color() == run.get_color()
        assert [t.get_text() for t in fig.axes[0].texts] == ["layer4.1.bn2.weight"]
        assert legend_texts(fig) == [o.spec.label for o in outcomes[2:]]  # the star adds no legend entry
    finally:
        plt.close(fig)


def test_no_two_rows_of_the_table_read_alike():
    outcomes = dozen() + [Outcome(Settings(backend="nosuchengine"), error="unknown backend 'nosuchengine'")]
    table = markdown(outcomes).splitlines()
    header, rows = table[0], table[2:]
    assert header.startswith("| run | engine | devices | dtype |") and len(rows) == 13
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == [o.spec.label for o in outcomes]
    assert len(set(rows)) == 13
    assert all(row.count("|") == header.count("|") for row in rows)
    assert rows[10].startswith("| mxnet x2 bf16 | mxnet | 2 | float32 |")


def test_the_recipe_line_leaves_precision_to_the_run_labels():
    plain, bf16 = Outcome(Settings()), Outcome(Settings(precision="bf16"))
    assert not markdown([plain, bf16]).startswith("Recipe")
    adamw = Outcome(Settings(optimizer="adamw"))
    assert markdown([plain, adamw]).startswith("Recipes: plain sgd (torch x1 optimizer=sgd); adamw (torch x1 "
                                               "optimizer=adamw)\n")


def test_report_writes_the_table_and_three_plots(tmp_path):
    files = write_report(dozen(), tmp_path)
    assert sorted(files) == ["accuracy", "divergence", "json", "table", "throughput"]
    for name in ("accuracy", "throughput", "divergence"):
        assert files[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
