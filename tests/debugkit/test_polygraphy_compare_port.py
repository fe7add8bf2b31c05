"""Polygraphy's comparator test cases, ported as facts (our own code, our own API): its
tests/comparator/test_compare.py (NVIDIA/TensorRT tools/Polygraphy, both the 0.4x-0.53 and the later version of the
file) and the CLI tolerance tests (tests/tools/test_run.py TestOther, tests/tools/args/comparator/*).

Each case states what Polygraphy expects. Every case must agree with us, except the ones in DIFFERENCES, which must
*disagree* in the documented way (docs/run.md, "Differences from Polygraphy's compare functions"): if one starts to
agree, the table in the docs is stale. Cases about Polygraphy's Python API shape (functor classes, averaging over
iterations with --check-average, LPIPS, script generation) have no counterpart here and are listed in NOT_PORTED.
"""
import numpy as np
import pytest

from debugkit.compare.funcs import (Tolerances, compare_cosine, compare_indices, compare_l2, compare_psnr,
                                    compare_simple, compare_snr)
from native.errors import UsageError

try:
    import ml_dtypes  # noqa: F401
except ImportError:   # pragma: no cover
    pass


def simple(a, e, atol=None, rtol=None, stat=None, q=None, inf_equal=False):
    """Polygraphy's CompareFunc.simple(...)(out0 = a, out1 = e): out1 is the reference."""
    wrap = lambda v: v if isinstance(v, dict) or v is None else {"": v}  # noqa: E731
    return compare_simple("output", a, e, Tolerances(wrap(atol), wrap(rtol), wrap(stat),
                                                     q if q is not None else 0.99), inf_equal=inf_equal)


def rel_stat(a, e, stat):
    return simple(a, e, atol=0.0, rtol=0.0, stat=stat).metrics["check"]["rel"]


def abs_stat(a, e, stat, q=None):
    return simple(a, e, atol=0.0, rtol=0.0, stat=stat, q=q).metrics["check"]["abs"]


CASES = {}


def case(name):
    def deco(fn):
        CASES[name] = fn
        return fn
    return deco


# --- TestSimpleCompareFunc.test_comparison / test_low_precision_comparison ---------------------------------------
_LOW = [([0], [1], "uint8", 1, 1.0), ([1], [0], "uint8", 1, np.inf), ([0], [1], "uint16", 1, 1.0),
        ([1], [0], "uint16", 1, np.inf), ([0], [1], "uint32", 1, 1.0), ([1], [0], "uint32", 1, np.inf),
        ([25], [30], "int8", 5, 5.0 / 30.0), ([25], [30], "float16", 5, np.float32(5.0) / np.float32(30.0)),
        ([1], [0], "float16", 1, 1 / np.finfo(float).eps)]
for _i, (_v0, _v1, _dt, _abs, _rel) in enumerate(_LOW):
    def _low(v0=_v0, v1=_v1, dt=_dt, ea=_abs, er=_rel):
        a, e = np.array(v0, dtype=dt), np.array(v1, dtype=dt)
        absd = [abs_stat(a, e, s) for s in ("max", "mean", "median")]
        reld = [rel_stat(a, e, s) for s in ("max", "mean", "median")]
        return all(np.isclose(x, ea) for x in absd) and all(x == er or np.isclose(x, er) for x in reld)
    case(f"simple/low_precision[{_v0}-{_v1}-{_dt}]")(_low)

# --- test_quantile -----------------------------------------------------------------------------------------------
_Q = [([0, 0.1, 0.5, 0.75, 1], [2] * 5, "float16", 0.5, 1.5, 0.75),
      ([0, 0.1, 0.5, 0.75, 1], [2] * 5, "float16", 0.75, 1.9, 0.95),
      ([0.2, 0.2, 0.125, 0.11], [0.1] * 4, "float16", 0.5, 0.0625, 0.625),
      ([0, 1, 2, 3, 4], [2] * 5, "uint8", 0.5, 1, 0.5), ([0, 1, 2, 3, 4], [2] * 5, "uint8", 0.75, 2, 1)]
