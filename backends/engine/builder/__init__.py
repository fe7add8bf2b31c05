"""The builder: NetworkDefinition + BuilderConfig → optimised engine Graph → plan bytes."""
from backends.engine.builder.config import (  # noqa: F401
    AlgorithmSelector, BuilderConfig, BuilderFlag, MemoryPoolType, OptimizationProfile, ProfilingVerbosity,
    TimingCache)
from backends.engine.builder.builder import Builder  # noqa: F401
