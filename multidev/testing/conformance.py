"""Every check class of the kit in one: what an engine's tests subclass."""

from .kit import (AccuracyChecks, AggregationChecks, BatchNormChecks, CheckpointChecks, EvaluationChecks,
                  ParityChecks, PlacementChecks, ReplicateChecks)
from .processes import MultiProcessChecks
from .recipes import RecipeChecks


class Conformance(PlacementChecks, ReplicateChecks, AggregationChecks, BatchNormChecks, EvaluationChecks,
                  CheckpointChecks, ParityChecks, AccuracyChecks, RecipeChecks, MultiProcessChecks):
    """Every promise of docs/contract.md; subclass it with ``backend = "name"`` or an ``engine`` fixture."""
