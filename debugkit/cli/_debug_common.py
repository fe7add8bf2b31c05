"""Options and set-up shared by `debug build` and `debug tactics`: the model's feeds (run's data-loader options),
the comparison tolerances (run's --atol/--rtol/--check-error-stat), and builder configs that share one timing
cache (so only the first build of a search times tactics)."""
from __future__ import annotations

import os

from native.errors import InputFileError, UsageError


def add_check_args(parser):
    """The data, build and comparison groups (debugkit/options.py) and the logging options."""
    from debugkit.options import add_groups
    add_groups(parser, "data", "build", "compare", "logging")


def options(args, command):
    from debugkit.options import Options
    return Options.from_args(args, command)


def check_model(path):
    if not os.path.exists(path):
        raise InputFileError(f"model file not found: {path}")


def feeds_from_args(args, model_path) -> list:
    """The feed dicts run would generate or load for this model (at least one)."""
    from backends.runners import load_onnx
    from backends.runners.model import onnx_input_metadata
    from debugkit.options import DataOptions
    data = DataOptions.from_args(args)
    if not data.load_inputs and not data.data_loader_script and data.iterations < 1:
        raise UsageError("--iterations must be >= 1 for a debug search")
    return data.feeds(onnx_input_metadata(load_onnx(model_path)))


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
    opts = options(args, getattr(args, "subtool", ""))
    model_path = getattr(args, "model", None)
    first = opts.build.builder_config(data=opts.data, model_path=model_path, fingerprint=opts.fingerprint())
    cache = first.timing_cache if first.timing_cache is not None else TimingCache()
    sources = first.tactic_sources
    per_build = opts.build.replace(load_tactics=None, save_tactics=None, timing_cache=None)

    def make_config(reference=False):
        config = per_build.builder_config(data=opts.data, model_path=model_path, fingerprint=opts.fingerprint())
        config.timing_cache = cache
        config.tactic_sources = None if reference else sources
        config.algorithm_selector = None
        return config

    def save():
        if opts.build.timing_cache:
            save_timing_cache(cache, opts.build.timing_cache, first)

    make_config.save = save
    make_config.cache = cache
    return make_config


def refuse_replay_options(opts, command, instead):
    """A build option this search cannot honour is refused (exit 2), never dropped: --load-tactics/--save-tactics
    name one tactic assignment, and the search makes its own."""
    given = [f for f, v in (("--load-tactics", opts.build.load_tactics), ("--save-tactics", opts.build.save_tactics))
             if v]
    if given:
        raise UsageError(f"{command} makes its own tactic assignments, so {' and '.join(given)} cannot apply; "
                         f"{instead}")
