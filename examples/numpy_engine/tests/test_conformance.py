"""The whole conformance kit: SPEC.md's promises, checked against this engine."""

from multidev.testing import Conformance


class TestNumpyConformance(Conformance):
    backend = "numpy"
