"""What the ranks of a job agree on before the first step: their settings, compared by digest."""

from multidev.processes.job import differing, digest


def test_ranks_with_other_settings_are_named():
    same, other = digest({"lr": 0.1}), digest({"lr": 0.2})
    assert differing([same, same]) is None
    assert differing([same, other, other]).startswith("ranks 1, 2 were started with other settings than rank 0")
