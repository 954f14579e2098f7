"""Give JAX its CPU devices before any test touches it (JAX fixes the count when it starts), and what the tests of
the measured forms share."""

from typing import Any, Callable

import pytest

from multidev_jax.devices import configure_cpu_devices

configure_cpu_devices()


@pytest.fixture
def afresh(monkeypatch, tmp_path) -> Callable[[Any], Any]:
    """``afresh(module)``: a measured form's module measuring anew, its choices kept in a folder of this test's own,
    no step compiled yet (every JAX engine module of a measured form has ``ENV``, ``FORMS``, ``_kept``)."""
    from multidev_jax import choices, compiled

    def fresh(module: Any) -> Any:
        monkeypatch.delenv(module.ENV, raising=False)
        monkeypatch.setattr(choices.compile_cache, "folder", lambda: tmp_path)
        monkeypatch.setattr(module, "_kept", choices.Kept(module._kept.filename, module.FORMS))
        monkeypatch.setattr(compiled, "_CACHE", {})
        return module
    return fresh


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
