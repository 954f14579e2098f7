"""Loading MXNet: what its import leaves out of the process, and that what it left out still works when asked for."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("multidev_mxnet")

SCRIPT = """
import json, sys
from multidev_mxnet.runtime import mxnet
mx = mxnet()
left_out = {name: name in sys.modules for name in ("sklearn", "scipy.stats")}
import mxnet.contrib.quantization as quantization
entropy = float(quantization.stats.entropy([0.5, 0.5]))  # SciPy's statistics, loaded on first use
import sklearn.base, scipy.stats  # and both import as usual afterwards
print(json.dumps({"loaded": left_out, "entropy": entropy, "version": mx.__version__}))
"""


def test_mxnet_loads_without_scikit_learn_or_scipy_statistics_and_quantization_still_gets_them():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["loaded"] == {"sklearn": False, "scipy.stats": False}, out
    assert out["entropy"] == pytest.approx(0.6931471805599453)