for _i, (_v0, _v1, _dt, _q, _ea, _er) in enumerate(_Q):
    def _quant(v0=_v0, v1=_v1, dt=_dt, q=_q, ea=_ea, er=_er):
        a, e = np.array(v0, dtype=dt), np.array(v1, dtype=dt)
        r = simple(a, e, atol=0.0, rtol=0.0, stat="quantile", q=q)
        qa, qr = r.metrics["check"]["abs"], r.metrics["check"]["rel"]
        return (np.isclose(qa, ea, atol=1e-4, rtol=1e-4) and np.isclose(qr, er, atol=1e-4, rtol=1e-4)
                and qa <= abs_stat(a, e, "max") and qr <= rel_stat(a, e, "max")
                and (q >= 0.5) == (qa >= abs_stat(a, e, "median")) and (q >= 0.5) == (qr >= rel_stat(a, e, "median")))
    case(f"simple/quantile[{_i}]")(_quant)


@case("simple/can_compare_bool")
def _bool():
    return not simple(np.zeros((4, 4), bool), np.ones((4, 4), bool)).passed


for _mode in ("abs", "rel"):
    def _per_output(mode=_mode):
        v = np.ones((4, 4))
        t = Tolerances(**{mode[0] + "tol": {"output0": 0.0, "output1": 1.0}})
        return (compare_simple("output0", v, v).passed and not compare_simple("output1", v, v + 1).passed
                and compare_simple("output0", v, v, t).passed and compare_simple("output1", v, v + 1, t).passed)
    case(f"simple/per_output_tol[{_mode}]")(_per_output)

    def _fallback(mode=_mode):
        v = np.ones((4, 4))
        t = Tolerances(**{mode[0] + "tol": {"output1": 1.0}})
        return (not compare_simple("output0", v + 1, v).passed and not compare_simple("output1", v, v + 1).passed
                and not compare_simple("output0", v + 1, v, t).passed
                and compare_simple("output1", v, v + 1, t).passed)
    case(f"simple/per_output_tol_fallback[{_mode}]")(_fallback)

    def _default_in_map(mode=_mode):
        v = np.ones((4, 4))
        return compare_simple("output0", v, v + 1, Tolerances(**{mode[0] + "tol": {"": 1.0}})).passed
    case(f"simple/default_tol_in_map[{_mode}]")(_default_in_map)

for _shape in [(), (0, 2, 1, 2), (1,), (2, 2, 2, 2)]:
    def _non_matching(shape=_shape):
        r = simple(np.zeros(shape, np.float32), np.ones(shape, np.float32))
        return r.passed if 0 in shape else not r.passed
    case(f"simple/non_matching_outputs[{_shape}]")(_non_matching)

for _stat in ("max", "median", "mean", "elemwise"):
    for _fn in (np.zeros, np.ones):
        def _err_stat(stat=_stat, fn=_fn):
            a, e = fn((100,), dtype=np.float32), fn((100,), dtype=np.float32)
            a[0] += 100
            ok = simple(a, e, atol=1, stat=stat).passed
            return (not ok) if stat in ("max", "elemwise") else ok
        case(f"simple/check_error_stat[{_stat}-{_fn.__name__}]")(_err_stat)

    def _either(stat=_stat):
        a, e = np.float32([1, 2]), np.float32([1.25, 2.5])
        return (not simple(a, e, stat=stat).passed and simple(a, e, rtol=0.25, stat=stat).passed
                and simple(a, e, atol=0.5, stat=stat).passed)
    case(f"simple/atol_rtol_either_pass[{_stat}]")(_either)


@case("simple/atol_rtol_combined_pass")
def _combined():
    a, e = np.float32([0, 1, 2, 3]), np.float32([0.15, 1.25, 2.5, 3.75])
    return (not simple(a, e).passed and not simple(a, e, atol=0.3).passed and not simple(a, e, rtol=0.25).passed
            and simple(a, e, atol=0.3, rtol=0.25).passed)


for _i, _ces in enumerate([{"output0": "mean", "output1": "max"}, {"": "mean", "output1": "elemwise"},
                           {"output0": "mean"}, {"": "mean"}]):
    def _per_output_stat(ces=_ces):
        a0, e0 = np.float32([0, 1, 2, 3]), np.float32([0.15, 1.25, 2.5, 3.75])
        a1 = e1 = np.float32([0, 1, 2, 3])
        t = Tolerances({"": 0.4125}, None, ces)
        return (not compare_simple("output0", a0, e0, Tolerances({"": 0.4125})).passed
                and compare_simple("output0", a0, e0, t).passed and compare_simple("output1", a1, e1, t).passed)
    case(f"simple/per_output_error_stat[{_i}]")(_per_output_stat)


