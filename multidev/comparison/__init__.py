"""``multidev compare``: the same job on several engines and device counts, side by side.

``runs`` runs one setting in a process of its own; ``compare`` runs the
grid and its float64 truth; ``divergence`` measures how far each run's
state parts from the truth and where a difference was born;
``report`` writes the table, the JSON and the plots.
"""
