"""Run the ONNX node conformance cases outside pytest: `python tests/conformance/run_conformance.py [REGEX]`.

Prints one line per failing case and the pass count per op at the end. Handy while implementing an op.
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
    pattern = re.compile(argv[1]) if len(argv) > 1 else None
    verbose = "-v" in argv
    table = expected_failures()
    per_op = collections.defaultdict(lambda: [0, 0])
    passed = failed = 0
    t0 = time.time()
    for name in case_names():
        if pattern and not pattern.search(name):
            continue
        op = op_of(name)
        try:
            run_case(name)
            ok = True
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


if __name__ == "__main__":
    main(sys.argv)