@case("simple/invalid_error_stat")
def _invalid():
    try:
        simple(np.float32([0]), np.float32([0]), stat="invalid-stat")
    except UsageError:
        return True
    return False


for _stat in ("max", "median", "mean", "elemwise"):
    for _v0, _v1 in ((np.nan, 0.15), (0.15, np.nan)):
        def _nans(stat=_stat, v0=_v0, v1=_v1):
            return not simple(np.float32([v0]), np.float32([v1]), stat=stat).passed
        case(f"simple/nans_always_fail[{_stat}-{_v0}-{_v1}]")(_nans)

for _eq in (False, True):
    for _val in (np.inf, -np.inf):
        def _infs(eq=_eq, val=_val):
            return simple(np.float32([val]), np.float32([val]), inf_equal=eq).passed == eq
        case(f"simple/infinities_compare_equal[{_eq}-{_val}]")(_infs)

# --- TestIndicesCompareFunc ---------------------------------------------------------------------------------------
_IDX = [([0, 1, 2, 3], [0, 1, 2, 3], 0, True), ([0, 1, 2, 3], [0, 1, 2, 3], {"": 0}, True),
        ([0, 1, 2, 3], [0, 1, 2, 3], {"output": 0}, True), ([[0, 1], [0, 1], [0, 1]], [[0, 1], [0, 1], [0, 1]], 0, True),
        ([1, 0, 2, 3], [0, 1, 2, 3], 0, False), ([1, 0, 2, 3], [0, 1, 2, 3], 1, True),
        ([0, 1, 2, 3], [0, 1, 3, 2], 1, True), ([1, 0, 2, 7], [0, 1, 2, 3], 0, False),
        ([1, 0, 2, 7], [0, 1, 2, 3], 1, True), ([[2, 3, 4], [5, 6, 9]], [[3, 2, 4], [5, 9, 6]], 0, False),
        ([[2, 3, 4], [5, 6, 9]], [[3, 2, 4], [5, 9, 6]], 1, True),
        ([0, 1, 2, 3, 4, 5, 6], [0, 3, 2, 1, 4, 5, 6], 0, False), ([0, 1, 2, 3, 4, 5, 6], [0, 3, 2, 1, 4, 5, 6], 2, True)]
for _i, (_o0, _o1, _tol, _exp) in enumerate(_IDX):
    def _idx(o0=_o0, o1=_o1, tol=_tol, exp=_exp):
        return compare_indices("output", np.array(o0, np.int32), np.array(o1, np.int32), tol).passed == exp
    case(f"indices/index_tolerance[{_i}]")(_idx)


# --- L2, cosine, PSNR, SNR ----------------------------------------------------------------------------------------
def _f(v):
    return np.array(v, np.float32)


CASES["l2/identical"] = lambda: (lambda r: r.passed and np.isclose(r.metrics["l2"], 0))(
    compare_l2("output", _f([1, 2, 3]), _f([1, 2, 3])))
CASES["l2/known_norm"] = lambda: np.isclose(compare_l2("output", _f([1, 0]), _f([0, 1]), 10.0).metrics["l2"],
                                            np.sqrt(2), rtol=1e-5)
CASES["l2/threshold_fail"] = lambda: not compare_l2("output", _f([1, 0]), _f([0, 1]), 1.0).passed
CASES["l2/per_output_threshold"] = lambda: (not compare_l2("out0", _f([1, 0]), _f([0, 1]), {"out0": 1.0, "out1": 2.0})
                                            .passed and compare_l2("out1", _f([1, 0]), _f([0, 1]),
                                                                   {"out0": 1.0, "out1": 2.0}).passed)
for _dt, _s0, _s1 in ((np.float32, 1e-30, 1e-30), (np.float32, 1e30, 1e30), (np.float64, 1e-200, 1e200),
                      (np.float64, 1e200, 1e200)):
    for _other, _exp in (([3.0, 4.0], 1.0), ([4.0, -3.0], 0.0), ([-3.0, -4.0], -1.0)):
        def _rescale(dt=_dt, s0=_s0, s1=_s1, other=_other, exp=_exp):
            r = compare_cosine("output", np.array([3.0, 4.0], dt) * dt(s0), np.array(other, dt) * dt(s1), 0.997)
            return np.isclose(r.metrics["cosine"], exp, atol=1e-6) and r.passed == (exp >= 0.997)
        case(f"cosine/independent_rescaling[{_dt.__name__}-{_s0}-{_s1}-{_other}]")(_rescale)
