"""The core's optimizers (multidev.rules.optimizers) as Gluon Trainer optimizers, their state in canonical names.

MXNet 1.9.1's built-ins, read against the contract (mxnet/optimizer/optimizer.py
and src/operator/optimizer_op-inl.h, contrib/adamw-inl.h):

- ``SGD`` without momentum (``sgd_update``: w = (1 - lr wd) w - lr grad) is
  the contract's plain SGD with coupled decay: :class:`ContractSGD` calls it
  for float32 weights.
- ``SGD`` with momentum keeps the rate inside its buffer (``sgd_mom_update``:
  mom = m mom - lr (grad + wd w); w += mom), and so does ``NAG``
  (``NAGMomKernel``: mom = m mom - lr (grad + wd w), whose decay reads the
  weight it has just overwritten, as Gluon passes ``out=weight``). Both leave
  the contract once the rate changes between updates, as a schedule changes
  it every update. :class:`ContractSGD` keeps b = m b + g, not lr-scaled.
- ``Adam`` adds the decay to the gradient (L2, not AdamW's decoupled decay)
  and puts epsilon outside the bias correction (lr *= sqrt(1 - beta2**t) /
  (1 - beta1**t); epsilon unscaled, so it acts as eps / sqrt(c2)). 1.9.1 has
  no AdamW optimizer, only contrib's ``adamw_update`` kernel (w -= eta (lr m
  / (sqrt(v) + eps) + wd w)); :class:`ContractAdamW` drives it with the bias
  correction folded in exactly: m_hat / (sqrt(v_hat) + eps) = sqrt(c2) / c1 *
  m / (sqrt(v) + eps sqrt(c2)).

Where the Trainer updates on the kvstore, the kvstore's updater holds the
state; otherwise every context's updater holds its own copy. Either way
MXNet counts updates per index (and context), which AdamW's bias correction
reads, so a resumed count is restored there too.
"""

from __future__ import annotations

import math
import os

import numpy as np

from multidev.engine import STEP, Optimizer, State, slot_name

from .runtime import mxnet
from .transfers import to_host, write

mx = mxnet()

nd = mx.nd

#: weights per fused update call: Gluon's SGD default (MXNET_OPTIMIZER_AGGREGATION_SIZE)
AGGREGATE = int(os.environ.get("MXNET_OPTIMIZER_AGGREGATION_SIZE", "4"))


def _scratch(weight):
    """Where the momentum kernel writes weights that are not to move (its w + mom): an array of ``weight``'s kind."""
    return nd.empty(weight.shape, weight.context, dtype=weight.dtype)


def _exact_sgd(weight, grad, buf, lr: float, wd: float, m: float, nesterov: bool, scale: float) -> None:
    """The contract's SGD in the weights' own precision: every rate a Python float, as torch applies it."""
    g = grad * scale if scale != 1 else grad.copy()
    if wd:
        g += wd * weight
    if buf is not None:
        buf *= m
        buf += g
        g = g + m * buf if nesterov else buf
    weight -= lr * g


class ContractOptimizer(mx.optimizer.Optimizer):
    """What the engine asks of its optimizers beyond MXNet's: the state as the contract's slots, and to forget
    what an optimizer keeps beside its state when a state the contract wrote is loaded."""

    def buffers(self, index, state) -> tuple:
        """An updater's state as the contract's slots, in slot order."""
        return slots(state)

    def forget(self) -> None:
        """Drop what is kept beside the states: the states about to be loaded are the contract's own."""

    @staticmethod
    def as_lists(index, weight, grad, state) -> tuple[list, list, list, list]:
        """An update's arguments as lists: one weight, or a group of ``aggregate_num`` from Gluon's Updater."""
        if isinstance(index, (list, tuple)):
            return index, weight, grad, state
        return [index], [weight], [grad], [state]


