from multidev.testing import Conformance


class TestTorchConformance(Conformance):
    backend = "torch"
    # The README's quick start (torch, two devices): its band here; tests/test_quickstart.py runs its command.
    accuracy_device_counts = (2,)
    # its owners add their rows in the all-reduce's order and step them with the same torch.optim arithmetic
    shard_rtol = 0.0