for _i, (_v0, _v1, _dt, _exp) in enumerate([([], [], np.float32, 1.0), ([0.0, 0.0], [3e-30, 4e-30], np.float32, 0.0),
                                            ([-2147483648, 0], [-2147483648, 0], np.int32, 1.0),
                                            ([-2147483648, 0], [2147483647, 0], np.int32, -1.0)]):
    def _scale_ctl(v0=_v0, v1=_v1, dt=_dt, exp=_exp):
        lhs, rhs = np.array(v0, dt), np.array(v1, dt)
        keep = lhs.copy(), rhs.copy()
        r = compare_cosine("output", lhs, rhs, 0.997)
        return (np.isclose(r.metrics["cosine"], exp, atol=1e-6) and r.passed == (exp >= 0.997)
                and np.array_equal(lhs, keep[0]) and np.array_equal(rhs, keep[1]))
    case(f"cosine/scale_controls[{_i}]")(_scale_ctl)
CASES["cosine/identical"] = lambda: (lambda r: r.passed and np.isclose(r.metrics["cosine"], 1.0))(
    compare_cosine("output", _f([1, 2, 3]), _f([1, 2, 3])))
CASES["cosine/known"] = lambda: np.isclose(compare_cosine("output", _f([3, 4]), _f([4, 3]), -1.0).metrics["cosine"],
                                           24 / 25, rtol=1e-5)
CASES["cosine/threshold_fail"] = lambda: not compare_cosine("output", _f([3, 4]), _f([4, 3]), 0.99).passed
CASES["cosine/orthogonal"] = lambda: np.isclose(compare_cosine("output", _f([1, 0]), _f([0, 1]), -1.0)
                                                .metrics["cosine"], 0.0, atol=1e-6)
CASES["cosine/both_zero_is_one"] = lambda: np.isclose(compare_cosine("output", _f([0, 0]), _f([0, 0]), 1.0)
                                                      .metrics["cosine"], 1.0)
CASES["cosine/one_zero_is_zero"] = lambda: np.isclose(compare_cosine("output", _f([0, 0]), _f([1, 2]), -1.0)
                                                      .metrics["cosine"], 0.0)
CASES["cosine/nan_fails_not_clamped"] = lambda: (lambda r: not r.passed and np.isnan(r.metrics["cosine"]))(
    compare_cosine("output", _f([np.inf, 1, 2]), _f([1, 2, 3])))
CASES["psnr/identical"] = lambda: (lambda r: r.passed and r.metrics["psnr"] == float("inf"))(
    compare_psnr("output", _f([1, 2, 3]), _f([1, 2, 3])))
CASES["psnr/threshold_pass"] = lambda: compare_psnr("output", _f([1, 2, 3]), _f([1.1, 2.1, 3.1]), 0.0).passed
CASES["psnr/threshold_fail"] = lambda: not compare_psnr("output", _f([1, 2, 3]), _f([1.1, 2.1, 3.1]), 1000.0).passed
CASES["snr/identical"] = lambda: (lambda r: r.passed and r.metrics["snr"] == float("inf"))(
    compare_snr("output", _f([1, 2, 3]), _f([1, 2, 3])))
CASES["snr/threshold_pass"] = lambda: compare_snr("output", _f([1, 2, 3]), _f([1.1, 2.1, 3.1]), 0.0).passed
CASES["snr/threshold_fail"] = lambda: not compare_snr("output", _f([1, 2, 3]), _f([1.1, 2.1, 3.1]), 1000.0).passed
CASES["snr/zero_signal_fails"] = lambda: (lambda r: r.metrics["snr"] == -float("inf") and not r.passed)(
    compare_snr("output", _f([0, 0]), _f([1, 1]), 0.0))
