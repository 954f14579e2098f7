"""The conformance kit every engine's tests subclass (see docs/writing-a-backend.md).

Besides the check classes, the small models, batches and comparisons the kit
uses are public, so an engine's own tests can reuse them.
"""

from multidev.testing._helpers import (LENET, RESNET, assert_states_close, assert_states_equal, batch, conv2d_nchw,
                                       kink_margin, max_rel_error)
from multidev.testing.conformance import Conformance
from multidev.testing.kit import (ACCURACY_FLOOR, CROSS_ENGINE_RTOL, FLOAT64_RTOL, KINK_SAFETY, SAME_ENGINE_RTOL,
                                  AccuracyChecks, AggregationChecks, BatchNormChecks, CheckpointChecks, EngineFixtures,
                                  EvaluationChecks, ParityChecks, PlacementChecks, ReplicateChecks, settled_accuracy)
from multidev.testing.processes import MultiProcessChecks
from multidev.testing.recipes import RecipeChecks

__all__ = ["ACCURACY_FLOOR", "AccuracyChecks", "AggregationChecks", "BatchNormChecks", "CROSS_ENGINE_RTOL",
           "CheckpointChecks", "Conformance", "EngineFixtures", "EvaluationChecks", "FLOAT64_RTOL", "KINK_SAFETY",
           "MultiProcessChecks", "RecipeChecks",
           "LENET", "ParityChecks", "PlacementChecks", "RESNET", "ReplicateChecks", "SAME_ENGINE_RTOL",
           "assert_states_close", "assert_states_equal", "batch", "conv2d_nchw", "kink_margin", "max_rel_error",
           "settled_accuracy"]
