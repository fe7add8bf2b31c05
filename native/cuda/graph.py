"""CUDA graphs: a whole engine execution captured once and replayed with one launch (trtexec's --useCudaGraph).

Capture needs every layer on the GPU (a host layer synchronizes, which a capturing stream refuses) and a warm-up
run first (kernels compiled, weights uploaded, cuDNN plans built). Inputs live in static device buffers the graph
reads; intermediate tensors live in the execution context's arena (planned by the warm-up run, so the graph's
kernels read and write fixed addresses), the rest are the graph's own stream-ordered allocations; outputs are graph
allocations at fixed addresses, valid until the next launch. A new set of input shapes captures a new graph.
"""
from __future__ import annotations

import gc
import time

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.driver import CudaError, _cu, check, context
from native.device_arrays import is_device_array, shape_and_dtype


class CapturedGraph:
    def __init__(self, run, host_feeds: dict, output_names):
        """run(device_feeds) -> env: one execution of the engine (the interpreter's run)."""
        cu = _cu()
        ctx = context()
        self.inputs = {}
        for k, v in host_feeds.items():
            shape, dtype = shape_and_dtype(v)
            buf = GpuArray(shape, dtype)
            _fill(ctx, buf, v)
            self.inputs[k] = buf
        ctx.synchronize()
        check(cu.cuStreamBeginCapture(ctx.stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
              "cuStreamBeginCapture")
        try:
            env = run(dict(self.inputs))
            self.outputs = {name: env[name] for name in output_names}
            del env
            gc.collect()     # intermediates die inside the capture: their frees become graph nodes
        except BaseException as e:
            try:
                graph = check(cu.cuStreamEndCapture(ctx.stream))
                cu.cuGraphDestroy(graph)
            except Exception:
                pass
            if isinstance(e, CudaError) or "capture" in str(e).lower() or "synchron" in str(e).lower():
                raise CudaError(f"CUDA graph capture failed ({e}); a layer that synchronizes (a host layer) cannot "
                                f"be captured: run without CUDA graphs, or check the inspector for host:* "
                                f"tactics") from e
            raise
        graph = check(cu.cuStreamEndCapture(ctx.stream), "cuStreamEndCapture")
        for arr in self.outputs.values():   # graph allocations: the graph frees them at its next launch
            if isinstance(arr, GpuArray):
                arr._owns = False
                if arr.base is not None:
                    arr.base._owns = False
        flags = cu.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
        self.graph = graph
        self.exec = check(cu.cuGraphInstantiate(graph, int(flags)), "cuGraphInstantiate")
        self.key = feeds_key(host_feeds)

    def launch(self, host_feeds: dict, timeline=None) -> dict:
        """Copy the feeds (host arrays or GPU tensors) into the static input buffers and launch; returns the
        (device) outputs."""
        ctx = context()
        for k, v in host_feeds.items():
            _fill(ctx, self.inputs[k], v)
        if timeline is not None:
            timeline.mark("h2d")
        t0 = time.perf_counter()
        check(_cu().cuGraphLaunch(self.exec, ctx.stream), "cuGraphLaunch")
        self.launch_seconds = time.perf_counter() - t0    # the host's enqueue of the compute (bench's enqueue_ms)
        return dict(self.outputs)

    def replay(self, stream):
        """Launch the graph on `stream` with the inputs its static buffers hold (those of the last launch); the
        outputs stay on the device. A graph's launches are ordered after its earlier ones, whatever the stream."""
        check(_cu().cuGraphLaunch(self.exec, stream), "cuGraphLaunch")

    def __del__(self):
        try:
            cu = _cu()
            cu.cuGraphExecDestroy(self.exec)
            cu.cuGraphDestroy(self.graph)
        except Exception:
            pass


def feeds_key(feeds: dict) -> tuple:
    """What a captured graph is specific to: every feed's name, shape and dtype."""
    return tuple((k, *_meta(v)) for k, v in sorted(feeds.items()))


def _meta(v):
    shape, dtype = shape_and_dtype(v)
    return tuple(shape), dtype.str


def _fill(ctx, buf: GpuArray, v):
    """Copy one feed into a device buffer: from the host through the pinned stage, from a GPU tensor directly."""
    if is_device_array(v):
        src = v if isinstance(v, GpuArray) else GpuArray.wrap(v)
        ctx.upload_from_device(buf.ptr, src.ptr, buf.nbytes)
    else:
        ctx.upload(buf.ptr, np.asarray(v))
