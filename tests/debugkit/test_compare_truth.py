"""Issue 21/25: comparison results that cannot lie, and Polygraphy's comparison options.

Error statistics (no NaN, zero references counted apart, enough digits), NaN/Inf counts and positions, the index
check's direction, the scale-aware default tolerance, per-output quantile/index tolerance, --postprocess,
--no-check-shapes, name matching, per-runner output statistics, and the born-there/accumulates criterion.
"""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from debugkit.compare import Tolerances, compare_indices, compare_simple
from debugkit.compare.divergence import first_divergence
from debugkit.compare.errorstats import check_value, distinct, order_statistic
from debugkit.compare.funcs import OutputResult
from debugkit.compare.matching import pair_outputs
from debugkit.compare.origin import ErrorSplit
from debugkit.compare.outputstats import pair_stats
from debugkit.compare.postprocess import parse_postprocess
from native.errors import UsageError


# 1. statistics that cannot lie -----------------------------------------------------------------------------------
def test_quantile_with_a_zero_reference_is_the_true_order_statistic():
    a, e = np.array([1.1, 1.2, 0.5]), np.array([1.0, 1.0, 0.0])
    r = compare_simple("y", a, e, Tolerances({"": 0.0}, {"": 0.25}, {"": "quantile"}, 0.5))
    assert r.passed
    assert r.metrics["check"]["rel"] == pytest.approx(0.2)        # [0.1, 0.2, inf] -> 0.2, not NaN
    assert r.min_rtol == pytest.approx(0.2) and r.zero_ref == 1 and r.rel_stats["zero_ref_at"] == [2]
    assert r.rel_stats["count"] == 2 and r.max_rel == pytest.approx(0.2)   # finite part only
    r75 = compare_simple("y", a, e, Tolerances({"": 0.0}, {"": 0.25}, {"": "quantile"}, 0.75))
    assert not r75.passed and r75.metrics["check"]["rel"] == float("inf")
    assert "nan" not in r75.reason and "zero reference" in r75.reason


def test_order_statistics_never_nan():
    assert order_statistic(np.array([0.1, 0.2, np.inf]), 0.5) == pytest.approx(0.2)
    assert order_statistic(np.array([0.1, np.inf, np.inf]), 0.5) == float("inf")
    assert order_statistic(np.array([0.0, 1.0, 2.0, 3.0]), 0.75) == pytest.approx(2.25)   # numpy's interpolation
    assert check_value(np.array([1.0, np.inf]), "mean") == float("inf")
    assert check_value(np.array([np.inf]), "median") == float("inf")


def test_uint_median_is_not_nan():
    r = compare_simple("y", np.uint8([1]), np.uint8([0]), Tolerances(check_error_stat={"": "median"}))
    assert r.metrics["check"] == {"stat": "median", "abs": 1.0, "rel": float("inf")}
    assert not r.passed and "nan" not in r.reason.lower()


def test_report_never_prints_rtol_nan(cli, tmp_path):
    from debugkit.compare.comparator import PairResult, RunSummary
    from debugkit.report import render
    r = compare_simple("y", np.float32([1.1, 1.2, 0.5]), np.float32([1, 1, 0]),
                       Tolerances({"": 0.0}, {"": 0.05}, {"": "quantile"}, 0.5))
    text = render(RunSummary(pairs=[PairResult("a", "b", 0, outputs={"y": r})], iterations=1))
    assert "nan" not in text.lower()
    assert "1 element(s) with a zero reference differ" in text


def test_mean_at_the_tolerance_prints_enough_digits():
    """float32 0.15 is 0.150000006: the float64 mean error is 0.41250000149 > 0.4125 and the report shows it."""
    a, e = np.float32([0, 1, 2, 3]), np.float32([0.15, 1.25, 2.5, 3.75])
    r = compare_simple("y", a, e, Tolerances({"": 0.4125}, {"": 0.0}, {"": "mean"}))
    assert not r.passed and r.metrics["check"]["abs"] == pytest.approx(0.41250000149, abs=1e-11)
    assert "abs=0.412500001 > atol=0.4125" in r.reason
    assert distinct(0.41250000149011612, 0.4125) == "0.412500001"
    assert distinct(0.5, 0.4125) == "0.5"


