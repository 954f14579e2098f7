"""The contract's rules, one module per section of docs/contract.md, written once for every engine.

``devices`` (Devices), ``split`` (Split), ``models`` (Model and initial
weights), ``batchnorm`` (BatchNorm), ``optimizers`` (Optimizers),
``schedules`` (Learning-rate schedules) and ``precision`` (Mixed precision,
float64 runs). A rule here is plain NumPy and Python: engines reach it
through ``multidev.engine``, the core's loop and checks call it directly,
and ``multidev.reference`` computes with it in float64.
"""
