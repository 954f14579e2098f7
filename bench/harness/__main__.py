"""``python -m bench.harness``: this machine's facts as a result file keeps them (CPU and its kind, GPU, versions,
commit), as JSON."""

import json

from bench.harness.machine import facts

print(json.dumps(facts(), indent=2))
