from multidev.testing import Conformance


class TestTorchConformance(Conformance):
    backend = "torch"
