"""ONNX backend node conformance (the cases shipped in the onnx wheel) through backends.engine.onnx_backend.

Expected failures are listed, each with its reason, in expected_failures.txt; the per-op pass count is printed at
the end of the run (see tests/conftest.py).
"""
import pytest

from tests.conformance.cases import case_names, expected_failure_reason, expected_failures, op_of, run_case

_TABLE = expected_failures()
CASES = case_names()


@pytest.mark.parametrize("name", CASES)
def test_onnx_node(name, request):
    reason = expected_failure_reason(name, _TABLE)
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=False))
    request.node.user_properties.append(("onnx_op", op_of(name)))
    run_case(name)
