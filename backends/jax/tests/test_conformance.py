from multidev.testing import Conformance


class TestJaxConformance(Conformance):
    backend = "jax"
