"""Give JAX its CPU devices before any test touches it (JAX fixes the count when it starts), and what the tests of
the measured forms share."""

from typing import Any, Callable, Iterator

import pytest

from multidev_jax.devices import configure_cpu_devices

configure_cpu_devices()


@pytest.fixture
def afresh(monkeypatch, tmp_path) -> Iterator[Callable[[Any], Any]]:
    """``afresh(choice)``: a form (``multidev_jax.forms.Choice``) unpinned and measuring anew (not shipped), its
    measurements kept in a folder of this test's own (given back after the test), no step compiled yet."""
    from multidev_jax import compiled

    given_up = []

    def fresh(choice: Any) -> Any:
        monkeypatch.delenv(choice.env, raising=False)
        monkeypatch.setenv("MULTIDEV_JAX_FORMS", "measure")  # not the forms shipped for this CPU kind
        given_up.append((choice, choice.keeping(lambda: tmp_path)))
        monkeypatch.setattr(compiled, "_CACHE", {})
        return choice
    yield fresh
    for choice, kept in reversed(given_up):
        choice.restore(kept)


class Store:
    """A job's key-value store as JAX's distributed client offers it: rank 0 publishes, the others wait for it."""

    def __init__(self, **published: str) -> None:
        self.values = dict(published)

    def key_value_set(self, key: str, value: str) -> None:
        self.values[key] = value

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        return self.values[key]


@pytest.fixture
def job(monkeypatch) -> Store:
    """This process as a rank of a two-process job, with a store of its own."""
    import jax
    from jax._src.distributed import global_state

    store = Store()
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(global_state, "client", store)
    return store


@pytest.fixture(scope="session")
def train_readme() -> Callable[..., tuple]:
    """``train_readme(devices, batchnorm, rows, steps, dtype)``: the README's model after a few steps of uneven
    shards, with its Dropout masks, then asked for the logits of another batch:
    (replicas, logits and state, the placed batch, its images, the shard sizes)."""
    import multidev
    from multidev.engine import ModelSpec
    from multidev.testing import batch
    from multidev.testing.layers import masked, readme_definition

    spec = ModelSpec("readme", (1, 8, 8), 4, readme_definition().graph())

    def train(devices: int, batchnorm: str = "local", rows: int = 11, steps: int = 2, dtype: str = "float64"):
        setup = multidev.Setup(spec, multidev.resolve_devices(devices=devices, max_cpu=8), batchnorm, dtype)
        reps = multidev.replicate(multidev.load_backend("jax"), setup, spec.init(3))
        sizes = multidev.shard_sizes(rows, devices)
        for step in range(steps):
            x, y = batch(spec, rows, seed=step)
            shards, _ = masked(spec, x, y, sizes, dtype, step=step + 1)
            reps.train_step(reps.place(shards), 0.1)
        x, _ = batch(spec, rows, seed=9)
        placed = reps.place(multidev.cut(x, None, sizes))
        return reps, {"logits": reps.predict(placed), **reps.state(), **reps.optimizer_state()}, placed, x, sizes
    return train
