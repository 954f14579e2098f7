"""Where a torch engine step's time goes on a GPU (or the CPU): the host's share against the device's.

A small convolution net on a GPU can be bound by the host: Python and
torch's dispatch queue kernels more slowly than the GPU runs them. This
times whole steps of the engine (ResNet-18, 1x28x28, the book's batch) and
then traces a few with ``torch.profiler``: the host's busy time per step,
the device's kernel time per step, and the operations that take the most
device time. If the step takes about as long as the host's part, the GPU
waits for the host (CUDA graphs or fewer kernels pay there); if it takes
about as long as the kernels, the kernels are what to speed up.

    python -m bench.profile_torch --precision bf16          # gpu:0 when torch sees one, else cpu:0
    MULTIDEV_TORCH_GPU_FORMS=channels_last python -m bench.profile_torch --precision bf16   # a GPU form pinned
    MULTIDEV_TORCH_LAYOUT=nhwc python -m bench.profile_torch --precision bf16 --batch 64 --traced 1   # NHWC on a CPU

A CPU run here builds its replicas without a run's batch size, so it times
no layout: NCHW unless ``MULTIDEV_TORCH_LAYOUT`` pins NHWC.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from bench import harness

import multidev  # noqa: I001

SMOKE = {"model": "mlp", "batch": 4, "steps": 1, "traced": 1, "top": 5}


def main() -> None:
    p = harness.parser(__doc__)
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mlp"), help="mlp: a smoke run's")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=20, help="timed steps, after 5 untimed ones")
    p.add_argument("--traced", type=int, default=3)
    p.add_argument("--top", type=int, default=12)
    args = harness.parse(p, SMOKE)
    cuda = torch.cuda.is_available()
    spec = multidev.ModelSpec(args.model, (1, 28, 28), 10)
    setup = multidev.Setup(spec, (multidev.Device.parse("gpu:0" if cuda else "cpu:0"),), precision=args.precision)
    reps = multidev.replicate(multidev.load_backend("torch"), setup, spec.init(0))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, *spec.in_shape)).astype(np.float32)
    y = rng.integers(0, spec.num_classes, args.batch)
    placed = reps.place(multidev.cut(x, y, [args.batch]))

    def steps(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            reps.train_step(placed, lr=0.01)  # each step copies its loss to the host: no sync needed after
        return (time.perf_counter() - start) / n

    steps(5)
    wall = steps(args.steps)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        steps(args.traced)
    events = prof.key_averages()
    # kernels only: an operator's own row repeats its kernels' time (counted once per step here)
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    device = sum(e.self_device_time_total for e in kernels) / 1e3 / args.traced if cuda else float("nan")
    host = events.self_cpu_time_total / 1e3 / args.traced  # every host thread's (autograd runs its own)
    out = harness.report(__file__, args, f"{args.model} 1x28x28, {setup.devices[0]}, {args.precision}, batch "
                         f"{args.batch}, forms {sorted(getattr(reps, 'forms', ())) or 'none'}; step "
                         f"{1e3 * wall:.1f} ms (untraced); per traced step: host threads busy {host:.1f} ms, device "
                         f"kernels {device:.1f} ms", gpu=cuda)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    for event in sorted(events, key=lambda e: getattr(e, key), reverse=True)[:args.top]:
        out.add({"operation": event.key, "calls a step": event.count / args.traced,
                 "self ms a step": getattr(event, key) / 1e3 / args.traced})
    out.save()


if __name__ == "__main__":
    main()
