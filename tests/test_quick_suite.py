"""The quick suite's own set-up (conftest.py): what keeps it within the README's minutes."""

import os
from pathlib import Path

import pytest


def test_the_quick_suite_compiles_without_llvm_optimisation(request):
    """Its hundreds of tiny JAX programs compile 3x faster so; a marker expression of its own must keep that."""
    conftest = request.config.pluginmanager.get_plugin(str(Path(request.config.rootpath) / "conftest.py"))
    if not conftest.quick(request.config):
        pytest.skip("not the quick suite: XLA compiles as users' runs do")
    if conftest.MEASURED:
        pytest.skip("MULTIDEV_TEST_MEASURED=1 (.ci/kit-measured): XLA compiles as users' runs do")
    assert "--xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", "")
