"""`inspect capability --dla` over every public corpus model: one Markdown row per model (layers on the DLA,
loadables, fallback reasons by count), as in docs/DLA.md.

    DEBUGKIT_CORPUS=... python tools/dla_capability_table.py [--profile orin|xavier] [--models NAME ...]
"""
import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tests.corpus.corpus import CorpusUnavailable, find_path, manifest  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="orin", choices=["orin", "xavier"])
    ap.add_argument("--models", nargs="+")
    args = ap.parse_args(argv)
    from debugkit.cli.inspect_capability import capability
    from native.logger import G_LOGGER, Severity
    G_LOGGER.min_severity = Severity.ERROR   # the table is the output; fallback warnings are in it by count
    print("| model | layers on DLA | loadables | fallback reasons (rule × layers) | s |")
    print("|---|---|---|---|---|")
    for entry in manifest():
        if args.models and entry["name"] not in args.models:
            continue
        try:
            path = find_path(entry)
        except CorpusUnavailable as e:
            print(f"| {entry['name']} | skipped: {e} | | | |")
            continue
        shapes = {k: tuple(v["shape"]) for k, v in entry.get("feeds", {}).items() if v.get("shape") is not None}
        t0 = time.perf_counter()
        try:
            rep = capability(path, profile=args.profile, shapes=shapes)
        except Exception as e:  # report and go on: the table shows every model
            print(f"| {entry['name']} | error: {type(e).__name__}: {str(e)[:120]} | | | |")
            continue
        reasons = ", ".join(f"{k} × {v}" for k, v in rep["fallback_reasons"].items()) or "—"
        print(f"| {entry['name']} | {rep['layers_on_dla']} / {rep['layers_total']} | {rep['loadables']} | {reasons} "
              f"| {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
