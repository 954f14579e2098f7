"""The hand-written PyTorch loop of the model table, as ``bench.bench_torch`` writes it: torchvision's network, one
replica and one optimizer (SGD with momentum) per device, each replica's shard forward and backward, the gradients
summed into every replica before the step."""

from __future__ import annotations

from typing import Any, Callable

from bench import harness
from bench.peers.measure import checked, measure, synthetic
from bench.peers.nets import Net


def time_torch(name: str, size: int, smoke: bool, k: int, batch: int, lr: float, momentum: float, warmup: int,
               steps: int, repeats: int, expected: int, gpu: bool = False) -> dict[str, Any]:
    """Samples/s, first step and parameter count of torchvision's ``name`` on ``k`` replicas (a fresh process), on
    ``k`` GPUs where ``gpu``: full float32 there, TF32 off as the engine has it."""
    harness.as_the_command()  # before torch loads (a parent's setting stands)
    import torch

    from bench.peers import torch_models

    torch.manual_seed(0)
    devices = [torch.device(f"cuda:{i}" if gpu else "cpu") for i in range(k)]
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    replicas = [torch_models.build(Net.of(name, size, smoke)).train() for _ in range(k)]
    for r in replicas[1:]:
        r.load_state_dict(replicas[0].state_dict())
    replicas = [r.to(d) for r, d in zip(replicas, devices)]
    count = checked(torch_models.parameters(replicas[0]), expected, "torchvision's network")
    x, y = synthetic(batch, size)
    step = replicated_step(replicas, torch.from_numpy(x), torch.from_numpy(y), lr, momentum)
    timed = measure(step, torch.cuda.synchronize if gpu else lambda: None, batch=batch, warmup=warmup, steps=steps,
                    repeats=repeats)
    return {**timed, "params": count, "version": torch.__version__, "threads": torch.get_num_threads()}


def replicated_step(replicas: list, x: Any, y: Any, lr: float, momentum: float) -> Callable[[], None]:
    """One step of every replica on its shard of ``(x, y)`` (copied to its device each step, as a loader's batch):
    the batch's mean loss, gradients summed over replicas."""
    import torch
    import torch.nn.functional as F

    k = len(replicas)
    optimizers = [torch.optim.SGD(r.parameters(), lr=lr, momentum=momentum) for r in replicas]
    xs, ys = x.tensor_split(k), y.tensor_split(k)

    def step() -> None:
        for r, xi, yi in zip(replicas, xs, ys):
            r.zero_grad()
            device = next(r.parameters()).device
            xi, yi = xi.to(device, non_blocking=True), yi.to(device, non_blocking=True)
            (F.cross_entropy(r(xi), yi, reduction="sum") / len(x)).backward()
        if k > 1:
            with torch.no_grad():
                for params in zip(*(r.parameters() for r in replicas)):
                    total = sum(p.grad.to(params[0].device) for p in params)
                    for p in params:
                        p.grad.copy_(total)
        for opt in optimizers:
            opt.step()
    return step
