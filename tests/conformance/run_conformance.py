"""Run the ONNX node conformance cases outside pytest: `python tests/conformance/run_conformance.py [REGEX]`.

Prints one line per failing case and the pass count per op at the end. Handy while implementing an op.
`--device cuda` runs them on the CUDA device; `--compare-cpu` also runs each on the CPU and reports how many of the
cases that pass on the CPU pass on the device (the CUDA issue's conformance figure); `--json F` writes the counts.
"""
import collections
import os
import re
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import case_names, expected_failure_reason, expected_failures, op_of, run_case  # noqa: E402


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("pattern", nargs="?")
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--compare-cpu", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--data", help="folder of node cases (default: the installed onnx's backend test data)")
    args = ap.parse_args(argv[1:])
    if args.data:
        import cases
        cases.DATA_DIR = args.data
    pattern = re.compile(args.pattern) if args.pattern else None
    verbose = args.v
    cpu_pass = device_pass = 0
    table = expected_failures()
    per_op = collections.defaultdict(lambda: [0, 0])
    passed = failed = 0
    t0 = time.time()
    for name in case_names():
        if pattern and not pattern.search(name):
            continue
        op = op_of(name)
        cpu_ok = None
        if args.compare_cpu:
            try:
                run_case(name)
                cpu_ok = True
            except Exception:
                cpu_ok = False
            cpu_pass += cpu_ok
        try:
            run_case(name, device=args.device.upper())
            ok = True
            device_pass += bool(cpu_ok)
        except Exception as e:
            ok = False
            msg = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            reason = expected_failure_reason(name, table)
            print(f"FAIL {name} [{op}] {msg}" + (f"  (expected: {reason})" if reason else ""))
            if verbose:
                traceback.print_exc()
        per_op[op][0 if ok else 1] += 1
        passed += ok
        failed += not ok
    for op in sorted(per_op):
        p, f = per_op[op]
        print(f"  {op:28s} {p:4d} passed {f:4d} failed")
    print(f"{passed} passed, {failed} failed in {time.time() - t0:.1f}s")
    if args.compare_cpu:
        share = device_pass / cpu_pass if cpu_pass else 0.0
        print(f"on {args.device}: {device_pass} of the {cpu_pass} cases that pass on the CPU pass ({share:.1%})")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "passed": passed, "failed": failed, "cpu_passed": cpu_pass,
                       "device_passed_of_cpu_passed": device_pass}, f)


if __name__ == "__main__":
    main(sys.argv)
