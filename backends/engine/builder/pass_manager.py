"""The pass manager: runs the builder's passes, in a declared order, with instruments around each.

A pass is a plain function `f(graph, ctx) -> PassResult` (an int is accepted as the number of rewrites). One
`PassContext` carries what every pass may read: the builder config, the target device's name, the reference device
folding evaluates on ("cpu"), the logger, and a scratch dict for results that later passes read (the timing run's
tensor values, for instance). The order is a list of `Pass(name, fn, when)` (builder/pipeline.py).

Instruments see every pass: `before(name, graph, ctx)` and `after(name, graph, ctx, result, seconds)`. Built in:
timing (per-pass milliseconds, logged and kept in ctx.timings), verification (Graph.lint() after every pass; on
when DEBUGKIT_LINT=1, in tests and debug builds) and dumps (a text listing of the graph before and after each pass
into a directory). An exception a pass raises comes out naming the pass.
"""
from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from backends.engine.engine_graph import ACTIVE_PASS
from native.config import settings
from native.device import Device, get_device
from native.errors import BuildError, DebugkitError
from native.logger import G_LOGGER


@dataclass
class PassResult:
    changed: int = 0          # rewrites made (0: the graph is as it was)
    note: str = ""            # one line for the verbose log


@dataclass
class PassContext:
    config: object
    device: Device | None = None    # the target (a name is resolved); None: the config's device
    logger: object = G_LOGGER
    reference_device: Device | str = "cpu"   # constant and shape folding evaluate here, whatever `device` is
    timing_feeds: dict | None = None
    state: dict = field(default_factory=dict)     # results passes hand to later passes
    timings: dict = field(default_factory=dict)   # pass name -> ms (the timing instrument)

    def __post_init__(self):
        self.device = get_device(self.device if self.device is not None else self.config.device)
        self.reference_device = get_device(self.reference_device)


@dataclass
class Pass:
    name: str
    fn: Callable
    when: Callable | None = None    # when(config) -> bool; None: always

    def enabled(self, config) -> bool:
        return self.when is None or bool(self.when(config))


class TimingInstrument:
    """Milliseconds per pass, into ctx.timings and the verbose log."""

    def before(self, name, graph, ctx):
        pass

    def __init__(self):
        self.ms = {}

    def after(self, name, graph, ctx, result, seconds):
        ctx.timings[name] = self.ms[name] = round(ctx.timings.get(name, 0.0) + seconds * 1e3, 3)


class VerifyInstrument:
    """Graph.lint() after every pass: a pass that breaks an invariant is named at once, not three passes later."""

    def __init__(self):
        self.verified = []

    def before(self, name, graph, ctx):
        pass

    def after(self, name, graph, ctx, result, seconds):
        graph.lint(where=f"pass '{name}'", device=ctx.device)
        self.verified.append(name)


class DumpInstrument:
    """Writes `<NN>-<pass>-before.txt` / `-after.txt` listings of the graph into `directory`."""

    def __init__(self, directory):
        self.directory = directory
        self.count = 0
        os.makedirs(directory, exist_ok=True)

    def _write(self, name, graph, when):
        safe = "".join(c if c.isalnum() else "_" for c in name)
        from native.files import write_text
        write_text(os.path.join(self.directory, f"{self.count:02d}-{safe}-{when}.txt"), dump_graph(graph),
                   "graph dump (DEBUGKIT_DUMP_PASSES)", streamable=False)

    def before(self, name, graph, ctx):
        self.count += 1
        self._write(name, graph, "before")

    def after(self, name, graph, ctx, result, seconds):
        self._write(name, graph, "after")


def dump_graph(graph) -> str:
    """A readable listing: one line per layer with kind, inputs -> outputs, tactic and precision."""
    lines = [f"graph {graph.name}: inputs {graph.input_names} outputs {graph.output_names}"]
    for n in graph.nodes:
        tactic = f" [{n.tactic_name}]" if n.tactic_name else ""
        lines.append(f"  {n.name} ({n.kind}, {n.precision}){tactic}: {n.inputs} -> {n.outputs}")
    return "\n".join(lines) + "\n"


class PassManager:
    def __init__(self, passes, instruments=()):
        self.passes = list(passes)
        self.instruments = list(instruments)

    def run(self, graph, ctx: PassContext):
        for p in self.passes:
            if not p.enabled(ctx.config):
                continue
            for ins in self.instruments:
                ins.before(p.name, graph, ctx)
            t0 = time.perf_counter()
            token = ACTIVE_PASS.set(p.name)   # the node list is read-only while a pass runs (mutation API only)
            try:
                result = p.fn(graph, ctx)
            except DebugkitError as e:
                raise _named(e, p.name) from e
            except Exception as e:
                raise BuildError(f"builder pass '{p.name}' failed on graph '{graph.name}': "
                                 f"{type(e).__name__}: {e}") from e
            finally:
                ACTIVE_PASS.reset(token)
            if result is None or isinstance(result, int):
                result = PassResult(int(result or 0))
            seconds = time.perf_counter() - t0
            for ins in self.instruments:
                ins.after(p.name, graph, ctx, result, seconds)
            ctx.logger.verbose(f"pass '{p.name}': {result.changed} rewrites in {seconds * 1e3:.1f} ms"
                               + (f" ({result.note})" if result.note else ""))
        return graph


def _named(error, name):
    """The same error, its message prefixed with the pass that raised it (once)."""
    msg = str(error)
    if msg.startswith("builder pass '"):
        return error
    new = copy.copy(error)
    new.args = (f"builder pass '{name}': {msg}",) + tuple(error.args[1:])
    return new


def default_instruments(lint=None):
    """Timing always; verification when `lint` (default: DEBUGKIT_LINT); dumps when DEBUGKIT_DUMP_PASSES is set."""
    s = settings()
    out = [TimingInstrument()]
    if s.lint if lint is None else lint:
        out.append(VerifyInstrument())
    if s.dump_passes:
        out.append(DumpInstrument(s.dump_passes))
    return out
