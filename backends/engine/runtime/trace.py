"""Timelines of executions (trtexec's --exportTimes / Nsight's view, as a Chrome trace): `bench --timeline FILE`.

A `TraceRecorder` is set as an execution context's profiler. For every execute it records spans — the copies in
(H2D), each layer, the host's wait for the device (sync) and the copies out (D2H) — each twice: when the host
enqueued it (host clock) and when the device ran it (the device's trace clock: native/trace_clock.py; CUDA events
on the stream, no synchronisation between layers). `chrome_trace()` turns them into the Trace Event Format that
chrome://tracing and Perfetto (ui.perfetto.dev) open: one process, a "host (enqueue)" thread and a
"<device> (execution)" thread, "X" (complete) events in microseconds, each layer's tactic, precision and ONNX
nodes in its args. A gap on the device thread is the device idle; a host thread that is still enqueueing while
the device waits is an enqueue-bound model.
"""
from __future__ import annotations

import time

from backends.engine.runtime.profiler import IProfiler

HOST_TID, DEVICE_TID = 1, 2


class TraceRecorder(IProfiler):
    """Spans of every execute, on the host and the device clock (see the module's doc)."""

    def __init__(self, device):
        self.device = device
        self.clock = device.trace_clock()
        self.inferences: list[dict] = []   # {"host": (t0, t1), "spans": [(name, cat, h0, h1, d0, d1)]}
        self._open = None
        self._marks = []

    # the execution context's hooks -----------------------------------------------------------------------------
    def start_inference(self):
        self._open = {"host": [time.perf_counter(), None], "spans": []}
        self._marks = []

    def begin(self, name: str, cat: str):
        return (name, cat, time.perf_counter(), self._mark())

    def end(self, token):
        name, cat, h0, m0 = token
        m1 = self._mark()
        self._open["spans"].append([name, cat, h0, time.perf_counter(), m0, m1])

    def end_inference(self):
        """Resolve the device marks (waits for the last) and file the inference."""
        inf, self._open = self._open, None
        if inf is None:
            return
        inf["host"][1] = time.perf_counter()
        seconds = self.clock.device_seconds(self._marks)
        for s in inf["spans"]:
            s[4], s[5] = seconds[s[4]], seconds[s[5]]
        self.inferences.append(inf)

    def report_layer_time(self, layer_name, ms):   # a caller that only knows IProfiler: a span ending now
        now = time.perf_counter()
        if self._open is None:
            self.start_inference()
        self._open["spans"].append([layer_name, "layer", now - ms / 1e3, now, now - ms / 1e3, now])

    def _mark(self):
        self._marks.append(self.clock.mark())
        return len(self._marks) - 1

    # summaries ---------------------------------------------------------------------------------------------------
    def layer_seconds(self, index: int) -> float:
        """Seconds the device spent in layers during inference `index`."""
        return sum(s[5] - s[4] for s in self.inferences[index]["spans"] if s[1] == "layer")


def chrome_trace(recorder: TraceRecorder, engine=None, meta: dict | None = None) -> dict:
    """The recorded inferences as a Chrome trace ({"traceEvents": [...], ...}); times from the first inference."""
    infs = recorder.inferences
    t0 = min((i["host"][0] for i in infs), default=0.0)
    us = lambda t: round((t - t0) * 1e6, 3)   # noqa: E731
    info = {}
    if engine is not None:
        for n in engine.graph.nodes:
            info[n.name] = {"kind": n.kind, "precision": n.precision, "tactic": n.tactic_name,
                            "onnx_nodes": list(n.source_nodes or [])}
    dev = str(recorder.device)
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"debugkit engine on {dev}"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": HOST_TID, "args": {"name": "host (enqueue)"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": DEVICE_TID, "args": {"name": f"{dev} (execution)"}}]
    for k, inf in enumerate(infs):
        h0, h1 = inf["host"]
        events.append({"ph": "X", "name": f"execute #{k}", "cat": "inference", "pid": 1, "tid": HOST_TID,
                       "ts": us(h0), "dur": us(h1) - us(h0), "args": {"inference": k}})
        for name, cat, a0, a1, d0, d1 in inf["spans"]:
            args = dict(info.get(name, {}), inference=k) if cat == "layer" else {"inference": k}
            events.append({"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": HOST_TID, "ts": us(a0),
                           "dur": max(us(a1) - us(a0), 0.0), "args": dict(args, clock="host (enqueue)")})
            if cat != "sync":     # the wait is the host's; the device has no span for it
                events.append({"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": DEVICE_TID, "ts": us(d0),
                               "dur": max(us(d1) - us(d0), 0.0), "args": dict(args, clock=f"{dev} (execution)")})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": dict(meta or {}, device=dev, inferences=len(infs),
                              clocks="host: perf_counter at enqueue; device: the device's trace clock placed on "
                                     "the host scale (native/trace_clock.py)")}
