"""Comparison: compare functions, the Comparator (streams runners' results through them), first divergence."""
from debugkit.compare.comparator import Comparator, LiveSource, LoadedSource, PairResult, RunSummary  # noqa: F401
from debugkit.compare.divergence import Divergence, first_divergence  # noqa: F401
from debugkit.compare.errorstats import NonFiniteCounts, SideCounts  # noqa: F401
from debugkit.compare.nonfinite import NonFinite  # noqa: F401
from debugkit.compare.funcs import (  # noqa: F401
    OutputResult, Tolerance, Tolerances, align_shapes, compare_cosine, compare_indices, compare_l2, compare_psnr,
    compare_simple, compare_snr, default_tolerance, validate)
