from multidev.testing import Conformance


class TestJaxConformance(Conformance):
    backend = "jax"
    # The quick start's two devices (the kit's one-device run as well took CI 85 s more); one device's steps are
    # the kit's float truths.
    accuracy_device_counts = (2,)
