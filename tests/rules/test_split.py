"""The split rule (contract: Split, Process groups): shard sizes, cutting, and each process's rows of the cut."""

import numpy as np
import pytest

from multidev import MultidevError, cut, shard_bounds, shard_sizes, split
from multidev.rules.split import cut_for_process


@pytest.mark.parametrize("k", range(1, 9))
def test_sizes_follow_array_split_for_every_batch(k):
    for b in range(0, 65):
        want = [len(part) for part in np.array_split(np.arange(b), k)]
        assert shard_sizes(b, k) == want, (b, k)


@pytest.mark.parametrize("k", range(1, 9))
def test_split_is_contiguous_and_complete(k):
    for b in range(1, 65):
        x = np.arange(b)
        parts = split(x, shard_sizes(b, k))
        assert len(parts) == k
        assert np.array_equal(np.concatenate(parts), x)  # nothing dropped, repeated or reordered
        for (start, end), part in zip(shard_bounds(shard_sizes(b, k)), parts):
            assert list(part) == list(range(start, end))


def test_batch_smaller_than_devices_gets_empty_shards():
    assert shard_sizes(2, 4) == [1, 1, 0, 0]
    assert shard_sizes(0, 3) == [0, 0, 0]


def test_equal_weights_give_the_plain_rule():
    for b in range(0, 65):
        for k in range(1, 9):
            assert shard_sizes(b, k, [2.5] * k) == shard_sizes(b, k)


def test_weights_round_by_largest_remainder_ties_to_lower_index():
    assert shard_sizes(10, 2, [3, 1]) == [8, 2]  # 7.5 / 2.5: tie, lower index gets the row
    assert shard_sizes(10, 3, [1, 1, 2]) == [3, 2, 5]  # 2.5 / 2.5 / 5
    assert shard_sizes(7, 3, [0, 1, 1]) == [0, 4, 3]
    for b in range(0, 65):
        assert sum(shard_sizes(b, 3, [0.2, 0.3, 0.5])) == b


@pytest.mark.parametrize("weights, message", [
    ([1, -1], "device weights must be finite, non-negative and not all zero"),
    ([0, 0], "device weights must be finite, non-negative and not all zero"),
    ([1, float("nan")], "device weights must be finite, non-negative and not all zero"),
    ([1, 2, 3], r"need one weight per device \(2\), got 3"),
])
def test_bad_weights_are_user_errors(weights, message):
    with pytest.raises(MultidevError, match=f"^{message}$"):
        shard_sizes(8, 2, weights)


def test_split_rejects_sizes_that_do_not_cover_the_batch():
    with pytest.raises(MultidevError, match="^shard sizes add up to 4 but the batch has 5 rows$"):
        split(np.arange(5), [2, 2])


def test_cut_hands_each_device_its_rows_and_labels_in_device_order():
    x, y = np.arange(10).reshape(5, 2), np.arange(5) * 10
    shards = cut(x, y, shard_sizes(5, 4, [1, 0, 1, 1]))
    assert shards.sizes == (2, 0, 2, 1) and shards.total == 5 and shards.active == [0, 2, 3]
    assert [list(part[:, 0]) for part in shards.x] == [[0, 2], [], [4, 6], [8]]
    assert [list(part) for part in shards.y] == [[0, 10], [], [20, 30], [40]]
    assert cut(x, None, [5]).y is None  # prediction: no labels


def test_each_process_reads_its_own_rows_of_the_one_process_cut():
    """2 processes x 2 devices hold exactly what 1 process x 4 devices would, rank-major."""
    x, y = np.arange(30).reshape(10, 3), np.arange(10)
    index = np.random.default_rng(0).permutation(10)
    sizes = shard_sizes(10, 4)  # [3, 3, 2, 2]
    whole = cut(x[index], y[index], sizes)
    for rank in (0, 1):
        mine = cut_for_process(x, y, index, sizes, rank, 2)
        assert [a.tolist() for a in mine.x] == [a.tolist() for a in whole.x[2 * rank:2 * rank + 2]]
        assert mine.batch == 10 and mine.total == sum(sizes[2 * rank:2 * rank + 2])
        assert mine.own([0, 1, 2, 3]) == [0, 1] and mine.own([1, 2]) == ([1] if rank == 0 else [0])


def test_devices_that_sit_out_are_seen_by_every_process():
    """3 rows over 2 x 2 devices: the last device of process 1 is empty, and process 0 knows it."""
    x, y = np.zeros((3, 1)), np.zeros(3)
    mine = cut_for_process(x, y, np.arange(3), shard_sizes(3, 4), 0, 2)
    assert mine.active == [0, 1] and mine.group_active == [0, 1, 2] and mine.batch == 3
