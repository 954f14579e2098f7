from multidev.testing import Conformance


class TestTorchConformance(Conformance):
    backend = "torch"
    # The two-device quick start runs through the command line in tests/test_quickstart.py.
    accuracy_device_counts = (1,)
