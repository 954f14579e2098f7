"""The seam between the core and the engines.

``protocol`` is what an engine implements (``Backend``, ``Replicas`` and
their optional parts) and the ``Setup`` it is handed; ``capabilities``
says what a run needs of an engine and refuses it in one line where the
engine does not claim it; ``registry`` finds engines through the
``multidev.backends`` entry-point group without importing them;
``lockstep`` and ``idioms`` are helpers an engine may call instead of
writing them again. Engine authors import all of this from
``multidev.engine`` alone.
"""
