from multidev.testing import Conformance


class TestTorchConformance(Conformance):
    backend = "torch"
    # The README's quick start (torch, two devices): its band here; tests/test_quickstart.py runs its command.
    accuracy_device_counts = (2,)
