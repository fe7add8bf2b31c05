"""Which layers of each corpus model's CUDA engine still run as host layers (`host:<cpu tactic>`), per model:
layer count, host-layer count and their kinds (Plugin layers with their plugin type), and the build time.

    python tools/cuda_host_layers.py [--fp16] [--models NAME ...] [--json FILE]

Needs a GPU and the corpus (DEBUGKIT_CORPUS, DEBUGKIT_MODEL_CACHE for the shipped models); feeds are the
manifest's shapes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    from backends.runners import EngineRunner
    from native.logger import G_LOGGER
    from tests.corpus.corpus import CorpusUnavailable, find_path, manifest
    G_LOGGER.min_severity = G_LOGGER.ERROR
    rows = {}
    for e in manifest():
        if args.models and e["name"] not in args.models:
            continue
        shapes = {k: tuple(v["shape"]) for k, v in e["feeds"].items()}
        t = time.time()
        try:
            with EngineRunner(find_path(e), shapes=shapes, device="cuda",
                              flags=("fp16",) if args.fp16 else ()) as r:
                nodes = r.engine.graph.nodes
                host = [n for n in nodes if (n.tactic_name or "").startswith("host:")]
                rows[e["name"]] = {"layers": len(nodes), "host_layers": len(host),
                                   "host_kinds": sorted({f"{n.kind}:{n.params.get('plugin_type', '')}".rstrip(":")
                                                         for n in host}),
                                   "build_s": round(time.time() - t, 1)}
        except CorpusUnavailable as why:
            rows[e["name"]] = {"skipped": str(why)}
        except Exception as ex:   # the table says what failed instead of stopping
            rows[e["name"]] = {"error": f"{type(ex).__name__}: {str(ex)[:200]}"}
        print(e["name"], json.dumps(rows[e["name"]]), flush=True)
    if args.json:
        from native.files import output_file
        with output_file(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