# 2. NaN/Inf as counts and positions --------------------------------------------------------------------------------
def test_nonfinite_counts_and_first_position():
    e = np.zeros((2, 8), np.float32)
    a = e.copy()
    a[0, 3] = a[1, 0] = np.nan
    a[1, 5] = np.inf
    r = compare_simple("y", a, e)
    nf = r.nonfinite
    assert not r.passed and r.max_abs == 0.0 and r.compared == 13        # 3 positions left out, not errors of 0
    assert (nf.actual.nan, nf.actual.posinf, nf.expected.total) == (2, 1, 0)
    assert nf.mismatched == 3 and nf.first_mismatch == [0, 3]
    assert nf.describe("engine", "ref") == "2 NaN, 1 +Inf in engine, 0 NaN/Inf in ref; 3 position(s) differ, " \
                                          "first at [0, 3]"
    assert r.metrics["level"] == float("inf")


def test_fp16_overflow_example_reports_counts_and_node(cli):
    code, out, _ = cli("run", "examples/example.onnx", "--engine", "--onnxrt", "--fp16", "--mark-all")
    assert code == 1
    assert "NaN/Inf: 1 +Inf in engine-runner, 0 NaN/Inf in onnxrt-runner; 1 position(s) differ, first at [0, 0]" in out
    head = next(l for l in out.splitlines() if l.startswith(">>> "))
    assert "produced by node 'reduce' (ReduceSum)" in head and "1 +Inf in engine-runner" in head
    assert "born there: NaN/Inf first appear here" in head and "max abs err 0" not in head
    row = next(l for l in out.splitlines() if l.startswith("0 ") and " y " in l)
    assert "NaN/Inf x1" in row


def test_nonfinite_counts_in_json(cli, tmp_path):
    j = tmp_path / "v.json"
    cli("run", "examples/example.onnx", "--engine", "--onnxrt", "--fp16", "--mark-all", "--json", j)
    doc = json.loads(j.read_text())
    nf = doc["outputs"][0]["nonfinite"]
    assert nf["actual"]["posinf"] == 1 and nf["expected"]["posinf"] == 0 and nf["first_mismatch"] == [0, 0]
    fd = doc["layerwise"]["first_divergence"]
    assert fd["node"] == "reduce" and fd["born_here"] and fd["nonfinite"]["mismatched"] == 1


# 3. index check direction ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("out,ref,tol,ok", [
    ([3, 0, 1, 2], [0, 1, 2, 3], 1, False),    # the output's top-1 (3) is 3 places from the reference's
    ([1, 0, 2, 3], [0, 1, 2, 3], 1, True),
    ([0, 1, 2, 9], [0, 1, 2, 3], 1, True),     # the output's last `tol` entries are not checked
    ([9, 1, 2, 3], [0, 1, 2, 3], 3, False),    # an output entry absent from the reference row
])
def test_index_check_follows_polygraphys_direction(out, ref, tol, ok):
    r = compare_indices("k", np.array(out), np.array(ref), tol)
    assert r.passed is ok
    if not ok:
        assert "first:" in r.reason


def test_per_output_index_tolerance_and_quantile():
    t = Tolerances(check_error_stat={"": "quantile"}, quantile={"": 0.99, "b": 0.5}, index_tolerance={"": 0, "k": 1})
    assert t.index_tolerance_for("k") == 1 and t.index_tolerance_for("z") == 0
    assert t.resolve("b", "float32").quantile == 0.5 and t.resolve("a", "float32").quantile == 0.99
    assert compare_indices("k", np.array([1, 0, 2]), np.array([0, 1, 2]), {"": 0, "k": 1}).passed
    assert not compare_indices("z", np.array([1, 0, 2]), np.array([0, 1, 2]), {"": 0, "k": 1}).passed
    with pytest.raises(UsageError):
        Tolerances(quantile={"": 1.5})


