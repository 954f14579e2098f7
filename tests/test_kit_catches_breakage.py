"""The kit must fail, naming the promise, when an engine breaks one (checked on the PyTorch engine)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

KIT_TESTS = Path(__file__).resolve().parents[1] / "backends" / "torch" / "tests" / "test_conformance.py"

BREAKAGES = {
    "drop the remainder of a batch": ("""
        orig = R.split_batch
        def broken(self, x, y, sizes):
            k = len(sizes); b = len(x) - len(x) % k
            if b == 0:
                return orig(self, x, y, sizes)
            return orig(self, x[:b], None if y is None else y[:b], [b // k] * k)
        R.split_batch = broken
        """, "test_split_follows_core_rule", "split: batch 3 on 2 devices"),
    "skip the running-statistics sync": (
        "R._sync_statistics = lambda self, active: None",
        "test_replicas_identical_after_steps and local", "replicate: replicas drift apart"),
    "count a test sample twice": ("""
        from multidev.protocol import StepStats
        orig = R.evaluate
        def broken(self, batch):
            s = orig(self, batch)
            return StepStats(s.loss_sum, s.correct, s.count + (len(batch) > 1))
        R.evaluate = broken
        """, "test_every_sample_counted_once", "evaluation counted"),
    "skip gradient aggregation": (
        "R._allreduce = lambda self, active: None",
        "test_float32_gradients_equal_float64_truth and lenet-11", "aggregation: lenet gradient (local BatchNorm, float32) on 2 device(s)"),
    "weigh shards 1/k instead of n_i/B": ("""
        import inspect, textwrap, multidev_torch.parallel as P
        source = textwrap.dedent(inspect.getsource(R._backward_float32))
        source = source.replace("[loss / total for loss in losses]",
                                "[loss / batch[i].size / len(active) for loss, i in zip(losses, active)]")
        namespace = dict(vars(P))
        exec(source, namespace)
        R._backward_float32 = namespace["_backward_float32"]
        """, "test_float32_gradients_equal_float64_truth and lenet-11",
        "aggregation: lenet gradient (local BatchNorm, float32) on 2 device(s), batch 11 cut [6, 5]"),
}


@pytest.mark.parametrize("what", sorted(BREAKAGES))
def test_kit_names_the_broken_promise(what, tmp_path):
    patch, selection, message = BREAKAGES[what]
    script = tmp_path / "run_broken.py"
    script.write_text("import sys, pytest\nfrom multidev_torch.parallel import TorchReplicas as R\n"
                      + textwrap.dedent(patch) + "\n"
                      + f"sys.exit(pytest.main(['-q', '-x', '-p', 'no:cacheprovider', {str(KIT_TESTS)!r}, "
                      + f"'-k', {selection!r}]))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, f"the kit did not notice: {what}\n{proc.stdout[-2000:]}"
    assert message in proc.stdout, proc.stdout[-3000:]