for _fn, _kw, _loose, _tight, _va, _vb in (
        (compare_l2, "l2", 2.0, 1.0, [1.0, 0.0], [0.0, 1.0]), (compare_cosine, "cos", -1.0, 0.99, [3.0, 4.0], [4.0, 3.0]),
        (compare_psnr, "psnr", 0.0, 1000.0, [1.0, 2.0, 3.0], [1.1, 2.1, 3.1]),
        (compare_snr, "snr", 0.0, 1000.0, [1.0, 2.0, 3.0], [1.1, 2.1, 3.1])):
    def _per_out(fn=_fn, loose=_loose, tight=_tight, va=_va, vb=_vb):
        t = {"out0": loose, "out1": tight}
        return fn("out0", _f(va), _f(vb), t).passed and not fn("out1", _f(va), _f(vb), t).passed
    case(f"{_kw}/per_output_threshold")(_per_out)

    def _shape_fail(fn=_fn):
        return not fn("output", np.zeros((2, 2), np.float32), np.zeros((4,), np.float32)).passed
    case(f"{_kw}/shape_mismatch_fails_by_default")(_shape_fail)

    def _no_shape_check(fn=_fn):
        return fn("output", _f([[1, 2], [3, 4]]), _f([1, 2, 3, 4]), check_shapes=False).passed
    case(f"{_kw}/no_shape_check_reshapes")(_no_shape_check)


@case("describe/more_digits_near_the_boundary")
def _near():
    c = 0.998436
    r = compare_cosine("output", np.array([1.0, 0.0]), np.array([c, np.sqrt(1 - c * c)]), 0.998437)
    return not r.passed and "0.998436" in r.reason and "0.998437" in r.reason


@case("describe/default_digits_when_distinct")
def _far():
    r = compare_l2("output", np.array([4.0, 0.0]), np.array([0.0, 0.0]), 0.5)
    return not r.passed and "l2 = 4," in r.reason and "0.5" in r.reason


