"""The whole conformance kit: the contract's promises, checked against this engine."""

from multidev.testing import Conformance


class TestNumpyConformance(Conformance):
    backend = "numpy"
    # A reference for correctness, not speed: ten epochs of ResNet-18 in NumPy take too long for CI.
    accuracy_device_counts = ()
