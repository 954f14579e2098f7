"""The quick suite's own set-up (conftest.py): what keeps it within the README's minutes."""

import os

import pytest


def test_the_quick_suite_compiles_without_llvm_optimisation(request):
    """Its hundreds of tiny JAX programs compile 3x faster so; a marker expression of its own must keep that."""
    if not (request.config.option.markexpr or "").replace(" ", "").startswith("notslow"):
        pytest.skip("not the quick suite: XLA compiles as users' runs do")
    if os.environ.get("MULTIDEV_TEST_MEASURED", "").strip() == "1":
        pytest.skip("MULTIDEV_TEST_MEASURED=1 (.ci/kit-measured): XLA compiles as users' runs do")
    assert "--xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", "")
