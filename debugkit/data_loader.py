"""DataLoader: the feeds for each iteration — generated (seeded, per-input ranges and shapes), from a user script,
or loaded from a saved inputs file.

Generated values are deterministic per (seed, iteration, input name), so two runs with the same options see the
same data and every runner of one run sees identical feeds.
"""
from __future__ import annotations

import importlib.util
import os
import zlib

import numpy as np

from native.errors import FeedError, InputFileError, ShapeError, UsageError, user_code_exit
from native.logger import G_LOGGER

DEFAULT_SEED = 1
DEFAULT_RANGE = (0.0, 1.0)
# debugkit: one generator per (seed, iteration, input name), so adding an input changes no other input's values.
# polygraphy: the values Polygraphy's default data loader makes (numpy RandomState(seed + iteration), inputs in model
# order; floats random_sample * (hi - lo) + lo, ints randint over [lo, hi]), so a golden written here is
# reproduced by `polygraphy run` with the same --seed and --val-range.
GENERATORS = ("debugkit", "polygraphy")


def numeric_kind(dtype):
    """(kind, info) of a dtype, seeing through ml_dtypes' types (whose numpy kind is 'V'): kind is 'b', 'i', 'u',
    'f', 'c' or '' (strings, objects), info its iinfo/finfo (None for bool/complex/other)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return dtype.kind, np.iinfo(dtype)
    if dtype.kind == "f" and dtype.name in ("float16", "float32", "float64", "longdouble"):
        return "f", np.finfo(dtype)
    if dtype.kind in "bc":
        return dtype.kind, None
    if dtype.kind in "fV":
        try:
            import ml_dtypes
        except ImportError:
            return "", None
        try:
            info = ml_dtypes.iinfo(dtype)
            return ("i" if int(info.min) < 0 else "u"), info
        except (ValueError, TypeError):
            pass
        try:
            return "f", ml_dtypes.finfo(dtype)
        except (ValueError, TypeError):
            pass
    return "", None


class DataLoader:
    """Generates `iterations` feed dicts for the given input metadata ({name: TensorMeta}).

    val_ranges: {name: (lo, hi)} with "" as the default for every input; ints are drawn from [lo, hi] inclusive,
    bools are random. shapes: {name: shape} for dynamic dims (unset dynamic dims become 1, with a warning).
    """

    def __init__(self, seed=DEFAULT_SEED, iterations=1, val_ranges=None, shapes=None, logger=None,
                 generator="debugkit"):
        if generator not in GENERATORS:
            raise UsageError(f"unknown data generator '{generator}'; choose from {list(GENERATORS)}")
        self.generator = generator
        self.seed = int(seed)
        self.iterations = int(iterations)
        self.val_ranges = dict(val_ranges or {})
        self.shapes = {k: tuple(int(d) for d in v) for k, v in (shapes or {}).items()}
        self.input_metadata = None
        self.logger = logger or G_LOGGER
        self._warned = set()

    @property
    def defaulted_inputs(self) -> list[str]:
        """Inputs whose dynamic dims were set to 1 because --input-shapes did not give them."""
        return sorted(self._warned)

    def check_names(self, metadata):
        """Raise for option names that are not model inputs (a typo should not silently do nothing)."""
        for what, names in (("--input-shapes", self.shapes), ("--val-range", self.val_ranges)):
            unknown = [n for n in names if n and n not in metadata]
            if unknown:
                from debugkit.cli._args import check_input_names
                check_input_names(unknown, metadata, what)

    def shape_for(self, meta) -> tuple:
        if meta.name in self.shapes:
            shape = self.shapes[meta.name]
            if meta.shape is not None:
                if len(shape) != len(meta.shape):
                    raise ShapeError(f"--input-shapes {meta.name}:{list(shape)} has rank {len(shape)}, but the model "
                                     f"input has rank {len(meta.shape)} (shape {list(meta.shape)})")
                for i, (want, got) in enumerate(zip(meta.shape, shape)):
                    if isinstance(want, int) and want >= 0 and want != got:
                        raise ShapeError(f"--input-shapes {meta.name}:{list(shape)} sets dim {i} to {got}, but the "
                                         f"model fixes it at {want} (shape {list(meta.shape)})")
            return shape
        if meta.shape is None:
            raise ShapeError(f"input '{meta.name}' has unknown rank; give its shape with --input-shapes "
                             f"{meta.name}:[...]")
        if meta.is_dynamic() and meta.name not in self._warned:
            self._warned.add(meta.name)
            self.logger.warning(f"input '{meta.name}' has dynamic shape {list(meta.shape)}; using 1 for dynamic dims "
                                f"(set them with --input-shapes {meta.name}:[...])")
        return tuple(d if isinstance(d, int) and d >= 0 else 1 for d in meta.shape)

    def range_for(self, name):
        lo, hi = self.val_ranges.get(name, self.val_ranges.get("", DEFAULT_RANGE))
        if lo > hi:
            raise UsageError(f"value range for '{name}' is empty: [{lo}, {hi}]")
        return lo, hi

    def generate(self, meta, iteration) -> np.ndarray:
        """Values of the input's own dtype (ml_dtypes' int4/uint4/float4/float8/bfloat16 too, complex as well): a
        value range wider than the type is clipped to it, never wrapped or fed as another type."""
        shape = self.shape_for(meta)
        rng = np.random.default_rng([self.seed, iteration, zlib.crc32(meta.name.encode())])
        dtype = np.dtype(meta.dtype)
        lo, hi = self.range_for(meta.name)
        kind, info = numeric_kind(dtype)
        if kind == "b":
            return rng.integers(0, 2, shape).astype(bool)
        if kind in "iu":
            lo, hi = max(int(np.ceil(lo)), int(info.min)), min(int(np.floor(hi)), int(info.max))
            if lo > hi:
                raise UsageError(f"value range for '{meta.name}' holds no {dtype.name} value "
                                 f"({dtype.name} spans [{int(info.min)}, {int(info.max)}])")
            return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)
        if kind == "f":
            top = float(info.max)
            return np.clip(rng.uniform(lo, hi, shape), -top, top).astype(dtype)
        if kind == "c":
            return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dtype)
        raise FeedError(f"cannot generate data for input '{meta.name}' of dtype {dtype.name}; supply it with "
                        f"--data-loader-script or --load-inputs")

    def __len__(self):
        return self.iterations

    def __iter__(self):
        if self.input_metadata is None:
            raise UsageError("DataLoader.input_metadata must be set before iterating")
        self.check_names(self.input_metadata)
        for it in range(self.iterations):
            if self.generator == "polygraphy":
                rng = np.random.RandomState(self.seed + it)
                yield {name: self._like_polygraphy(rng, meta) for name, meta in self.input_metadata.items()}
            else:
                yield {name: self.generate(meta, it) for name, meta in self.input_metadata.items()}

    def _like_polygraphy(self, rng, meta) -> np.ndarray:
        """The next input from Polygraphy's sequence (one RandomState per iteration, inputs in order)."""
        shape = self.shape_for(meta)
        dtype = np.dtype(meta.dtype)
        lo, hi = self.range_for(meta.name)
        if dtype.kind in "iub":
            cast = bool if dtype.kind == "b" else int
            return np.array(rng.randint(low=cast(lo), high=cast(hi) + 1, size=shape, dtype=dtype))
        if dtype.kind == "f":
            return np.array((rng.random_sample(size=shape) * (hi - lo) + lo).astype(dtype))
        raise FeedError(f"cannot generate data for input '{meta.name}' of dtype {dtype.name}; supply it with "
                        f"--data-loader-script or --load-inputs")


