"""INT8 calibration options of `run` and `convert`: --calibration-cache, --calibration-algorithm.

With --int8 the engine build calibrates on the same data the run feeds (the DataLoader: --data-loader-script,
--load-inputs, or seeded random data from --seed/--val-range/--iterations/--input-shapes), unless the calibration
cache exists: then its scales are used and no batch is read. A fresh calibration writes the cache.
"""
from __future__ import annotations

ALGORITHMS = ("entropy2", "minmax", "entropy", "percentile")


def add_calibration_args(parser):
    g = parser.add_argument_group("INT8 calibration")
    g.add_argument("--calibration-cache", metavar="FILE",
                   help="INT8 calibration cache (TensorRT's text format): read when it exists (no calibration), "
                        "written after calibrating otherwise")
    g.add_argument("--calibration-algorithm", choices=ALGORITHMS, default="entropy2",
                   help="how scales are derived from the calibration data (default entropy2, as TensorRT's "
                        "IInt8EntropyCalibrator2)")
    g.add_argument("--calibration-percentile", type=float, default=99.99, metavar="P",
                   help="for --calibration-algorithm percentile: the percentile of |x| kept (default 99.99)")
    parser.add_argument_group("INT8 Q/DQ models").add_argument(
        "--qdq-emulation", choices=["onnxruntime-x86"], default=None,
        help="run a Q/DQ model as ONNX Runtime's x86-64 CPU EP does (the Q/DQ groups it keeps in FP32 stay FP32, "
             "summed in MLAS's order), to compare with it bit for bit; reproduces onnxruntime 1.30.0 and 1.32.0 "
             "(verified; other releases may differ by a rounding step); its fused integer kernels are not emulated "
             "(see docs/PRECISION.md); default: TensorRT's fusion, every group INT8")
    return g


def add_calibration_data_args(parser):
    """For subtools without `run`'s data loader options (convert): the same options, for calibration data."""
    have = set(parser._option_string_actions)
    data = parser.add_argument_group("INT8 calibration data (the DataLoader of `run`)")
    if "--seed" not in have:
        data.add_argument("--seed", type=int, default=1, help="seed for generated calibration inputs (default 1)")
    if "--val-range" not in have:
        data.add_argument("--val-range", nargs="+", default=[], metavar="[LO,HI]|NAME:[LO,HI]",
                          help="value range of generated calibration inputs (default [0,1])")
    if "--iterations" not in have:
        data.add_argument("--iterations", type=int, default=1, help="number of calibration batches (default 1)")
    if "--data-loader-script" not in have:
        data.add_argument("--data-loader-script", metavar="FILE.py[:FUNC]",
                          help="a Python function that returns or yields {input: array} calibration batches")
    if "--load-inputs" not in have:
        data.add_argument("--load-inputs", metavar="FILE.h5|FILE.json", help="calibration inputs saved by --save-inputs")
    return data


def calibration_loader(args, metadata):
    """The DataLoader `run` would use, over the model's inputs."""
    from debugkit.cli import _args
    from debugkit.data_loader import DataLoader
    dl = _args.data_loader(args, metadata)
    if isinstance(dl, DataLoader):
        from native.logger import G_LOGGER
        G_LOGGER.warning("INT8 calibration on seeded random data: the scales fit that data, not your inputs. Pass "
                         "real samples with --data-loader-script or --load-inputs (and more with --iterations)")
    return dl


class _LazyBatches:
    """The calibration batches, made only when the builder asks for them (never when a cache is read)."""

    def __init__(self, args):
        self.args = args

    def __iter__(self):
        from backends.runners import load_onnx
        from backends.runners.model import onnx_input_metadata
        from debugkit.data_loader import coerce_feeds
        metadata = onnx_input_metadata(load_onnx(self.args.model))
        for feed in calibration_loader(self.args, metadata):
            yield coerce_feeds(feed, metadata)


def apply_calibration_args(args, config):
    """Attach a Calibrator to an INT8 build config (no-op without --int8); set --qdq-emulation."""
    config.qdq_emulation = getattr(args, "qdq_emulation", None)
    if not getattr(args, "int8", False):
        if getattr(args, "calibration_cache", None):
            from native.logger import G_LOGGER
            G_LOGGER.warning("--calibration-cache has no effect without --int8")
        return config
    from backends.engine import Calibrator
    config.int8_calibrator = Calibrator(_LazyBatches(args), algorithm=args.calibration_algorithm,
                                        cache=args.calibration_cache, percentile=args.calibration_percentile)
    return config
