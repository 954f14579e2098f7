"""The test run's own start-up, as the multidev command's: every usable core for the frameworks' CPU threads.

MXNet reads OMP_NUM_THREADS only when it loads and takes half the cores without it; the engines set no
variable themselves (tests/test_side_effects.py), so the test program does, as `multidev` does.
"""

import atexit
import os
import shutil
import tempfile

from multidev.processes.threads import apply_threads

apply_threads(None)

# Compiled programs go to a folder of this test run (workers and subprocesses inherit it), not the user's cache.
if not os.environ.get("MULTIDEV_COMPILE_CACHE"):
    os.environ["MULTIDEV_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="multidev-test-compile-cache-")
    atexit.register(shutil.rmtree, os.environ["MULTIDEV_COMPILE_CACHE"], True)