class ScriptDataLoader:
    """Feeds from a user function: `--data-loader-script file.py:func` (func defaults to `load_data`).

    The function may return or yield dicts {input name: array}; a list of dicts works too.
    """

    def __init__(self, spec: str):
        path, _, func = spec.partition(":")
        func = func or "load_data"
        if not os.path.isfile(path):
            raise InputFileError(f"data loader script not found: {path}")
        module_spec = importlib.util.spec_from_file_location("debugkit_user_data_loader", path)
        module = importlib.util.module_from_spec(module_spec)
        try:
            module_spec.loader.exec_module(module)
        except (SystemExit, KeyboardInterrupt) as e:
            raise user_code_exit(f"--data-loader-script {path} (at import)", e) from None
        except Exception as e:
            raise InputFileError(f"data loader script {path} failed to import: {type(e).__name__}: {e}") from None
        if not callable(getattr(module, func, None)):
            raise UsageError(f"data loader script {path} has no function '{func}'")
        self.func = getattr(module, func)
        self.spec = spec
        self.input_metadata = None

    def __iter__(self):
        """The function's feeds; sys.exit() / KeyboardInterrupt inside it name the script (UserCodeExit)."""
        try:
            result = self.func()
            if isinstance(result, dict):
                result = [result]
            it = iter(result)
        except (SystemExit, KeyboardInterrupt) as e:
            raise user_code_exit(f"--data-loader-script {self.spec}", e) from None
        except Exception as e:
            raise FeedError(f"--data-loader-script {self.spec} failed: {type(e).__name__}: {e}") from None
        while True:
            try:
                feeds = next(it)
            except StopIteration:
                return
            except (SystemExit, KeyboardInterrupt) as e:
                raise user_code_exit(f"--data-loader-script {self.spec}", e) from None
            except Exception as e:
                raise FeedError(f"--data-loader-script {self.spec} failed: {type(e).__name__}: {e}") from None
            if not isinstance(feeds, dict):
                raise FeedError(f"data loader {self.spec} yielded {type(feeds).__name__}, expected a dict "
                                f"{{input name: array}}")
            yield {k: np.asarray(v) for k, v in feeds.items()}


