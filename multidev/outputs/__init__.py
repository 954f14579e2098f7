"""What a run leaves behind, each written whole or not at all (``files``).

``checkpoint`` (the framework-neutral ``.npz``), ``result`` (the returned
value and its JSON), ``plot`` (PNG curves) and ``trace`` (parameters after
the first steps, for ``multidev compare``).
"""
