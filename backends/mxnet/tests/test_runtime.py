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


CORE = """
import json, os
from multidev_mxnet.runtime import load_note, mxnet, openblas_kernels
mx = mxnet()
print(json.dumps({"core": openblas_kernels(mx), "note": load_note(),
                  "left": [n for n in ("MXNET_USE_OPERATOR_TUNING", "OPENBLAS_CORETYPE") if n in os.environ]}))
"""


def _loaded(env: dict) -> dict:
    import os

    clean = {k: v for k, v in os.environ.items() if k not in ("MXNET_USE_OPERATOR_TUNING", "OPENBLAS_CORETYPE")}
    done = subprocess.run([sys.executable, "-c", CORE], capture_output=True, text=True, timeout=120, check=True,
                          env={**clean, **env})
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mxnet_s_openblas_gets_the_cpu_s_vector_kernels_and_the_process_keeps_its_environment():
    from multidev.engine import cpu_flags

    if not {"avx2", "fma"} <= cpu_flags():
        pytest.skip("the CPU has no AVX2 and FMA: OpenBLAS's own choice stands")
    out = _loaded({})
    if not out["core"]:
        pytest.skip("this MXNet wheel has no OpenBLAS of its own")
    assert out["core"] in ("Haswell", "SkylakeX", "Zen", "Cooperlake", "SapphireRapids"), out
    assert out["left"] == [], out  # set for the import alone
    assert "MXNET_USE_OPERATOR_TUNING=0" in out["note"] and f"its {out['core']} kernels" in out["note"], out


def test_an_openblas_core_the_user_names_stands():
    out = _loaded({"OPENBLAS_CORETYPE": "Prescott"})
    if not out["core"]:
        pytest.skip("this MXNet wheel has no OpenBLAS of its own")
    assert out["core"] == "Prescott" and "OPENBLAS_CORETYPE" not in out["note"].split("(")[0], out


@pytest.mark.parametrize("kind, flags, core", [
    ("amd-epyc-zen4", {"avx2", "fma", "avx512f"}, "Zen"),
    ("intel-xeon-amx", {"avx2", "fma", "avx512f"}, "SkylakeX"),
    ("intel-avx2", {"avx2", "fma"}, "Haswell"),
    ("intel-sse", {"sse4_2"}, ""),
])
def test_openblas_kernels_follow_the_vector_units(kind, flags, core):
    from multidev_mxnet.runtime import openblas_core

    assert openblas_core(kind, frozenset(flags)) == core


def test_the_environment_s_own_settings_stand(monkeypatch):
    from multidev_mxnet.runtime import load_env

    monkeypatch.setenv("MXNET_USE_OPERATOR_TUNING", "1")
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    assert "MXNET_USE_OPERATOR_TUNING" not in load_env()
    monkeypatch.delenv("MXNET_USE_OPERATOR_TUNING")
    assert load_env()["MXNET_USE_OPERATOR_TUNING"] == "0"
