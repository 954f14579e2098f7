"""Whether MXNet's oneDNN computes bfloat16 on this CPU: read from the CPU's flags, without loading MXNet.

MXNet 1.9.1's oneDNN has bfloat16 convolutions for AVX-512 CPUs only
(oneDNN's ``avx512_core``: AVX-512 F, BW, VL and DQ; natively with
``avx512_bf16``). On an AVX2 CPU (measured: an AMD EPYC of the Zen 3
generation) the first bfloat16 convolution fails with "could not create a
primitive descriptor iterator". So the engine claims ``bf16`` only where the
flags are there, and ``multidev backends`` says why where they are not.
MXNet itself is not loaded to find out: its thread count is fixed when it
loads (see runtime.py), which must stay the run's choice.
"""

from __future__ import annotations

from multidev.engine import cpu_flags as flags

#: oneDNN's avx512_core, the least its bfloat16 kernels run on
NEEDED = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


def bf16() -> bool:
    return all(flag in flags() for flag in NEEDED)


def bf16_note() -> str:
    if bf16():
        return "offered (oneDNN's bfloat16 kernels: this CPU has AVX-512)"
    return ("not offered: MXNet's oneDNN computes bfloat16 on AVX-512 CPUs only "
            f"(needs {', '.join(NEEDED)}; this CPU has {'AVX2' if 'avx2' in flags() else 'neither'}); "
            "use --precision fp32, or the torch or JAX engine")
