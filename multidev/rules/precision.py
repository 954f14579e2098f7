"""Number formats (contract: Mixed precision, float64 runs): the dtype of parameters and of compute."""

from __future__ import annotations

from multidev.errors import MultidevError
from multidev.rules.numbers import whole_number

DTYPES = ("float32", "float64")


#: fp32: compute in the parameters' dtype; bf16: compute in bfloat16 (contract: Mixed precision)
PRECISIONS = ("fp32", "bf16")


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise MultidevError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")


def check_precision(precision: str, dtype: str = "float32") -> None:
    if precision not in PRECISIONS:
        raise MultidevError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if precision == "bf16" and dtype != "float32":
        raise MultidevError(f"precision bf16 keeps float32 master weights: leave dtype at float32, not {dtype}")


def check_accumulate(accumulate: object) -> int:
    return whole_number(accumulate, "accumulate", unit=" of micro-batches")
