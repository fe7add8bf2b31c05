"""Calibration: run the network in FP32 over the calibrator's batches and turn each tensor's statistics into an
INT8 scale (TensorRT's step 1 and 2; step 3, building with the scales, is the INT8 precision pass).

The batches are read once and kept (they are only the network inputs); pass 1 takes every tensor's absolute maximum,
pass 2 (histogram algorithms only) its |x| histogram over [0, amax]. The graph is the builder's working graph as it
is at the call: before fusion for entropy2 / minmax (every ONNX tensor gets a scale, and the cache is portable),
after fusion for entropy / percentile (only the tensors the fused engine still has).
"""
from __future__ import annotations

import numpy as np

from backends.engine.calibration import cache as cache_format
from backends.engine.calibration.calibrator import BEFORE_FUSION, algorithm_of, percentile_of
from backends.engine.calibration.histogram import TensorStats, threshold
from backends.engine.runtime.executor import GraphExecutor
from native.device import get_device
from native.errors import CalibrationError, DebugkitError


def _progress(iterable, total, desc):
    try:
        from native.progress import progress
    except ImportError:   # the progress helper is optional
        return iterable
    return progress(iterable, total=total, desc=desc, unit="batch")


def read_batches(calibrator, graph, profile=None) -> list:
    """The calibrator's batches as feed dicts, checked against the network inputs and the calibration profile."""
    names = [t.name for t in graph.inputs]
    calibrator.get_batch_size()
    batches = []
    while True:
        b = calibrator.get_batch(names)
        if b is None:
            break
        if isinstance(b, dict):
            b = [b[n] for n in names]
        if len(b) != len(names):
            raise CalibrationError(f"calibration batch {len(batches)} has {len(b)} arrays for {len(names)} inputs "
                                   f"{names}")
        feed = {}
        for t, a in zip(graph.inputs, b):
            a = np.asarray(a)
            if t.dtype and np.dtype(t.dtype).kind == "f" and a.dtype != np.dtype(t.dtype):
                a = a.astype(t.dtype)
            if t.shape is not None and (len(t.shape) != a.ndim or any(d >= 0 and d != s for d, s in zip(t.shape, a.shape))):
                raise CalibrationError(f"calibration batch {len(batches)}: input '{t.name}' has shape "
                                       f"{list(a.shape)}, the network expects {t.shape}")
            if profile is not None:
                try:
                    profile.check(t.name, a.shape)
                except DebugkitError as e:
                    raise CalibrationError(f"calibration batch {len(batches)}: {e}") from None
            feed[t.name] = a
        batches.append(feed)
    if not batches:
        raise CalibrationError("the INT8 calibrator gave no batches (get_batch returned None at once); give it "
                               "calibration data or a calibration cache")
    return batches


def collect_scales(graph, batches, algorithm, device="cpu", percentile=99.99, logger=None) -> dict:
    """{tensor: scale} for every float tensor the graph computes (and its inputs), over `batches`."""
    executor = GraphExecutor(graph, device, keep_all=True)
    dev = get_device(device)     # its tensors' statistics are taken where they are (no download per tensor)
    consts = set(executor.consts) | {o for n in graph.nodes if n.kind == "Constant" for o in n.outputs}
    order = [t.name for t in graph.inputs] + [o for n in graph.nodes for o in n.outputs]
    stats: dict[str, TensorStats] = {}
    passes = ["range"] + ([] if algorithm == "minmax" else ["histogram"])
    for which in passes:
        for feed in _progress(batches, len(batches), f"calibration ({algorithm}, {which})"):
            env = executor.run(feed)
            for name in order:
                v = env.get(name)
                if name in consts or not hasattr(v, "size") or np.dtype(getattr(v, "dtype", object)).kind != "f":
                    continue
                s = stats.setdefault(name, TensorStats())
                if which == "range":
                    s.observe_range(v, dev)
                else:
                    s.observe_histogram(v, dev)
            del env
    scales = {}
    for name in order:
        s = stats.get(name)
        if s is None:
            continue
        t = threshold(s, algorithm, percentile)
        if t <= 0:
            if logger is not None:
                logger.warning(f"Tensor {name} is uniformly zero (over {len(batches)} calibration batches); fine for a "
                               f"constant zero or a ReLU of negative inputs, otherwise check the layers before it "
                               f"and the calibration data")
            continue
        scales[name] = float(np.float32(t) / np.float32(127.0))
    return scales


def calibrate(graph, config, logger, stage: str):
    """Scales from config.int8_calibrator when its algorithm calibrates at `stage` ("before_fusion" |
    "after_fusion"): read from its cache when it has one (no batch is read), else computed and written back.
    None when there is no calibrator or it calibrates at the other stage."""
    cal = config.int8_calibrator
    if cal is None:
        return None
    algorithm = algorithm_of(cal)
    if (stage == "before_fusion") != (algorithm in BEFORE_FUSION):
        return None
    data = cal.read_calibration_cache()
    if data:
        source = getattr(cal, "cache", None) or "calibration cache"
        cached_algo, scales = cache_format.read_cache(data, source)
        want = cache_format.ALGORITHM_NAMES[algorithm]
        if cached_algo != want:
            logger.warning(f"{source} was written by {cached_algo}, the calibrator uses {want}; using its scales")
        logger.info(f"INT8: {len(scales)} scales read from {source}; no calibration run")
        config.calibration_report = {"source": "cache", "tensors": len(scales), "batches": 0}
        return scales
    profile = config.calibration_profile or (config.profiles[0] if config.profiles else None)
    batches = read_batches(cal, graph, profile)
    logger.info(f"INT8 calibration ({algorithm}, {stage.replace('_', ' ')}): {len(batches)} batches")
    scales = collect_scales(graph, batches, algorithm, config.device.calibrates_on or config.device,
                            percentile_of(cal), logger)
    cal.write_calibration_cache(cache_format.write_cache(scales, algorithm))
    config.calibration_report = {"source": "calibration", "tensors": len(scales), "batches": len(batches)}
    return scales
