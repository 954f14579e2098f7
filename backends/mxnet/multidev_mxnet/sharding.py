"""Sharded data parallelism (ZeRO stages 1-3) on Gluon's contexts, done by hand: MXNet 1.9 has none (#17768).

Each trainable parameter's rows (axis 0: MXNet's layouts are the canonical
ones) are owned by the devices as the core's rule says (``Setup.owned``).
At an update every device sums its rows of the contexts' gradients in the
order the replicated run's kvstore sums them (:func:`reduce_sum`, so the
bits are its) and runs the same Gluon optimizer, one updater of
its own per device, on those rows only: the optimizer's kernels work value by
value, so its rows come out as the replicated update's. Then:

- ``optimizer``: the updated rows are concatenated on every context, new
  whole parameters (the updater's state is each device's rows only);
- ``gradients``: and the whole gradients are dropped after the update (and
  from autograd's marks), made afresh, zero, before the next backward;
- ``parameters``: and each Gluon Parameter holds only its device's rows
  between steps, gathered into whole arrays (and marked for autograd) when a
  forward, an evaluation or a state read needs them, released after it.

Over a job's processes (device ``rank * k + i`` of the job, ``Setup.owned``)
the rows cross through the replicated run's own sum over processes
(``MXNetReplicas.sum_processes``: shared memory, or the kvstore): the
gradients are summed as the replicated run sums them (the same additions,
then each device keeps its rows of its context's total). A gather (the
updated rows, the parameters at ``parameters``, a state read) goes through
shared memory where the job is on one machine (:mod:`.rowgather`: each
process writes its rows, then reads the others'), else it is a sum over the
kvstore of each process's rows placed in zeros, exact since x + 0 is x. Every
rank gathers at the same moments (the core saves on every rank of a sharded
job).

BatchNorm's running statistics are not trainable: they stay whole, as the
replicated path keeps them.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Callable, Optional, Union

import numpy as np

from multidev.engine import STEP, RowGather, State, slot_name

from . import optimizers
from .devices import kvstore_type
from .rowgather import HostRows
from .runtime import mxnet
from .transfers import to_device, to_host, write

#: parallel's MXNetReplicas and its Batch (not imported: parallel imports this module)
Replicas = Batch = Any

mx = mxnet()

nd = mx.nd


def reduce_sum(parts: list, local: bool) -> mx.nd.NDArray:
    """The contexts' arrays summed as the replicated run's kvstore sums them, so that the bits are its.

    ``local`` (CPU contexts; CommCPU's ReduceSumCPU, measured against it for 2 to 6): the first plus groups of up
    to four, each added left to right; ``device``: CommDevice's ElementwiseSum, which is ``add_n``.
    """
    if len(parts) == 1 or not local:
        return parts[0] if len(parts) == 1 else nd.add_n(*parts)
    total = parts[0]
    for start in range(1, len(parts), 4):
        group = parts[start]
        for part in parts[start + 1:start + 4]:
            group = group + part
        total = total + group
    return total


def _bytes(arrays) -> int:
    return sum(a.size * np.dtype(a.dtype).itemsize for a in arrays if a is not None)


class Sharded:
    """The rows each of this process's devices owns of the trainable parameters, and their optimizer state."""

    def __init__(self, reps: Replicas) -> None:
        setup = reps.setup
        self.processes = setup.group.size > 1  # rows cross processes too: gathers are sums (see the module)
        self.reps, self.contexts, self.dtype = reps, reps.contexts, reps.dtype
        self.released = setup.shard == "parameters"  # Parameters hold their rows between steps
        self.drops = setup.shard in ("gradients", "parameters")  # whole gradients freed after an update
        self.params = reps._trainable
        self.names = setup.spec.trainable()
        self.ranges = [setup.owned(p.shape[0]) for p in self.params]  # per parameter, per device: [a, b)
        # each device its own optimizer (MXNet keys its update counts by the weights' context, and on CPU contexts
        # a device's rows may lie in the first context's array) and updater (the state of its rows)
        self.optimizers = [optimizers.gluon_optimizer(setup.optimizer) for _ in self.contexts]
        self.updaters = [mx.optimizer.get_updater(opt) for opt in self.optimizers]
        #: level "parameters": device i's rows of parameter j (None: it owns none), what Parameter j holds there
        self.rows: list[list[Optional[mx.nd.NDArray]]] = [[None] * len(self.params) for _ in self.contexts]
        self.local = kvstore_type(self.contexts) == "local"  # how the replicated run's kvstore sums (CPU contexts)
        #: CPU contexts of one process share the host's memory: a device updates its rows where the whole lies
        self.shared = self.local and not self.processes
        self.steps = 0
        self.gathered = not self.released  # whether the Parameters hold whole arrays
        self.marked = False  # whether autograd knows the Parameters' current arrays and gradients

    # Parameters whole where a step needs them --------------------------------
    def ready(self, train: bool) -> None:
        """Whole parameters on every context (gathered at level ``parameters``), and for training, gradients
        marked on them (made afresh, zero, where they were dropped)."""
        if not self.gathered:
            if self.processes:
                self._spread(self._assembled(lambda i, j: self.rows[i][j]))
            else:
                self._spread([self._whole(j, self.contexts[0]) for j in range(len(self.params))])
            self.gathered, self.marked = True, False
        if not train or self.marked:
            return
        for param in self.params:
            if param._grad is None:
                param._grad = [nd.zeros(param.shape, ctx, dtype=self.dtype) for ctx in self.contexts]
            mx.autograd.mark_variables(param._data, param._grad, param.grad_req)
        self.marked = True

    def release(self, keep_gradients: bool = False) -> None:
        """Between steps: each Parameter back to its device's rows (level ``parameters``); gradients dropped
        where the level drops them and no micro-batch still adds to them."""
        if self.drops and not keep_gradients:
            for param in self.params:
                param._grad = None
        if self.released:
            for j, param in enumerate(self.params):
                param._data = [self.rows[i][j] for i in range(len(self.contexts))]
            self.gathered = False
        if self.released or (self.drops and not keep_gradients):
            self.marked = False

    @cached_property
    def _host(self) -> Optional[HostRows]:
        """The gather through the gradient sum's shared memory (opened by every rank at its first gather if no sum
        has yet); None where the job is not on one machine, or its contexts are not CPUs."""
        shared = self.reps.shared_sum()
        return shared and HostRows(RowGather(shared, [tuple(p.shape) for p in self.params], len(self.contexts)))

    def _assembled(self, rows: Callable[[int, int], Union[mx.nd.NDArray, np.ndarray]]) -> list[mx.nd.NDArray]:
        """Every trainable parameter whole on the first context from the job's owners (``rows(i, j)``: local
        device i's rows of parameter j): through shared memory, or each process's rows in zeros summed over the
        processes (x + 0 is x)."""
        first, wholes, host = self.contexts[0], [], self._host
        if host is not None:
            host.put(rows)
            for j, param in enumerate(self.params):
                wholes.append(nd.empty(param.shape, first, dtype=self.dtype))
                host.copy_out(j, wholes[-1])
            nd.waitall()  # read before the next sum writes the total
            return wholes
        for j, param in enumerate(self.params):
            whole = nd.zeros(param.shape, first, dtype=self.dtype)
            for i, (a, b) in enumerate(self.ranges[j]):
                if b > a:
                    part = rows(i, j)
                    whole[a:b] = part.as_in_context(first) if isinstance(part, nd.NDArray) else \
                        to_device(part, first, self.dtype)
            wholes.append([whole])
        self.reps.sum_processes(wholes)
        return [whole for whole, in wholes]

    def _spread(self, wholes: list[mx.nd.NDArray]) -> None:
        """Each Parameter holds its whole (on the first context) on every context, a copy of its own on each."""
        for param, whole in zip(self.params, wholes):
            param._data = [whole] + [whole.copyto(ctx) for ctx in self.contexts[1:]]

    def _whole(self, j: int, ctx) -> mx.nd.NDArray:
        """Parameter j whole on ``ctx``, from every device's rows (a new array: the rows stay the master)."""
        parts = [rows[j].as_in_context(ctx) for rows in self.rows if rows[j] is not None]
        return nd.concat(*parts, dim=0) if len(parts) > 1 else parts[0].copyto(ctx)

    # The update --------------------------------------------------------------
    def step(self, lr: float) -> None:
        """Every device updates its rows with its rows of the summed gradient; the rows are then gathered
        (levels ``optimizer``, ``gradients``) or kept where they are (``parameters``).

        In one process a parameter's gradients are summed whole on the first context, in the kvstore's order
        (value by value the same additions as each device summing its own rows), then cut per device, and the
        updated rows are joined there once and copied to the others: with each device summing and joining its own
        a step's copies and additions were k times as many (ResNet-18 on 4 CPU contexts: an epoch at level
        ``optimizer`` took 1.39-1.43 times the replicated one's, then 1.01-1.11). Each device updates the rows of
        its own whole in place (views), and the join writes into the arrays the Parameters hold: new arrays each
        step cost a third more operators (a step of 128 8x8 images, AdamW: 409-446 ms, then 378-390, replicated
        350-372). CPU contexts share the host's memory, so there each device updates its rows of the first
        context's whole and its gradient's rows where they were summed, its state on its own context: no rows
        are copied. Each device's updater takes several parameters a call (the optimizer's fused kernels).
        """
        for opt in self.optimizers:
            opt.set_learning_rate(lr)
        if self.processes:  # every context's gradient the job's total, added as the replicated run adds it
            self.reps._allreduce_processes()
        group = max(1, self.optimizers[0].aggregate_num)
        for start in range(0, len(self.params), group):
            self._update_group(range(start, min(start + group, len(self.params))))
        if not self.released and self.processes:  # one gather over the processes, of every parameter
            self._gather_processes()
            self.rows = [[None] * len(self.params) for _ in self.contexts]
        self.steps += 1
        self.marked = False

    def _gather_processes(self) -> None:
        """The updated rows of every device of the job into every context's whole: through shared memory into the
        arrays the Parameters hold (each context's own rows are in place), else a sum of zeros and new arrays."""
        host = self._host
        if host is None:
            self._spread(self._assembled(lambda i, j: self.rows[i][j]))
            return
        host.put(lambda i, j: self.rows[i][j])
        for j, param in enumerate(self.params):
            for i, ctx in enumerate(self.contexts):
                host.copy_out(j, param.data(ctx), skip=host.gather.base + i)
        nd.waitall()  # read before the next sum writes the total

    def _update_group(self, js: range) -> None:
        """Parameters ``js``: each device's rows updated in one call of its updater (the optimizer's fused kernel
        over several weights), then gathered in place (one process, levels ``optimizer`` and ``gradients``)."""
        first = self.contexts[0]
        totals = {j: None if self.processes else self._total(self.params[j]) for j in js}
        for i, ctx in enumerate(self.contexts):
            owned = [j for j in js if self.ranges[j][i][1] > self.ranges[j][i][0]]
            summed = []
            for j in owned:
                a, b = self.ranges[j][i]
                source = self.params[j].grad(ctx) if totals[j] is None else totals[j]
                summed.append(source[a:b] if self.shared else source[a:b].as_in_context(ctx))  # a view, or its copy
                if not self.released:  # the rows of a whole, a view: updated in place
                    self.rows[i][j] = self.params[j].data(first if self.shared else ctx)[a:b]
            if owned:
                self._states_on(i, owned)
                self.updaters[i](owned, summed, [self.rows[i][j] for j in owned])
        if not self.released and not self.processes:
            for j in js:
                self._gather_in_place(j, self.params[j])
                for rows in self.rows:
                    rows[j] = None

    def _states_on(self, i: int, js: list[int]) -> None:
        """Device i's state of parameters ``js`` made on its own context where it has none yet (the updater would
        make it beside the weights, which on shared contexts lie in the first context's arrays)."""
        for j in js:
            if j not in self.updaters[i].states:
                self._new_state(i, j)

    def _new_state(self, i: int, j: int):
        """Device i's fresh state of its rows of parameter j, on its context, held by its updater."""
        a, b = self.ranges[j][i]
        like = nd.empty((b - a, *self.params[j].shape[1:]), self.contexts[i], dtype=self.dtype)
        created = self.optimizers[i].create_state_multi_precision(j, like)
        self.updaters[i].states[j], self.updaters[i].states_synced[j] = created, True
        return created

    def _gather_in_place(self, j: int, param) -> None:
        """Each device's updated rows into the first context's whole, then that whole into every other context's
        own array: no array made, so the network's compiled graph keeps the ones it holds."""
        whole = param.data(self.contexts[0])
        for i, (a, b) in enumerate(self.ranges[j]):
            if b > a and i > 0 and not self.shared:  # shared: the rows were updated there
                self.rows[i][j].copyto(whole[a:b])
        for ctx in self.contexts[1:]:
            whole.copyto(param.data(ctx))

    def summed_gradients(self) -> State:
        """The gradient summed over the contexts (and processes) as the replicated run sums it, on the host."""
        first = self.contexts[0]
        if self.processes:
            self.reps._allreduce_processes()
            return {name: to_host(param.grad(first)) for name, param in zip(self.names, self.params)}
        return {name: to_host(self._total(param)) for name, param in zip(self.names, self.params)}

    def _total(self, param) -> mx.nd.NDArray:
        """One process: the contexts' gradients of ``param`` summed in the kvstore's order (on shared contexts
        read where they lie, else copied to the first context first)."""
        first = self.contexts[0]
        return reduce_sum([g if self.shared else g.as_in_context(first) for g in param.list_grad()], self.local)

    def gradients(self, batch: Batch) -> State:
        """``Replicas.gradients``: the batch's summed gradient, no update; statistics and held micro-batches kept."""
        reps = self.reps
        saved = reps._snapshot()  # MXNet's BatchNorm updates running statistics in backward
        held = [[g.copy() for g in p.list_grad()] for p in self.params] if reps._holding else None
        reps._zero_grads()
        reps._backward(batch)
        grads = self.summed_gradients() if self.params else {}
        reps._restore(saved)
        reps._zero_grads()
        for param, copies in zip(self.params, held or []):
            for grad, copy in zip(param.list_grad(), copies):
                copy.copyto(grad)
        self.release(keep_gradients=held is not None)
        return grads

    # State -------------------------------------------------------------------
    def load(self, state: State) -> None:
        """Whole canonical parameters in: each context keeps the whole (or, level ``parameters``, its rows)."""
        for j, (name, param) in enumerate(zip(self.names, self.params)):
            whole = np.asarray(state[name], self.dtype)
            if self.released:
                for i, (a, b) in enumerate(self.ranges[j]):
                    self.rows[i][j] = to_device(whole[a:b], self.contexts[i], self.dtype) if b > a else None
                param._data = [self.rows[i][j] for i in range(len(self.contexts))]
            else:
                param._data = [to_device(whole, ctx, self.dtype) for ctx in self.contexts]
        self.gathered, self.marked = not self.released, False

    def whole_parameters(self, device: int) -> State:
        """Device ``device``'s trainable parameters, whole and canonical, on the host (gathered from the rows)."""
        if not self.released:
            ctx = self.contexts[device]
            return {name: to_host(p.data(ctx)) for name, p in zip(self.names, self.params)}
        if self.processes:  # a collective: every rank reads its state at the same moment
            wholes = self._assembled(lambda i, j: self.rows[i][j])
            return {name: to_host(whole) for name, whole in zip(self.names, wholes)}
        return {name: np.concatenate([to_host(rows[j]) for rows in self.rows if rows[j] is not None], axis=0)
                for j, name in enumerate(self.names)}

    def optimizer_state(self) -> State:
        """The update count and each slot of each parameter, whole: every device's rows in device order."""
        state: State = {STEP: np.array(self.steps, np.int64)}
        if self.processes:  # a collective: a sum over the processes per slot
            held = {(i, j): self._slots(i, j) for j, ranges in enumerate(self.ranges)
                    for i, (a, b) in enumerate(ranges) if b > a}
            for s, slot in enumerate(self.reps.setup.optimizer.slots):
                wholes = self._assembled(lambda i, j, s=s: held[i, j][s])
                state.update({slot_name(slot, name): to_host(whole) for name, whole in zip(self.names, wholes)})
            return state
        for j, (name, param) in enumerate(zip(self.names, self.params)):
            parts = [self._slots(i, j) for i, (a, b) in enumerate(self.ranges[j]) if b > a]
            for s, slot in enumerate(self.reps.setup.optimizer.slots):
                state[slot_name(slot, name)] = np.concatenate([part[s] for part in parts], axis=0)
        return state

    def _slots(self, i: int, j: int) -> list[np.ndarray]:
        """Device i's rows of parameter j's slots (zeros before its first update)."""
        a, b = self.ranges[j][i]
        held = self.optimizers[i].buffers(j, self.updaters[i].states.get(j))
        shape = (b - a, *self.params[j].shape[1:])
        return [to_host(s).astype(self.dtype, copy=False) if held else np.zeros(shape, self.dtype)
                for s in held or self.reps.setup.optimizer.slots]

    def load_optimizer_state(self, state: State) -> None:
        """Whole canonical state in: each device keeps its rows; MXNet's counts resume from ``optimizer.step``."""
        self.steps = int(state[STEP])
        for opt in self.optimizers:
            optimizers.resume_count(opt, self.steps)
        for i, updater in enumerate(self.updaters):
            updater.states.clear()
            updater.states_synced.clear()
            for j, name in enumerate(self.names):
                a, b = self.ranges[j][i]
                if a == b:
                    continue
                for array, slot in zip(optimizers.slots(self._new_state(i, j)), self.reps.setup.optimizer.slots):
                    write(array, np.asarray(state[slot_name(slot, name)])[a:b])

    def held_bytes(self) -> list[dict[str, int]]:
        """Per context: bytes of the arrays its Parameters hold and of its updater's state (read from them)."""
        return [{"parameters": _bytes(p._data[i] for p in self.params),
                 "optimizer": _bytes(a for s in self.updaters[i].states.values() for a in optimizers.slots(s))}
                for i in range(len(self.contexts))]


def replicated_held(reps: Replicas) -> list[dict[str, int]]:
    """``held_bytes`` of replicas that shard nothing: each context's whole parameters, and the state of the updater
    its update comes from (the kvstore's one copy, where the Trainer updates there, serves every context)."""
    holders = optimizers.holders(reps.trainer) if reps.trainer is not None else []
    states = [_bytes(a for s in h.states.values() for a in optimizers.slots(s)) for h in holders]
    return [{"parameters": _bytes(p.data(ctx) for p in reps._trainable),
             "optimizer": (states[i] if len(states) > 1 else sum(states))} for i, ctx in enumerate(reps.contexts)]
