"""Options and set-up shared by `debug build` and `debug tactics`: the model's feeds (run's data-loader options),
the comparison tolerances (run's --atol/--rtol/--check-error-stat), and builder configs that share one timing
cache (so only the first build of a search times tactics)."""
from __future__ import annotations

import os

from debugkit.cli import _args
from native.errors import InputFileError, UsageError


def add_check_args(parser):
    _args.add_data_loader_args(parser)
    _args.add_build_args(parser)
    c = parser.add_argument_group("comparison (as in run; the reference is ONNX Runtime)")
    c.add_argument("--atol", nargs="+", default=[], metavar="[NAME:]VALUE", help="absolute tolerance")
    c.add_argument("--rtol", nargs="+", default=[], metavar="[NAME:]VALUE", help="relative tolerance")
    c.add_argument("--check-error-stat", nargs="+", default=[], metavar="[NAME:]STAT",
                   help="elemwise (default), max, mean, median or quantile")
    c.add_argument("--error-quantile", nargs="+", default=[], metavar="[NAME:]Q",
                   help="quantile for --check-error-stat quantile (default 0.99)")
    _args.add_common_args(parser)


def check_model(path):
    if not os.path.exists(path):
        raise InputFileError(f"model file not found: {path}")


def feeds_from_args(args, model_path) -> list:
    """The feed dicts run would generate or load for this model."""
    from backends.runners import load_onnx
    from backends.runners.model import onnx_input_metadata
    from debugkit.data_loader import coerce_feeds
    meta = onnx_input_metadata(load_onnx(model_path))
    if not (getattr(args, "load_inputs", None) or getattr(args, "data_loader_script", None)) and args.iterations < 1:
        raise UsageError("--iterations must be >= 1 for a debug search")
    feeds = [coerce_feeds(f, meta) for f in _args.data_loader(args, meta)]
    if not feeds:
        raise UsageError("the data loader produced no feed: nothing to check a build with")
    return feeds


def tolerances_from_args(args):
    """run's tolerances, or for a reduced-precision build given no comparison options the scale-free default
    (debugkit.debug.checks.ReducedPrecisionCheck), announced on stdout."""
    from debugkit.debug.checks import reduced_precision_default
    criterion = reduced_precision_default(args)
    if criterion is not None:
        print(f"check: {criterion.describe()}", flush=True)
        return criterion
    from debugkit.cli.run import tolerances_from_args
    return tolerances_from_args(args)


def config_factory(args):
    """make_config(reference=False) -> a fresh BuilderConfig from the build options, all sharing one timing
    cache; a reference config drops --tactic-sources. `save()` writes the cache back to --timing-cache."""
    from backends.engine.builder import TimingCache
    from backends.engine.builder.timing_cache_file import save_timing_cache
    first = _args.build_config_from_args(args)
    cache = first.timing_cache if first.timing_cache is not None else TimingCache()
    sources = first.tactic_sources

    def make_config(reference=False):
        config = _args.build_config_from_args(argparse_copy(args, load_tactics=None, save_tactics=None,
                                                            timing_cache=None))
        config.timing_cache = cache
        config.tactic_sources = None if reference else sources
        config.algorithm_selector = None
        return config

    def save():
        if getattr(args, "timing_cache", None):
            save_timing_cache(cache, args.timing_cache, first)

    make_config.save = save
    make_config.cache = cache
    return make_config


def argparse_copy(args, **changes):
    import argparse
    d = dict(vars(args))
    d.update(changes)
    return argparse.Namespace(**d)