# 4. scale-aware default tolerance -------------------------------------------------------------------------------
def test_default_atol_scales_with_the_reference():
    """A probabilities output (max 1.6e-3, like mobilenetv3's softmax) with INT8-sized errors fails by default; the
    old fixed atol 1e-4 passed it."""
    rng = np.random.default_rng(0)
    ref = rng.dirichlet(np.ones(1000)).astype(np.float32) * np.float32(0.8)
    ours = ref + rng.normal(0, 1e-5, ref.shape).astype(np.float32)
    r = compare_simple("probs", ours, ref)
    assert not r.passed and r.atol == pytest.approx(1e-5 * float(ref.max()))
    assert r.atol_rule.startswith("default: 1e-05 x max|reference|")
    assert compare_simple("probs", ours, ref, Tolerances({"": 1e-4}, {"": 1e-3})).passed    # the old rule
    big = ref * 1e4                                  # the same relative errors at another scale: the same verdict
    assert not compare_simple("probs", ours * 1e4, big).passed
    assert compare_simple("probs", ref + 1e-9, ref).passed


# 7. postprocess, shapes, names, output statistics ---------------------------------------------------------------
def test_postprocess_parsing_and_top_k():
    spec = parse_postprocess(["top-3", "out0:top-1,axis=0", "p:argmax"])
    assert str(spec[""]) == "top-3" and str(spec["out0"]) == "top-1,axis=0" and spec["p"].kind == "argmax"
    x = np.array([[0.1, 0.7, 0.2, 0.7]])
    assert spec[""].apply(x).tolist() == [[1, 3, 2]]           # largest first, ties in index order
    assert spec["p"].apply(x).tolist() == [1]
    assert parse_postprocess(["top-10"])[""].apply(np.arange(4.0)).tolist() == [3, 2, 1, 0]   # K clamped
    for bad in (["top-0"], ["top5"], ["x:median"]):
        with pytest.raises(UsageError):
            parse_postprocess(bad)


def test_no_check_shapes_pairs_equal_element_counts():
    a, e = np.float32([[1, 2, 3, 4]]), np.float32([1, 2, 3, 4])
    r = compare_simple("y", a, e)
    assert not r.passed and "--no-check-shapes" in r.reason
    r = compare_simple("y", a, e, check_shapes=False)
    assert r.passed and "reshaped [1, 4] -> [4]" in r.metrics["reshaped"]
    assert not compare_simple("y", np.float32([1, 2, 3]), e, check_shapes=False).passed


def test_name_matching_fallbacks():
    v = np.zeros(3)
    assert pair_outputs({"y": v}, {"y:0": v}) == [("y", "y:0", "substring")]
    assert pair_outputs({"Y": v, "z": v}, {"y": v, "z": v}) == [("Y", "y", "substring"), ("z", "z", "exact")]
    assert pair_outputs({"a": v}, {"b": v}) == [("a", "b", "position")]
    assert pair_outputs({"a": v}, {"b": np.zeros(4)}) == []               # another model's output: no pairing
    assert pair_outputs({"a": v, "b": v}, {"b": v}) == [("b", "b", "exact")]   # 'b' has its exact partner


def test_output_statistics_share_histogram_bins():
    s = pair_stats(np.float32([0, 1, 2, 3]), np.float32([1, 2, 3, 4]))
    assert s["actual"]["mean"] == 1.5 and s["expected"]["max"] == 4.0
    assert s["actual"]["histogram"]["edges"] == s["expected"]["histogram"]["edges"]
    assert s["actual"]["histogram"]["edges"][0] == 0.0 and s["actual"]["histogram"]["edges"][-1] == 4.0
    assert sum(s["expected"]["histogram"]["counts"]) == 4


