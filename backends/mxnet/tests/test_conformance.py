from multidev.testing import Conformance


class TestMXNetConformance(Conformance):
    backend = "mxnet"
    # The two-device quick start runs through the command line in test_mxnet_engine.py.
    accuracy_device_counts = (1,)
    # each device sums its rows in the local kvstore's order and steps them with the same updater: the same bits
    shard_rtol = 0.0
