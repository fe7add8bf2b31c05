"""Plant a faulty kernel in our engine and run `debugkit run` through it: the check command for `debug reduce` demos.

    python tools/plant_fault.py --node NAME [--node NAME2] [--delta 0.5] [--together] MODEL [run options...]

Every engine layer built from one of the named ONNX nodes (alone or fused with others) gets a faulty tactic: its
first output is shifted by `--delta` (default 0.5) after the real kernel ran. Nothing else changes, so `debugkit run
MODEL --engine --onnxrt` fails exactly when a planted node is in the model and its wrong values reach an output —
the situation of an engine with a bad kernel for one layer. `debug reduce` must then find the planted nodes:

    debugkit debug reduce bert_mini.onnx -o reduced.onnx --fail-code 1 --check python tools/plant_fault.py \
        --node X {model} --engine --onnxrt --load-inputs {inputs}

Exit codes are run's (0 pass, 1 mismatch, 2 bad input); use `--fail-code 1` so a subgraph our engine cannot build
does not count as reproducing the failure.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plant(nodes, delta=0.5, together=False):
    """Make layers built from these ONNX nodes compute wrong values; returns a function that undoes it.

    together=True models an interaction bug (two layers sharing a corrupted workspace): the fault fires only in an
    engine that contains layers of every planted node."""
    import numpy as np
    from backends.engine.runtime import executor as ex
    nodes = set(nodes)
    original = ex.GraphExecutor.__init__

    class Faulty:
        def __init__(self, tactic):
            self.tactic = tactic
            self.name, self.kind, self.id = tactic.name + "-planted-fault", tactic.kind, tactic.id

        def run(self, op, inputs):
            outs = list(self.tactic.run(op, inputs))
            o = np.asarray(outs[0])
            if o.dtype.kind == "f":
                outs[0] = (o + np.asarray(delta, o.dtype)).astype(o.dtype)
            return outs

        def __getattr__(self, item):
            return getattr(self.tactic, item)

    def init(self, graph, *a, **k):
        original(self, graph, *a, **k)
        present = {s for node, *_ in self.steps for s in (getattr(node, "source_nodes", None) or [node.name])}
        if together and not nodes <= present:
            return
        self.steps = [(node, Faulty(t) if nodes & set(getattr(node, "source_nodes", None) or [node.name]) else t,
                       op, subs) for node, t, op, subs in self.steps]

    ex.GraphExecutor.__init__ = init
    return lambda: setattr(ex.GraphExecutor, "__init__", original)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="plant_fault.py", usage="plant_fault.py --node NAME [--node ...] [--delta D] "
                                                             "[--together] MODEL [run options]")
    p.add_argument("--node", action="append", required=True)
    p.add_argument("--delta", type=float, default=0.5)
    p.add_argument("--together", action="store_true",
                   help="the fault fires only when every planted node is in the engine (an interaction bug)")
    a, rest = p.parse_known_args(argv)
    plant(a.node, a.delta, a.together)
    from debugkit.cli.main import main as debugkit_main
    return debugkit_main(["run"] + rest)


if __name__ == "__main__":
    sys.exit(main())
