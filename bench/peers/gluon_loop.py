"""The hand-written Gluon loop of the model table, as ``bench.bench_mxnet`` writes it: the book's concise
multi-device recipe, one hybridized network initialised on every context, shards sliced by hand, one loss per
shard, ``Trainer.step`` (SGD with momentum) over a ``device`` kvstore, the loss read back every step."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bench import harness
from bench.peers.measure import checked, measure, synthetic
from bench.peers.nets import Net


def time_gluon(name: str, size: int, smoke: bool, k: int, batch: int, lr: float, momentum: float, warmup: int,
               steps: int, repeats: int, expected: int, gpu: bool = False) -> dict[str, Any]:
    """Samples/s, first step and parameter count of the Gluon network ``name`` on ``k`` CPU contexts (GPUs where
    ``gpu``; a fresh process)."""
    harness.as_the_command()  # before MXNet loads: it reads its threads then
    from bench.peers import gluon_models

    mx = gluon_models.mx
    contexts = [(mx.gpu if gpu else mx.cpu)(i) for i in range(k)]
    mx.random.seed(0)
    net = gluon_models.build(Net.of(name, size, smoke))
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize(static_alloc=True)
    x, y = synthetic(batch, size)
    step = sharded_step(mx, net, contexts, x, y.astype(np.float32), lr, momentum)
    timed = measure(step, lambda: None, batch=batch, warmup=warmup, steps=steps, repeats=repeats)
    count = sum(p.data(contexts[0]).size for p in net.collect_params().values() if p.grad_req != "null")
    return {**timed, "params": checked(count, expected, "the Gluon network"), "version": mx.__version__}


def sharded_step(mx: Any, net: Any, contexts: list, x: np.ndarray, y: np.ndarray, lr: float,
                 momentum: float) -> Callable[[], float]:
    """One step: each context's shard copied to it, forward under ``autograd.record``, backward, the trainer's
    update of the batch's mean loss; the loss summed on the host."""
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": lr, "momentum": momentum},
                               kvstore="device")
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    bounds = np.linspace(0, len(x), len(contexts) + 1).astype(int)

    def step() -> float:
        xs = [mx.nd.array(x[a:b], ctx=c) for a, b, c in zip(bounds, bounds[1:], contexts)]
        ys = [mx.nd.array(y[a:b], ctx=c) for a, b, c in zip(bounds, bounds[1:], contexts)]
        with mx.autograd.record():
            losses = [loss_fn(net(xi), yi) for xi, yi in zip(xs, ys)]
        for loss in losses:
            loss.backward()
        trainer.step(len(x))
        return sum(float(loss.sum().asscalar()) for loss in losses)

    return step
