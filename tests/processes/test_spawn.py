"""Starting and stopping the workers of a job: which failure is named when several end."""

import signal

from multidev.processes.spawn import cause


def test_the_worker_killed_is_named_not_the_one_that_lost_it():
    """Rank 1 is killed and rank 0, its peer gone, exits with an error within the same poll."""
    assert cause([(0, 2), (1, -signal.SIGKILL)]) == (1, -signal.SIGKILL)
    assert cause([(0, -signal.SIGTERM), (1, 3)]) == (0, -signal.SIGTERM)  # the launcher's SIGTERM: order decides
    assert cause([(2, 1), (0, 2)]) == (2, 1)
