"""Importing an engine, or creating its object, changes nothing in the process: no environment variable, no
framework-wide flag."""

import subprocess
import sys
import textwrap

import pytest

from multidev import installed_backends

PROBE = {  # what each framework keeps process-wide that an engine might be tempted to set
    "torch": "import torch; flags = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, "
             "torch.get_num_threads(), torch.get_default_dtype())",
    "jax": "import jax; flags = (jax.config.jax_num_cpu_devices, jax.config.jax_enable_x64)",
    "mxnet": "flags = ()",  # MXNet is not loaded by the import at all (checked below)
    "numpy": "flags = ()",
}


@pytest.mark.parametrize("name", sorted(PROBE))
def test_import_and_creation_change_no_environment_and_no_global_flag(name):
    if name not in installed_backends():
        pytest.skip(f"the {name} engine is not installed")
    code = textwrap.dedent(f"""
        import os, sys
        {PROBE[name]}
        before = (dict(os.environ), flags)
        import multidev, multidev_{name}
        multidev.load_backend("{name}")  # the engine object, as the core creates it
        {PROBE[name]}
        changed = set(os.environ.items()) ^ set(before[0].items())
        assert dict(os.environ) == before[0], f"environment changed: {{changed}}"
        assert flags == before[1], f"global flags changed: {{before[1]}} -> {{flags}}"
        if "{name}" == "mxnet":
            assert "mxnet" not in sys.modules, "creating the mxnet engine loaded MXNet"
        print("ok")
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
