"""The test run's own start-up, as the multidev command's: every usable core for the frameworks' CPU threads.

MXNet reads OMP_NUM_THREADS only when it loads and takes half the cores without it; the engines set no
variable themselves (tests/test_side_effects.py), so the test program does, as `multidev` does.
"""

from multidev.cli import apply_threads

apply_threads(None)