class SavedDataLoader:
    """Feeds read back from an inputs file written by --save-inputs: ours (HDF5, streamed one iteration at a time)
    or Polygraphy's JSON."""

    def __init__(self, path: str):
        from debugkit.data_file import open_data_file
        self.file = open_data_file(path, expect_kind="inputs")
        self.input_metadata = None

    def __len__(self):
        return len(self.file.iterations())

    def __iter__(self):
        for it in self.file.iterations():
            yield self.file.read_iteration(it)


def coerce_feeds(feeds: dict, metadata: dict) -> dict:
    """Check names and shapes against the model, cast dtypes where the value is safely castable."""
    unknown = [k for k in feeds if k not in metadata]
    if unknown:
        raise FeedError(f"unknown input name(s) {unknown}; the model's inputs are {list(metadata)}")
    missing = [k for k in metadata if k not in feeds]
    if missing:
        raise FeedError(f"missing feed(s) for input(s) {missing}")
    out = {}
    for name, meta in metadata.items():
        v = np.asarray(feeds[name])
        if meta.shape is not None:
            if v.ndim != len(meta.shape) or any(isinstance(d, int) and d >= 0 and d != s
                                                for d, s in zip(meta.shape, v.shape)):
                raise ShapeError(f"input '{name}' has shape {list(v.shape)}, which does not fit the model's shape "
                                 f"{list(meta.shape)}")
        if v.dtype != meta.dtype and meta.dtype != np.dtype(object):
            if not np.can_cast(v.dtype, meta.dtype, casting="same_kind") and v.dtype.kind != meta.dtype.kind:
                raise FeedError(f"input '{name}' has dtype {v.dtype.name}, the model expects {meta.dtype.name}")
            v = v.astype(meta.dtype)
        out[name] = v
    return out
