"""``multidev compare``: the same job on several engines and device counts, side by side.

``runs`` runs one setting in a process of its own; ``compare`` runs the
grid and its float64 truth; ``divergence`` measures how far each run's
parameters part from the truth and says whether that is rounding;
``report`` writes the table, the JSON and the plots.
"""
