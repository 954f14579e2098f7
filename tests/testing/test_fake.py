"""The kit takes an engine object through its `engine` fixture; the fake engine it ships passes it unbroken."""

import pytest

from multidev.testing import Conformance
from multidev.testing.fake import FakeEngine


class TestFakeEngineConformance(Conformance):
    """The fake is not installed under the entry point: the kit gets the object itself."""

    accuracy_device_counts = ()  # the reference arithmetic in NumPy: too slow for a 10-epoch run

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls):
        return FakeEngine()
