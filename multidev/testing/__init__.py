"""The conformance kit every engine's tests subclass (see docs/writing-a-backend.md)."""

from .kit import (CROSS_ENGINE_RTOL, SAME_ENGINE_RTOL, AggregationChecks, BatchNormChecks, CheckpointChecks,
                  Conformance, EngineFixtures, ErrorChecks, EvaluationChecks, ReplicateChecks, SplitChecks)

__all__ = ["AggregationChecks", "BatchNormChecks", "CROSS_ENGINE_RTOL", "CheckpointChecks", "Conformance",
           "EngineFixtures", "ErrorChecks", "EvaluationChecks", "ReplicateChecks", "SAME_ENGINE_RTOL",
           "SplitChecks"]