def _save(path, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


def test_cli_postprocess_index_tolerance_and_stats(cli, tmp_path):
    """Engine vs ORT with top-5 postprocessing: the indices are compared (with --compare indices, per output)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 10)).astype(np.float32)
    path = _save(tmp_path / "m.onnx", [helper.make_node("MatMul", ["x", "w"], ["logits"], name="mm")],
                 [("x", [1, 8])], [("logits", [1, 10])], [("w", w)])
    j = tmp_path / "v.json"
    code, out, err = cli("run", path, "--engine", "--onnxrt", "--postprocess", "logits:top-5", "--compare", "indices",
                         "--index-tolerance", "logits:1", "--json", j, "-vv")
    assert code == 0, out + err
    doc = json.loads(j.read_text())
    o = doc["outputs"][0]
    assert o["check"] == "indices" and o["shape"] == [1, 5]
    st = o["output_stats"]
    assert st["actual"]["shape"] == [1, 5] and st["actual"]["min"] >= 0 and st["actual"]["max"] <= 9
    assert "value bin" in out                            # the per-runner statistics block (verbose)
    code, _, err = cli("run", path, "--onnxrt", "--postprocess", "nope:top-1")
    assert code == 2 and "nope" in err


# 5. born there or accumulating -----------------------------------------------------------------------------------
def _res(name, passed, level):
    r = OutputResult(name, passed)
    r.metrics["level"] = level
    r.stats = {"max": 0.1}
    r.rel_stats = {"max": 0.1}
    return r


def _chain_model(n=4):
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"], name=f"n{i}") for i in range(n)]
    g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(f"t{n - 1}", TensorProto.FLOAT, [2])])
    return helper.make_model(g)


@pytest.mark.parametrize("split,levels,born", [
    (ErrorSplit(local=5.0, carried=0.5, replay_error=0.0), [0.0, 0.5, 0.9], True),     # its own arithmetic
    (ErrorSplit(local=0.3, carried=3.0, replay_error=0.0), [0.4, 0.6, 0.9], False),    # carried in: accumulates
    (ErrorSplit(local=0.0, carried=50.0, replay_error=40.0), [0.0, 0.01, 0.05], True),  # replay invalid, clean inputs
    (None, [0.3, 0.6, 0.9], False),                                                     # no replay, no growth
    (None, [0.1, 0.2, 0.5], True),                                                      # no replay, 4x growth
])
def test_born_or_accumulating(split, levels, born):
    m = _chain_model()
    out_level = 2.5 if split is not None or born else 1.2
    results = {f"t{i}": _res(f"t{i}", True, lv) for i, lv in enumerate(levels)}
    results["t3"] = _res("t3", False, out_level)
    d = first_divergence(m, results, split=(lambda *a: split) if split is not None else None)
    assert d.tensor == "t3" and d.born_here is born
    if born:
        assert "born there" in d.headline()
    else:
        assert d.headline().startswith("error accumulates from node 'n0' through node 'n3' (Relu) (4 layers); "
                                       "no single layer explains it")
        assert "debug precision" in d.headline() and d.accumulation["layers"] == 4


def test_other_birth_sites_are_judged_by_the_same_criterion():
    m = _chain_model(6)
    levels = [0.0, 3.0, 0.01, 2.0, 1.5, 2.5]     # t1 fails (clean input), t3 fails (clean input t2), t5 fails (t4 noisy)
    results = {f"t{i}": _res(f"t{i}", lv <= 1, lv) for i, lv in enumerate(levels)}
    results["t4"] = _res("t4", True, 0.9)
    d = first_divergence(m, results)
    assert d.tensor == "t1" and d.born_here
    assert [x.tensor for x in d.born_elsewhere] == ["t3"]    # t5: inputs carry 0.9x, grows < 4x: not a birth


def _mm_chain(path, n, bad=None):
    """x -> n x (MatMul + residual Add); layer `bad` has weights x2^-20 (FP16 subnormals) and two x2^10 after it."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
        src = f"m{i}"
        if i == bad:
            w = w * np.float32(2.0 ** -20)
            inits.append(("k", np.float32(1024.0)))
        inits.append((f"w{i}", w))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [src], name=f"mm{i}"))
        if i == bad:
            nodes += [helper.make_node("Mul", [src, "k"], ["u1"], name="up1"),
                      helper.make_node("Mul", ["u1", "k"], ["u2"], name="up2")]
            src = "u2"
        nodes.append(helper.make_node("Add", [src, prev], [f"r{i}"], name=f"res{i}"))
        prev = f"r{i}"
    return _save(path, nodes, [("x", [4, 64])], [(prev, [4, 64])], inits)


def test_accumulating_fp16_error_is_not_called_born_there(cli, tmp_path):
    path = _mm_chain(tmp_path / "chain.onnx", 12)
    code, out, _ = cli("run", path, "--engine", "--onnxrt", "--fp16", "--mark-all", "--val-range", "[-1,1]")
    head = next(l for l in out.splitlines() if l.startswith(">>> "))
    assert code == 1 and head.startswith(">>> error accumulates from node 'mm0' through node 'mm")
    assert "no single layer explains it" in head and "born there" not in head
    assert "another error is born" not in out      # the same accumulation crossing the tolerance again downstream