@mx.optimizer.register
class ContractSGD(ContractOptimizer):
    """The contract's SGD with momentum: g = grad + wd w; b = m b + g; w -= lr (g + m b if nesterov else b).

    float32 weights with momentum: one pass of MXNet's fused kernel, several
    weights a call as Gluon's own SGD updates them (``aggregate_num``). The
    kernel's buffer holds the rate (mom = m mom - lr (grad + wd w); w += mom),
    so each buffer here holds c b, its scale c kept beside it (1 when fresh
    or loaded), and an update passes the momentum m (-lr) / c: then mom =
    -lr (m b + grad + wd w), the contract's new buffer at this update's rate,
    whatever the rate was before. A rate of 0 moves no weight: the buffer
    takes its step at its own scale, the kernel's weights going to a scratch
    array. Two kernels a weight (b, then w) took twice the time, and ndarray
    arithmetic 2.3x that. The kernels' hyperparameters are 32-bit floats,
    3e-8 off the rate's value: inside float32's reach, but in float64
    training amplifies the offset (to 5e-2 over an epoch of ResNet-18 on
    digits). So float64 weights take the formula in ndarray arithmetic, whose
    scalars are float64, in torch's order of operations; Nesterov's takes
    the kernels with an unscaled buffer.
    """

    def __init__(self, momentum: float = 0.0, nesterov: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.momentum, self.nesterov = momentum, nesterov
        self.aggregate_num = AGGREGATE
        self.scales: dict = {}  # (index, context) -> c where that buffer holds c b; absent: 1

    def create_state(self, index, weight):
        if not self.momentum:
            return None
        return nd.zeros(weight.shape, weight.context, dtype=weight.dtype)

    def buffers(self, index, state) -> tuple:
        """The state's slots as the contract keeps them (b, not the kernel's c b)."""
        held = slots(state)
        scale = self.scales.get((index, held[0].context), 1.0) if held else 1.0
        return held if scale == 1.0 else (held[0] / scale,)

    def forget(self) -> None:
        self.scales.clear()

    def update(self, index, weight, grad, state):
        indices, weights, grads, states = self.as_lists(index, weight, grad, state)  # one dtype
        self._update_count(indices)
        lrs, wds, scale = self._get_lrs(indices), self._get_wds(indices), self.rescale_grad
        if weights[0].dtype == np.float32 and self.momentum and not self.nesterov:
            self._fused(indices, weights, grads, states, lrs, wds)
            return
        for w, g, b, lr, wd in zip(weights, grads, states, lrs, wds):
            if w.dtype != np.float32:
                _exact_sgd(w, g, b, lr, wd, self.momentum, self.nesterov, scale)
            elif not self.momentum:
                nd.sgd_update(w, g, lr=lr, wd=wd, rescale_grad=scale, out=w)
            else:  # Nesterov: b = m b + grad + wd w (the kernel at lr -1); w -= lr (grad + wd w), then lr m b
                nd.sgd_mom_update(w, g, b, lr=-1.0, wd=wd, momentum=self.momentum, rescale_grad=scale, out=_scratch(w))
                nd.sgd_update(w, g, lr=lr, wd=wd, rescale_grad=scale, out=w)
                nd.sgd_update(w, b, lr=lr * self.momentum, out=w)

    def _fused(self, indices, weights, grads, states, lrs, wds) -> None:
        """One kernel call per momentum that the weights' scales and rates give (one, unless a weight's rate or
        scale differs from the rest)."""
        m, keys = self.momentum, [(i, w.context) for i, w in zip(indices, weights)]
        groups: dict[float, list[int]] = {}
        for j, (key, lr) in enumerate(zip(keys, lrs)):
            scale = self.scales.get(key, 1.0)
            if not lr:  # the buffer's step at its own scale; the weight stays
                nd.sgd_mom_update(weights[j], grads[j], states[j], lr=-scale, wd=wds[j], momentum=m,
                                  rescale_grad=self.rescale_grad, out=_scratch(weights[j]))
                continue
            groups.setdefault(m * -lr / scale, []).append(j)
        for momentum, js in groups.items():
            nd.multi_sgd_mom_update(*[a for j in js for a in (weights[j], grads[j], states[j])],
                                    out=[weights[j] for j in js], num_weights=len(js), lrs=[lrs[j] for j in js],
                                    wds=[wds[j] for j in js], momentum=momentum, rescale_grad=self.rescale_grad)
            self.scales.update((keys[j], -lrs[j]) for j in js)


@mx.optimizer.register
class ContractAdamW(ContractOptimizer):
    """The contract's AdamW: decoupled decay, epsilon added to sqrt(v_hat) after the bias correction.

    float32 weights: contrib's fused kernel with the bias correction folded in
    (lr' = sqrt(c2) / c1, eps' = eps sqrt(c2)), several weights a call
    (``multi_adamw_update``, ``aggregate_num`` as Gluon's SGD). Its one pass
    over the values took ResNet-18's update (11.2 M floats, an Intel Xeon) from
    190 ms with the one-weight ``adamw_update`` (an expression per line) to
    70-79 ms, grouped by 1, 4 or 16; its values do not depend on the grouping
    nor on a weight cut into rows, so the sharded levels keep the replicated
    run's bits. Its hyperparameters are float32 (beta's 1.3e-5 off for
    0.999), inside float32's reach but not float64's, so float64 weights
    take the formula in ndarray arithmetic, exact.
    """

    def __init__(self, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, **kwargs) -> None:
        super().__init__(**kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.aggregate_num = AGGREGATE
        self._scales: dict = {}  # (context, rescale_grad) -> rescale_grad as the kernel takes it

    def create_state(self, index, weight):
        return (nd.zeros(weight.shape, weight.context, dtype=weight.dtype),
                nd.zeros(weight.shape, weight.context, dtype=weight.dtype))

    def update(self, index, weight, grad, state):
        indices, weights, grads, states = self.as_lists(index, weight, grad, state)  # one dtype
        self._update_count(indices)
        lrs, wds = self._get_lrs(indices), self._get_wds(indices)
        counts = [self._index_update_count[i] for i in indices]  # resume from optimizer.step (see write_state)
        if weights[0].dtype != np.float32:
            for w, g, (mean, var), lr, wd, t in zip(weights, grads, states, lrs, wds, counts):
                self._exact(w, g, mean, var, lr, wd, t)
            return
        for t in sorted(set(counts)):  # one call per count: the bias correction's terms are the call's
            js = [j for j, c in enumerate(counts) if c == t]
            c1, c2 = 1 - self.beta1 ** t, 1 - self.beta2 ** t
            chosen = [weights[j] for j in js]
            nd.contrib.multi_adamw_update(chosen, [grads[j] for j in js], [states[j][0] for j in js],
                                          [states[j][1] for j in js], self._scale(chosen[0].context),
                                          [math.sqrt(c2) / c1] * len(js), [wds[j] for j in js],
                                          [lrs[j] for j in js], out=chosen, beta1=self.beta1, beta2=self.beta2,
                                          epsilon=self.epsilon * math.sqrt(c2))

    def _scale(self, context):
        """``rescale_grad`` as the kernel takes it, an array on ``context`` (made once)."""
        key = (context, self.rescale_grad)
        if key not in self._scales:
            self._scales[key] = nd.array([self.rescale_grad], ctx=context, dtype="float32")
        return self._scales[key]

    def _exact(self, weight, grad, mean, var, lr: float, wd: float, t: int) -> None:
        """The contract's formula in ndarray arithmetic, its scalars float64."""
        b1, b2 = self.beta1, self.beta2
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        g = grad * self.rescale_grad if self.rescale_grad != 1 else grad
        mean *= b1
        mean += (1 - b1) * g
        var *= b2
        var += (1 - b2) * g * g
        weight -= lr * (mean / c1 / (nd.sqrt(var / c2) + self.epsilon) + wd * weight)

    def __getstate__(self):  # pickled with a kvstore's optimizer: the cached arrays stay behind
        state = super().__getstate__()
        state["_scales"] = {}
        return state


def gluon_optimizer(optimizer: Optimizer) -> ContractOptimizer:
    """The Trainer's optimizer for the contract's; its rate is set before every update."""
    if optimizer.name == "adamw":
        beta1, beta2 = optimizer.betas
        return ContractAdamW(beta1, beta2, optimizer.eps, wd=optimizer.weight_decay, learning_rate=0.0)
    return ContractSGD(optimizer.momentum, optimizer.nesterov, wd=optimizer.weight_decay, learning_rate=0.0)


def slots(state) -> tuple:
    """One updater state as a tuple in slot order (empty: none created yet, or none kept)."""
    if state is None:
        return ()
    return tuple(state) if isinstance(state, (tuple, list)) else (state,)


def holders(trainer: mx.gluon.Trainer) -> list:
    """The updaters that hold the optimizer's state: the kvstore's when it updates, else one per context."""
    if not trainer._kv_initialized:
        trainer._init_kvstore()  # what the first step would do; the kvstore's keys still start at that step
    if trainer._kvstore is not None and trainer._update_on_kvstore:
        return [trainer._kvstore._updater]
    return trainer._updaters


def read_state(trainer: mx.gluon.Trainer, optimizer: Optimizer, names: list[str], dtype: np.dtype) -> State:
    """The optimizer's state in canonical names: the update count, then each slot of each parameter."""
    state: State = {STEP: np.array(trainer.optimizer.num_update, np.int64)}  # every index, every context alike
    held = holders(trainer)[0].states
    for index, (name, param) in enumerate(zip(names, trainer._params)):
        arrays = trainer.optimizer.buffers(index, held.get(index))
        for j, slot in enumerate(optimizer.slots):
            value = to_host(arrays[j]) if arrays else np.zeros(param.shape)
            state[slot_name(slot, name)] = value.astype(dtype, copy=False)
    return state


def resume_count(opt: ContractOptimizer, step: int) -> None:
    """MXNet's update counts (per index and context) start afresh from ``step``: the next update is step + 1;
    the states about to be loaded are the contract's own (unscaled)."""
    opt.forget()
    opt.begin_num_update = opt.num_update = step
    opt._all_index_update_counts = {0: {}}
    opt._index_update_count = opt._all_index_update_counts[0]


def write_state(trainer: mx.gluon.Trainer, optimizer: Optimizer, names: list[str], state: State) -> None:
    """Every updater gets ``state``, and MXNet's update counts resume from its ``optimizer.step``.

    The counts start afresh from ``begin_num_update``, so each context's (and
    the kvstore's) next update is number step + 1, as AdamW's bias correction needs.
    """
    opt, step = trainer.optimizer, int(state[STEP])
    resume_count(opt, step)
    for updater in holders(trainer):
        for index, (name, param) in enumerate(zip(names, trainer._params)):
            created = opt.create_state_multi_precision(index, param.data(trainer._contexts[0]))
            for array, slot in zip(slots(created), optimizer.slots):
                write(array, state[slot_name(slot, name)])
            # moved to the updater's weights (a context, or the kvstore's) on its first update
            updater.states[index], updater.states_synced[index] = created, False
