"""Fuzz the ONNX front door, the plan loader and data files for N minutes; exit 1 if anything escaped.

    python tools/fuzz.py --minutes 20 --target onnx-bytes|onnx-structure|plan-bytes|plan-structure|hdf5-structure
                         [--seed 0] [--start 0] [--save DIR] [--case-limit 10] [--memory-mb 4096]

Every case runs in a worker process under RLIMIT_AS (tests/fuzz/fuzzer.py), so crashes, hangs and runaway
allocations are counted. A case's time is the worker's CPU time (wall time on a shared machine counts the other
processes too; both are reported): over --case-limit it is 'slow'. RLIMIT_CPU at 3x the limit and a wall limit of
6x (at least 60 s) end runaway and blocked cases ('hang'). Findings: 'bug' (an exception outside DebugkitError, with
file:line), 'crash' (the worker died: signal), 'hang', 'slow'. The summary's first line: cases, outcome counts, and
the slowest case by CPU and by wall. --save writes each finding's input to DIR (turn it into a regression case
under tests/fuzz/cases/). Cases are a pure function of (target, seed, index): `--start I --iterations 1` replays
case I.
hdf5-structure: mutated HDF5 data files (links, external links and storage, virtual datasets, huge declared shapes,
strings, attributes, byte flips) through `run --load-inputs` / `--load-outputs` (tests/fuzz/hdf5_cases.py).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.fuzz.fuzzer import TARGETS, fuzz  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, choices=TARGETS)
    ap.add_argument("--minutes", type=float, default=None, help="how long to run")
    ap.add_argument("--iterations", type=int, default=None, help="or how many cases")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--save", default=None, help="write every finding's input here")
    ap.add_argument("--case-limit", type=float, default=10.0, help="CPU seconds a case may take (default 10)")
    ap.add_argument("--memory-mb", type=int, default=4096, help="RLIMIT_AS of the worker (default 4096)")
    ap.add_argument("--max-tensor-mb", type=int, default=16, help="DEBUGKIT_MAX_TENSOR_BYTES in the worker (default 16: the "
                    "seeds are small; larger tensors are refused as ParseError, which bounds the work per case)")
    args = ap.parse_args(argv)
    if args.minutes is None and args.iterations is None:
        ap.error("give --minutes or --iterations")
    report = fuzz(args.target, seed=args.seed, iterations=args.iterations,
                  seconds=args.minutes * 60 if args.minutes is not None else None, case_limit=args.case_limit,
                  memory_mb=args.memory_mb, max_tensor_mb=args.max_tensor_mb, save_dir=args.save, start=args.start,
                  log=lambda line: print(line, file=sys.stderr, flush=True))
    print(report.summary(), flush=True)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
