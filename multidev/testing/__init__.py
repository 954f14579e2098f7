"""The conformance kit every engine's tests subclass (see docs/writing-a-backend.md).

Besides the check classes, the small models, batches, comparisons and the
fake engine the kit uses are public, so an engine's own tests can reuse
them; everything an engine's tests need is importable from here.
"""

from multidev.testing._helpers import (LENET, RESNET, assert_states_close, assert_states_equal, batch, conv2d_nchw,
                                       kink_margin, max_rel_error, quick, update_apart)
from multidev.testing.conformance import Conformance
from multidev.testing.data import DataChecks, digits_folder
from multidev.testing.fake import FAULTS, FakeEngine, registered
from multidev.testing.images import as_uint8_images, write_images
from multidev.testing.kit import (ACCURACY_FLOOR, CROSS_ENGINE_RTOL, FLOAT64_RTOL, KINK_SAFETY, SAME_ENGINE_RTOL,
                                  AccuracyChecks, AggregationChecks, BatchNormChecks, CheckpointChecks, EngineFixtures,
                                  EvaluationChecks, ParityChecks, PlacementChecks, ReplicateChecks, settled_accuracy)
from multidev.testing.layers import LAYER_CASES, LayerChecks, masked, random_definition, readme_definition
from multidev.testing.pending import PendingChecks
from multidev.testing.processes import MultiProcessChecks, free_port
from multidev.testing.recipes import BF16_STEP_RTOL, RecipeChecks
from multidev.testing.sharding import SHARDED, ShardingChecks

__all__ = [
    # what an engine's test class subclasses: every check, or one promise's
    "Conformance", "EngineFixtures", "AccuracyChecks", "AggregationChecks", "BatchNormChecks", "CheckpointChecks",
    "DataChecks", "EvaluationChecks", "LayerChecks", "MultiProcessChecks", "ParityChecks", "PendingChecks",
    "PlacementChecks", "RecipeChecks", "ReplicateChecks", "ShardingChecks",
    # the tolerances and floors the contract holds engines to
    "ACCURACY_FLOOR", "BF16_STEP_RTOL", "CROSS_ENGINE_RTOL", "FLOAT64_RTOL", "KINK_SAFETY", "SAME_ENGINE_RTOL",
    # models, definitions and data the checks run
    "LAYER_CASES", "LENET", "RESNET", "SHARDED", "batch", "digits_folder", "masked", "random_definition",
    "readme_definition", "as_uint8_images", "write_images",
    # comparisons and the other helpers of the checks
    "assert_states_close", "assert_states_equal", "conv2d_nchw", "free_port", "kink_margin", "max_rel_error",
    "quick", "settled_accuracy", "update_apart",
    # the reference arithmetic as an engine, faults on request
    "FAULTS", "FakeEngine", "registered",
]