def test_a_planted_fp16_layer_is_born_there_although_its_inputs_carry_noise(cli, tmp_path):
    path = _mm_chain(tmp_path / "planted.onnx", 8, bad=5)
    code, out, _ = cli("run", path, "--engine", "--onnxrt", "--fp16", "--mark-all", "--val-range", "[-1,1]")
    head = next(l for l in out.splitlines() if l.startswith(">>> "))
    assert code == 1 and "first diverging tensor 'm5', produced by node 'mm5' (MatMul)" in head
    assert "born there: re-run in full precision" in head


@pytest.mark.parametrize("args,needle", [
    (["--error-quantile", "1.5"], "must be in [0, 1]"),
    (["--index-tolerance", "-1"], "must be >= 0"),
    (["--index-tolerance", "y:x"], "--index-tolerance expects a value or name:value"),
    (["--postprocess", "top-x"], "expected [NAME:]top-K"),
    (["--error-quantile", "nope:0.5"], "unknown output(s) ['nope']"),
])
def test_bad_comparison_options_are_exit_2(cli, chain, args, needle):
    code, out, err = cli("run", chain, "--engine", "--onnxrt", "--input-shapes", "x:[2,4]", *args)
    assert code == 2 and needle in err, err


def test_no_check_shapes_and_name_fallback_in_a_run(cli, chain, tmp_path):
    """A golden whose output is named 'y:0' and shaped (8,) pairs with our 'y' (2, 4) by substring, reshaped."""
    import h5py
    from debugkit.data_file import escape
    golden, inputs = tmp_path / "g.h5", tmp_path / "in.h5"
    assert cli("run", chain, "--onnxrt", "--input-shapes", "x:[2,4]", "--save-outputs", golden,
               "--save-inputs", inputs)[0] == 0
    with h5py.File(golden, "r+") as f:
        it = f[escape("onnxrt-runner")]["iteration_0"]
        key = next(iter(it))
        data = it[key][()].reshape(-1)
        attrs = dict(it[key].attrs)
        del it[key]
        ds = it.create_dataset(escape("y:0"), data=data)
        for k, v in attrs.items():
            ds.attrs[k] = v
        ds.attrs["name"] = "y:0"
        f[escape("onnxrt-runner")].attrs["outputs"] = ["y:0"]
    args = ("run", chain, "--engine", "--load-outputs", golden, "--load-inputs", inputs)
    code, out, err = cli(*args)
    assert code == 1 and "shape mismatch: [2, 4] vs reference [8]" in out and "--no-check-shapes" in out
    code, out, err = cli(*args, "--no-check-shapes")
    assert code == 0, out + err
    assert "comparing engine-runner's 'y' with onnxrt-runner[g.h5]'s 'y:0' (matched by substring" in err


def test_cli_per_output_error_quantile(cli, tmp_path):
    """--check-error-stat quantile with a per-output --error-quantile: the median passes where p99 fails."""
    rng = np.random.default_rng(0)
    ref = rng.uniform(1, 2, (1, 100)).astype(np.float32)
    ours = ref.copy()
    ours[0, :10] += 1.0                              # 10% of the elements are far off
    path = _save(tmp_path / "id.onnx", [helper.make_node("Identity", ["x"], ["y"], name="i")], [("x", [1, 100])],
                 [("y", [1, 100])])
    from debugkit.data_file import DataWriter
    for name, value in (("ref.h5", ref), ("ours.h5", ours)):
        with DataWriter(str(tmp_path / name), "outputs", {}) as w:   # a writer left by its block is a whole file
            w.write_many("onnxrt-runner" if name == "ref.h5" else "engine-runner", 0, {"y": value}, None)
    base = ("run", path, "--load-outputs", tmp_path / "ours.h5", tmp_path / "ref.h5", "--allow-mismatched-inputs",
            "--check-error-stat", "quantile")
    code, out, _ = cli(*base)
    assert code == 1 and "quantile 0.99 error" in out
    code, out, err = cli(*base, "--error-quantile", "y:0.5")
    assert code == 0, out + err
