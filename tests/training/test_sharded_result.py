"""A sharded run's result says what each device keeps: the core's rule, from the run's model and optimizer."""

from multidev.testing.fake import FakeEngine
from multidev.training.api import train


class ShardingFake(FakeEngine):
    capabilities = FakeEngine.capabilities | {"shard_optimizer"}


def test_the_result_records_each_devices_bytes():
    result = train(ShardingFake(), model="mlp", epochs=1, devices=2, optimizer="adamw", lr=1e-3, shard="optimizer")
    assert result.shard == "optimizer"
    memory = result.memory
    whole = memory["parameters"][0]  # the MLP's float32 parameters, on every device at this level
    assert whole > 0 and memory["parameters"] == [whole, whole] and memory["gradients"] == [whole, whole], memory
    # AdamW keeps two arrays per parameter: together the devices hold them once, each less than all of them
    assert sum(memory["optimizer"]) == 2 * whole and max(memory["optimizer"]) < 2 * whole, memory
    plain = train(ShardingFake(), model="mlp", epochs=1, devices=2, optimizer="adamw", lr=1e-3).memory
    assert plain["optimizer"] == [2 * whole, 2 * whole] and plain["parameters"] == memory["parameters"]
