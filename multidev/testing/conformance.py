"""Every check class of the kit in one: what an engine's tests subclass."""

from multidev.testing.data import DataChecks
from multidev.testing.kit import (AccuracyChecks, AggregationChecks, BatchNormChecks, CheckpointChecks,
                                  EvaluationChecks, ParityChecks, PlacementChecks, ReplicateChecks)
from multidev.testing.layers import LayerChecks
from multidev.testing.pending import PendingChecks
from multidev.testing.processes import MultiProcessChecks
from multidev.testing.recipes import RecipeChecks
from multidev.testing.sharding import ShardingChecks


class Conformance(PlacementChecks, ReplicateChecks, AggregationChecks, BatchNormChecks, EvaluationChecks,
                  CheckpointChecks, ParityChecks, AccuracyChecks, RecipeChecks, MultiProcessChecks, LayerChecks,
                  DataChecks, PendingChecks, ShardingChecks):
    """Every promise of docs/contract.md; subclass it with ``backend = "name"`` or an ``engine`` fixture."""
