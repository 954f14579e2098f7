"""The forms shipped per CPU kind: a run takes them and times nothing, unless it is asked to measure."""

import pytest

pytest.importorskip("jax")

from multidev.errors import MultidevError  # noqa: E402

CHOICES = ("sums", "threads", "parts", "conv_inputs")


def never() -> float:
    raise AssertionError("a run that takes the shipped forms times none")


@pytest.fixture
def unpinned(monkeypatch, afresh):
    """Every form as ``afresh`` leaves it (unpinned, nothing kept, no step compiled), the forms mode unset."""
    from multidev_jax.forms import CHOICES as ALL

    for choice in ALL.values():
        afresh(choice)
    monkeypatch.delenv("MULTIDEV_JAX_FORMS")  # afresh measures; these runs take the shipped forms
    return ALL


def as_kind(monkeypatch, kind: str) -> None:
    from multidev_jax.forms import shipped

    monkeypatch.setattr(shipped, "this_cpu_kind", lambda: kind)


def test_every_kind_met_ships_a_form_of_every_choice():
    from multidev_jax.forms import CHOICES as ALL
    from multidev_jax.forms.shipped import SHIPPED

    files = {choice.name: choice for choice in ALL.values()}
    assert set(files) == set(CHOICES)
    for kind, table in SHIPPED.items():
        assert set(table) == set(CHOICES), kind
        assert all(form in files[name].forms for name, form in table.items()), (kind, table)


@pytest.mark.parametrize("kind, taken", [("amd-epyc-zen4", "amd-epyc-zen4"), ("amd-ryzen-zen5", "amd-epyc-zen4"),
                                         ("intel-avx2", "intel-xeon-amx"), ("aarch64", "aarch64")])
def test_a_kind_never_met_takes_its_vendors_nearest_table(kind, taken):
    from multidev_jax.forms.shipped import SHIPPED, kind_table

    assert kind_table(kind) == (taken, SHIPPED.get(taken, {}))


def test_a_kind_may_ship_another_form_for_a_networks_traits(monkeypatch, unpinned):
    """The Zen 4 splits a device for a transformer or a depthwise network, and keeps it whole for a ResNet."""
    from multidev_jax.forms import PARTS, network_traits

    import multidev

    traits = {name: network_traits(multidev.ModelSpec(name, (3, 32, 32), 10))
              for name in ("resnet18", "mobilenet_v2", "vit")}
    assert traits == {"resnet18": frozenset(), "mobilenet_v2": {"depthwise"}, "vit": {"attention"}}
    as_kind(monkeypatch, "amd-epyc-zen4")
    timers = {form: never for form in PARTS.forms}
    assert [PARTS.fastest(name, timers, traits[name]) for name in traits] == ["whole", "split", "split"]
    assert PARTS.note().startswith("whole (split for networks with attention or depthwise convolutions), shipped "
                                   "for amd-epyc-zen4")
    as_kind(monkeypatch, "amd-epyc-zen3")  # none measured there: its one form for every network
    assert PARTS.fastest("vit", timers, traits["vit"]) == "whole"
    assert PARTS.note().startswith("whole, shipped for amd-epyc-zen3")


def test_an_unknown_vendor_takes_each_choices_unmeasured_form(monkeypatch, unpinned):
    as_kind(monkeypatch, "aarch64")
    for choice in unpinned.values():
        assert choice.fastest("key", {form: never for form in choice.forms}) == choice.unmeasured


def test_a_kept_choice_stands_before_the_shipped_one(monkeypatch, unpinned):
    from multidev_jax.forms import SUMS

    as_kind(monkeypatch, "amd-epyc-zen4")
    assert SUMS.fastest("a", {form: never for form in SUMS.forms}) == "staged"
    SUMS.kept.put("a", "reduce")
    assert SUMS.fastest("a", {form: never for form in SUMS.forms}) == "reduce"
    assert SUMS.kept.measured == []


def test_measure_times_the_forms_and_a_misspelt_mode_is_refused(monkeypatch, unpinned):
    from multidev_jax.forms import THREADS

    monkeypatch.setenv("MULTIDEV_JAX_FORMS", "measure")
    assert THREADS.fastest("k", {"cores": lambda: 2.0, "one": lambda: 1.0}) == "one"
    assert THREADS.kept.measured == ["k"]
    monkeypatch.setenv("MULTIDEV_JAX_FORMS", "measured")
    with pytest.raises(MultidevError, match="MULTIDEV_JAX_FORMS='measured' names no form: give one of shipped, "):
        THREADS.fastest("other", {"cores": never, "one": never})


@pytest.fixture
def started():
    """JAX's CPU backend up before a job's store is faked (it would start its collectives through it)."""
    import jax

    jax.devices()


def test_a_jobs_rank_0_publishes_its_shipped_form(monkeypatch, unpinned, started, job):
    from multidev_jax.forms import CONV_INPUTS

    as_kind(monkeypatch, "intel-xeon-amx")
    assert CONV_INPUTS.agreed("step") == "once"
    assert job.values == {"multidev/conv_inputs.json/step": "once"}


def test_a_run_takes_the_shipped_forms_and_compiles_its_step_once(monkeypatch, unpinned, train_readme):
    """On an Intel Xeon with 2 cores: one device split in two parts of one thread each, inputs once, sums as
    matrix-vector products; nothing timed, nothing kept, one train program compiled."""
    from multidev_jax import compiled
    from multidev_jax.forms import parts

    import multidev

    multidev.load_backend("jax").max_cpu_devices()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(parts, "_affinity", lambda: 2)
    as_kind(monkeypatch, "intel-xeon-amx")
    reps, *_ = train_readme(1, "local", dtype="float32")
    assert (reps.parts, reps.inputs) == (2, "once")
    assert all(choice.kept.measured == [] and not any(choice.kept.counts().values()) for choice in unpinned.values())
    assert sum(str(key[0]).startswith("train") for key in compiled._CACHE if isinstance(key, tuple)) == 1
    assert "once per operation" not in unpinned["threads"].note()
    assert unpinned["threads"].note().startswith("one per operation, shipped for intel-xeon-amx (MULTIDEV_JAX_FORMS")