# --- CLI: tests/tools/test_run.py TestOther and tests/tools/args/comparator ---------------------------------------
def _identity_model(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Identity", ["X"], ["identity_out_0"], name="i0"),
             helper.make_node("Identity", ["identity_out_0"], ["identity_out_2"], name="i1")]
    g = helper.make_graph(nodes, "identity_identity", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 2, 2])],
                          [helper.make_tensor_value_info("identity_out_2", TensorProto.FLOAT, [1, 1, 2, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "identity_identity.onnx"
    onnx.save(m, path)
    return str(path)


CLI_CASES = {
    "cli/custom_tolerance": (["--atol", "1.0", "--rtol", "1.0"], 0),
    "cli/custom_per_output_tolerance": (["--mark-all", "--atol", "identity_out_0:1.0", "identity_out_2:3.0", "0.5",
                                         "--rtol", "identity_out_0:1.0", "identity_out_2:3.0", "0.5"], 0),
    "cli/index_comparison": (["--postprocess", "top-1", "--compare", "indices"], 0),
    "cli/check_error_stat[max]": (["--check-error-stat", "max"], 0),
    "cli/check_error_stat[median]": (["--check-error-stat", "median"], 0),
    "cli/check_error_stat[mean]": (["--check-error-stat", "mean"], 0),
    "cli/compare_func_allows_duplicates": (["--compare", "simple", "simple", "indices"], 0),
    "cli/invalid_error_stat[not-a-stat]": (["--check-error-stat", "not-a-stat"], 2),
    "cli/invalid_error_stat[output0:fake]": (["--check-error-stat", "identity_out_2:fake"], 2),
}


def _parse_cases():
    from debugkit.cli.run import tolerances_from_args
    from debugkit.compare.postprocess import parse_postprocess

    class A:
        atol, rtol, error_quantile, index_tolerance = [], [], [], []
    out = {}
    for stat in ("max", "median", "mean", "elemwise", "quantile"):
        def one(stat=stat):
            a = A()
            a.check_error_stat = [stat]
            return tolerances_from_args(a).stat == {"": stat}
        out[f"args/error_stat[{stat}]"] = one
    for i, (args, exp) in enumerate([(["mean", "output0:median", "output1:max"],
                                      {"": "mean", "output0": "median", "output1": "max"}),
                                     (["output0:median", "output1:elemwise"],
                                      {"output0": "median", "output1": "elemwise"})]):
        def per(args=args, exp=exp):
            a = A()
            a.check_error_stat = args
            return tolerances_from_args(a).stat == exp
        out[f"args/error_stat_per_output[{i}]"] = per
    for i, (args, exp) in enumerate([(["top-6", "out0:top-1", "out1:top-3"], {"": (6, -1), "out0": (1, -1),
                                                                             "out1": (3, -1)}),
                                     (["top-6,axis=-1", "out0:top-1,axis=2"], {"": (6, -1), "out0": (1, 2)})]):
        def pp(args=args, exp=exp):
            return {k: (v.k, v.axis) for k, v in parse_postprocess(args).items()} == exp
        out[f"args/postprocess[{i}]"] = pp
    for val in (np.inf, -np.inf):
        out[f"args/infinities_compare_equal[{val}]"] = lambda val=val: compare_simple(
            "output", np.float32([val]), np.float32([val])).passed     # ours: equal by default
    return out


CASES.update(_parse_cases())

# Where we differ on purpose (docs/run.md, "Differences from Polygraphy's compare functions").
DIFFERENCES = {
    "simple/low_precision[[1]-[0]-float16]": "relative error at a zero reference is infinite, not 1/eps",
    "simple/per_output_error_stat[0]": "statistics in float64: the mean error 0.41250000149 exceeds atol 0.4125",
    "simple/per_output_error_stat[1]": "statistics in float64 (as above)",
    "simple/per_output_error_stat[2]": "statistics in float64 (as above)",
    "simple/per_output_error_stat[3]": "statistics in float64 (as above)",
    "snr/zero_signal_fails": "SNR's signal is the reference ([1, 1]: 0 dB), not the first runner's output",
}

# Cases about Polygraphy's API shape or features without a counterpart here (not counted).
NOT_PORTED = {
    "test_is_base_compare_func, test_average_fields, test_averaged_result_*, test_single_metric_*_averag*,"
    " test_no_averaging_support, check_average args (6)": "no --check-average (averaging metrics over iterations)",
    "test_output_names_recorded (4)": "API shape; our pairing of differing names is PairResult.paired",
    "TestSingleMetricShapeHandling.test_summary_label_set (4), TestDefaultNone (2), "
    "TestCompareFuncIndices.test_always_adds_to_script": "API/script-generation shape",
    "TestPerceptualMetricsCompareFunc (3)": "no LPIPS (needs torch)",
    "postprocess_func_script args (3)": "no --postprocess-func-script",
    "test_compare_func_warnings_for_unused_options: --atol/--rtol with indices only (2), --lpips-threshold (1)":
        "--compare adds checks to simple (always run), so --atol/--rtol are never unused; no LPIPS",
    "test_removed_distance_and_quality_compare_funcs": "API history",
    "test_run.py test_custom_tolerance with --iterations=0": "ours fails a run that compares nothing (issue 21)",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name):
    agrees = bool(CASES[name]())
    if name in DIFFERENCES:
        assert not agrees, f"{name} now agrees with Polygraphy: update docs/run.md and DIFFERENCES"
    else:
        assert agrees, f"{name}: disagrees with Polygraphy"


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_cli_case(name, cli, tmp_path):
    args, rc = CLI_CASES[name]
    code, out, err = cli("run", _identity_model(tmp_path), "--engine", "--onnxrt", *args)
    assert code == rc, out + err


UNUSED_OPTION_CASES = {"cli/unused_option_warning[--index-tolerance]": ["--index-tolerance", "1"],
                       "cli/unused_option_warning[--l2-threshold]": ["--l2-threshold", "1"],
                       "cli/unused_option_warning[--psnr-threshold]": ["--psnr-threshold", "30"]}


@pytest.mark.parametrize("name", sorted(UNUSED_OPTION_CASES))
def test_unused_option_warning(name, cli, tmp_path):
    """Polygraphy: an option of a compare function that is not selected is ignored with a warning naming it."""
    opt = UNUSED_OPTION_CASES[name]
    code, out, err = cli("run", _identity_model(tmp_path), "--engine", "--onnxrt", "--compare", "simple", *opt)
    assert code == 0 and f"{opt[0]} is only used by --compare" in err and "it is ignored" in err
    code, out, err = cli("run", _identity_model(tmp_path), "--engine", "--onnxrt", "--compare",
                         {"--index-tolerance": "indices", "--l2-threshold": "l2", "--psnr-threshold": "psnr"}[opt[0]],
                         *opt)
    assert "is only used by" not in err


def test_agreement_count(capsys):
    total = len(CASES) + len(CLI_CASES) + len(UNUSED_OPTION_CASES)
    agree = total - len(DIFFERENCES)
    assert set(DIFFERENCES) <= set(CASES)
    assert (agree, total) == (132, 138)
    with capsys.disabled():
        print(f"\nPolygraphy comparator cases: {agree} of {total} agree; {len(DIFFERENCES)} differ as documented")
