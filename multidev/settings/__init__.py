"""A run's settings as one typed, frozen value.

Every setting is a field that knows its default, its check, its
command-line flag and help, and whether every rank of a job must agree on
it. The parser, ``multidev.train``'s keyword arguments, ``compare``'s runs
and the workers' argv all derive from it, so a new setting is one field
plus the code that uses it. ``recipe`` groups the optimizer, the schedule,
accumulation and precision as the value engines and checkpoints see.
"""
