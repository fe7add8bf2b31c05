"""The DLA rule table (seed 000 «DLA 支持的层和限制», checklist §7): for every rule one layer just inside the limit
(runs on DLA) and one just outside (rejected with that rule's reason)."""
import numpy as np
import pytest

from native.dla.profiles import get_profile
from native.dla.rules import LayerFacts, RuleContext, check, pool_stages, softmax_mode

ORIN = RuleContext(get_profile("orin"))
XAVIER = RuleContext(get_profile("xavier"))
INT8 = RuleContext(get_profile("orin"), fp16=True, int8=True)


def conv(c=16, m=16, k=(3, 3), s=(1, 1), pad=(1, 1), d=(1, 1), g=1, hw=(32, 32), n=1, fmt="dla_linear",
         precision="float16", post_ops=None):
    kernel = np.zeros((m, max(c // g, 1), *k), np.float32)
    params = {"num_output_maps": m, "kernel_shape": list(k), "strides": list(s), "pre_padding": list(pad),
              "post_padding": list(pad), "dilations": list(d), "groups": g}
    if post_ops:
        params["post_ops"] = post_ops
    return LayerFacts("conv", "Convolution", params, {"kernel": kernel}, [[n, c, *hw]], [[n, m, *hw]], [None],
                      precision, fmt=fmt)


def deconv(k=(2, 2), s=(2, 2), pad=0, g=1, d=1, c=16, m=16):
    kernel = np.zeros((c, m // g, *k), np.float32)
    params = {"num_output_maps": m, "kernel_shape": list(k), "strides": list(s), "pre_padding": [pad, pad],
              "post_padding": [0, 0], "dilations": [d, d], "groups": g}
    return LayerFacts("deconv", "Deconvolution", params, {"kernel": kernel}, [[1, c, 8, 8]], [[1, m, 16, 16]], [None])


def pool(t="MAX", w=(2, 2), s=(2, 2), pad=(0, 0), precision="float16", ranges=((-1, 1), (-1, 1))):
    params = {"type": t, "window": list(w), "strides": list(s), "pre_padding": list(pad), "post_padding": list(pad)}
    return LayerFacts("pool", "Pooling", params, {}, [[1, 8, 16, 16]], [[1, 8, 8, 8]], [None], precision,
                      [ranges[0]], [ranges[1]])


def act(t, alpha=0.0, beta=0.0, precision="float16", shape=(1, 8, 4, 4)):
    return LayerFacts("act", "Activation", {"type": t, "alpha": alpha, "beta": beta}, {}, [list(shape)],
                      [list(shape)], [None], precision)


def prelu(slope_shape):
    return LayerFacts("prelu", "Activation", {"type": "PRELU"}, {}, [[1, 8, 4, 4], list(slope_shape)],
                      [[1, 8, 4, 4]], [None, np.full(slope_shape, 0.1, np.float32)])


def eltwise(op, b_shape=(1, 8, 4, 4), consts=(None, None), precision="float16", out=(1, 8, 4, 4), **kw):
    return LayerFacts("ew", "ElementWise", {"op": op}, {}, [list(out), list(b_shape)], [list(out)], list(consts),
                      precision, **kw)


def cast_after_cmp(to="int8", explicit=True, precision="int8"):
    return LayerFacts("cast", "Cast", {"to": to, "from_comparison": True}, {}, [[1, 8, 4, 4]], [[1, 8, 4, 4]], [None],
                      precision, explicit_dla=explicit, precision_set=True)


def cmp(consumers=None, explicit=True, precision="int8", precision_set=True, is_output=False):
    f = eltwise("GREATER", precision=precision)
    f.consumers = [cast_after_cmp()] if consumers is None else consumers
    f.explicit_dla, f.precision_set, f.is_output = explicit, precision_set, is_output
    return f


def scale(mode="CHANNEL", power=None):
    w = {"scale": np.ones(8, np.float32), "shift": np.zeros(8, np.float32)}
    if power is not None:
        w["power"] = np.full(8, power, np.float32)
    return LayerFacts("scale", "Scale", {"mode": mode}, w, [[1, 8, 4, 4]], [[1, 8, 4, 4]], [None])


def lrn(window):
    return LayerFacts("lrn", "LRN", {"window": window}, {}, [[1, 8, 4, 4]], [[1, 8, 4, 4]], [None])


def concat(axis=1, shapes=((1, 8, 4, 4), (1, 4, 4, 4)), precision="float16", ranges=None, out_range=None):
    out = [1, sum(s[1] for s in shapes), 4, 4]
    return LayerFacts("cat", "Concatenation", {"axis": axis}, {}, [list(s) for s in shapes], [out],
                      [None] * len(shapes), precision, list(ranges or [None] * len(shapes)), [out_range])


def resize(scales, mode="NEAREST"):
    return LayerFacts("rs", "Resize", {"mode": mode}, {}, [[1, 8, 4, 4], None, [4]], [[1, 8, 8, 8]],
                      [None, None, np.asarray(scales, np.float32)])


def unary(op, precision="float16", shape=(1, 8, 4, 4)):
    return LayerFacts("un", "Unary", {"op": op}, {}, [list(shape)], [list(shape)], [None], precision)


def slice_(shape=(1, 8, 4, 4), axes=(1,), starts=(0,), ends=(4,), static=True, out=(1, 4, 4, 4)):
    consts = [None, np.asarray(starts), np.asarray(ends), np.asarray(axes), np.ones(len(axes), np.int64)]
    if not static:
        consts[1] = None
    return LayerFacts("sl", "Slice", {}, {}, [list(shape), [len(axes)], [len(axes)], [len(axes)], [len(axes)]],
                      [list(out)], consts)


def softmax(shape, axis=1, log=False):
    return LayerFacts("sm", "Softmax", {"axis": axis, "log": log}, {}, [list(shape)], [list(shape)], [None])


def shuffle(shape=(1, 8, 4, 4), first=None, dims=None, out=None):
    return LayerFacts("sh", "Shuffle", {"first_transpose": first, "reshape_dims": dims}, {}, [list(shape)],
                      [list(out or shape)], [None])


def reduce(op="MAX", axes=(1,), shape=(1, 8, 4, 4)):
    out = [1 if i in axes else d for i, d in enumerate(shape)]
    return LayerFacts("rd", "Reduce", {"op": op, "axes": list(axes), "keep_dims": True}, {}, [list(shape)], [out],
                      [None])


class Cal:
    def __init__(self, algo):
        self.algo = algo

    def get_algorithm(self):
        return self.algo


# (rule, inside, outside, context, substring of the outside reason)
TABLE = [
    # general limits (seed 000 L143–164; checklist DLA-02, DLA-10)
    ("general.batch", conv(n=4096, c=1, m=1, hw=(1, 1), k=(1, 1), pad=(0, 0)),
     conv(n=4097, c=1, m=1, hw=(1, 1), k=(1, 1), pad=(0, 0)), ORIN, "DLA batch 4097"),
    ("general.dims", act("RELU", shape=(1, 1, 1, 8192)), act("RELU", shape=(1, 1, 1, 8193)), ORIN, "exceeds 8192"),
    ("general.dynamic", conv(hw=(32, 32)), conv(hw=(-1, 32)), ORIN, "dynamic dims"),
    ("general.precision", conv(precision="float16"), conv(precision="float32"), ORIN, "FP16 and INT8 only"),
    ("general.qdq", conv(), LayerFacts("q", "Quantize", {}, {}, [[1, 8, 4, 4]], [[1, 8, 4, 4]], [None]), ORIN,
     "Q/DQ"),
    ("general.calibrator", conv(precision="int8"), conv(precision="int8"),
     (RuleContext(get_profile("orin"), int8=True, calibrator=Cal("ENTROPY_CALIBRATION_2")),
      RuleContext(get_profile("orin"), int8=True, calibrator=Cal("MINMAX_CALIBRATION"))), "EntropyCalibrator2"),
    ("kind", conv(), LayerFacts("g", "Gather", {}, {}, [[1, 8]], [[1, 8]], [None]), ORIN, "Gather"),
    # convolution (seed 000 L207–231)
    ("conv.spatial", conv(), LayerFacts("c3", "Convolution", {"kernel_shape": [3, 3, 3]}, {"kernel": np.zeros(1)},
                                        [[1, 8, 4, 4, 4]], [[1, 8, 4, 4, 4]], [None]), ORIN, "2 only"),
    ("conv.kernel", conv(k=(32, 1), pad=(0, 0)), conv(k=(33, 1), pad=(0, 0)), ORIN, "kernel [33, 1]"),
    ("conv.padding", conv(k=(32, 32), pad=(31, 31), c=1, hw=(8, 8)), conv(k=(32, 32), pad=(32, 32), c=1, hw=(8, 8)),
     ORIN, "[0, 31]"),
    ("conv.padding_lt_kernel", conv(k=(3, 3), pad=(2, 2)), conv(k=(3, 3), pad=(3, 3)), ORIN, "smaller than the kernel"),
    ("conv.stride", conv(s=(8, 8)), conv(s=(9, 8)), ORIN, "stride [9, 8]"),
    ("conv.dilation", conv(d=(32, 32)), conv(d=(33, 32)), ORIN, "dilation [33, 32]"),
    ("conv.output_maps", conv(m=8192, k=(1, 1), pad=(0, 0)), conv(m=8193, k=(1, 1), pad=(0, 0)), ORIN, "8193 output"),
    ("conv.input_channels", conv(c=8192, k=(1, 1), pad=(0, 0), hw=(1, 1), m=1),
     conv(c=8193, k=(1, 1), pad=(0, 0), hw=(1, 1), m=1), ORIN, "8193 input channels"),
    ("conv.groups_hwc4", conv(c=4, m=4, g=4, fmt="dla_hwc4"), conv(c=5, m=5, g=5, fmt="dla_hwc4"), ORIN,
     "kDLA_HWC4"),
    ("conv.cbuf", conv(c=64, m=64, k=(7, 7), pad=(3, 3), hw=(64, 64)),
     conv(c=512, m=64, k=(7, 7), pad=(3, 3), hw=(64, 64)), ORIN, "numConvBufBankAllotted 16"),
    ("act.type", conv(post_ops=[{"op": "activation", "type": "RELU"}]),
     conv(post_ops=[{"op": "activation", "type": "GELU_ERF"}]), ORIN, "GELU_ERF"),
    # deconvolution (seed 000 L233–251)
    ("deconv.kernel", deconv(k=(1, 64), s=(1, 1)), deconv(k=(1, 65), s=(1, 1)), ORIN, "kernel [1, 65]"),
    ("deconv.stride", deconv(k=(2, 2), s=(128, 1)), deconv(k=(2, 2), s=(33, 1)), ORIN, "stride [33, 1]"),
    ("deconv.square_23_32", deconv(k=(22, 22), s=(1, 1)), deconv(k=(23, 23), s=(1, 1)), ORIN, "square kernel"),
    ("deconv.padding", deconv(pad=0), deconv(pad=1), ORIN, "must be 0"),
    ("deconv.groups", deconv(g=1), deconv(g=2), ORIN, "2 groups"),
    ("deconv.dilation", deconv(d=1), deconv(d=2), ORIN, "dilation [2, 2]"),
    ("deconv.output_channels", deconv(m=8192, c=1), deconv(m=8193, c=1), ORIN, "8193 output channels"),
    # pooling (seed 000 L291–305)
    ("pool.type", pool("AVERAGE"), pool("LP"), ORIN, "LP"),
    ("pool.window", pool(w=(8, 8)), pool(w=(9, 8)), ORIN, "window [9, 8]"),
    ("pool.padding", pool(w=(8, 8), pad=(7, 7)), pool(w=(8, 8), pad=(8, 8)), ORIN, "[0, 7]"),
    ("pool.stride", pool(s=(16, 16)), pool(s=(17, 16)), ORIN, "stride [17, 16]"),
    ("pool.int8_scales", pool(precision="int8", ranges=((-2, 2), (-2, 2))),
     pool(precision="int8", ranges=((-2, 2), (-2.5, 2.5))), INT8, "equal input and output scales"),
    # activations (seed 000 L169–181, L287)
    ("act.type", act("LEAKY_RELU", 0.1), act("ELU"), ORIN, "activation ELU"),
    ("act.relu_slope", act("RELU", 0.0), act("RELU", -0.1), ORIN, "negative slope"),
    ("act.clip_range", act("CLIP", 0.0, 127.0), act("CLIP", 0.0, 128.0), ORIN, "[1, 127]"),
    ("act.clip_range", act("CLIP", 0.0, 1.0), act("CLIP", 0.0, 0.5), ORIN, "[1, 127]"),
    ("act.rank", act("RELU"), act("RELU", shape=(1, 8, 4)), ORIN, "2 spatial dims"),
    ("prelu.slope", prelu((1, 8, 1, 1)), prelu((8, 1, 1)), ORIN, "slope rank 3"),
    # element-wise (seed 000 L253–277)
    ("eltwise.op", eltwise("MIN"), eltwise("AND"), ORIN, "element-wise AND"),
    ("eltwise.broadcast", eltwise("SUM", (1, 8, 1, 1)), eltwise("SUM", (1, 1, 4, 4)), ORIN, "NC11 and N111"),
    ("eltwise.broadcast", eltwise("PROD", (1, 1, 1, 1)), eltwise("PROD", (1, 8, 4, 1)), ORIN, "NC11 and N111"),
    ("eltwise.div", eltwise("DIV", consts=(None, np.full((1, 8, 4, 4), 2.0)), precision="int8"),
     eltwise("DIV", consts=(None, np.arange(128.0).reshape(1, 8, 4, 4)), precision="int8"), INT8, "all values equal"),
    ("eltwise.div", eltwise("DIV", precision="int8"), eltwise("DIV"), ORIN, "divisor must be INT8"),
    ("eltwise.pow", eltwise("POW", consts=(None, np.full((1, 1, 1, 1), 2.0)), precision="int8"),
     eltwise("POW", consts=(None, np.full((1, 1, 1, 1), 2.0)), precision="float16"), INT8, "INT8"),
    # comparison + cast pairing (seed 000 L183–191)
    ("cmp.cast", cmp(), cmp(consumers=[cast_after_cmp(to="float32")]), INT8, "Cast/Identity to FP16 or INT8"),
    ("cmp.cast", cmp(), cmp(consumers=[cast_after_cmp(), cast_after_cmp()]), INT8, "only consumer"),
    ("cmp.int8", cmp(), cmp(precision="float16"), INT8, "INT8 layer precision"),
    ("cmp.int8_flag", cmp(), cmp(), (INT8, ORIN), "INT8 builder flag"),
    ("cmp.explicit", cmp(), cmp(explicit=False), INT8, "set to DLA explicitly"),
    ("cmp.output", cmp(), cmp(is_output=True), INT8, "network or DLA subnetwork output"),
    ("cmp.cast", cast_after_cmp(), cast_after_cmp(explicit=False), INT8, "set explicitly"),
    # scale (seed 000 L327–335)
    ("scale.mode", scale("ELEMENTWISE"), scale("PER_ROW"), ORIN, "PER_ROW"),
    ("scale.power", scale(power=1.0), scale(power=2.0), ORIN, "power"),
    # LRN (seed 000 L279–285)
    ("lrn.window", lrn(9), lrn(11), ORIN, "window 11"),
    ("lrn.window", lrn(3), lrn(4), ORIN, "window 4"),
    # concatenation (seed 000 L193–205)
    ("concat.axis", concat(axis=-3), concat(axis=2), ORIN, "axis 2"),
    ("concat.inputs", concat(), concat(shapes=((1, 8, 4, 4),)), ORIN, ">= 2"),
    ("concat.spatial", concat(), LayerFacts("cat", "Concatenation", {"axis": 1}, {}, [[1, 8, 4, 4], [1, 8, 4, 5]],
                                            [[1, 16, 4, 4]], [None, None]), ORIN, "different spatial"),
    ("concat.int8_ranges", concat(precision="int8", ranges=[(-1, 1), (-1, 1)], out_range=(-1, 1)),
     concat(precision="int8", ranges=[(-1, 1), (-2, 2)], out_range=(-1, 1)), INT8, "equal input and output"),
    # resize (seed 000 L317–325)
    ("resize.scales", resize([1, 1, 2, 2]), resize([1, 2, 2, 2]), ORIN, "N and C scales must be 1"),
    ("resize.hw_scales", resize([1, 1, 32, 32]), resize([1, 1, 33, 32]), ORIN, "[1, 32] (nearest)"),
    ("resize.hw_scales", resize([1, 1, 4, 4], "LINEAR"), resize([1, 1, 5, 4], "LINEAR"), ORIN, "[1, 4] (bilinear)"),
    ("resize.hw_scales", resize([1, 1, 2, 2]), resize([1, 1, 1.5, 2]), ORIN, "integers"),
    ("resize.mode", resize([1, 1, 2, 2], "LINEAR"), resize([1, 1, 2, 2], "CUBIC"), ORIN, "CUBIC"),
    # unary (seed 000 L375–381)
    ("unary.op", unary("ABS"), unary("EXP"), ORIN, "unary EXP"),
    ("unary.int8", unary("SIN", precision="int8"), unary("SIN"), INT8, "needs INT8"),
    # slice (seed 000 L347–357)
    ("slice.batch", slice_(), slice_(axes=(0,), ends=(1,), shape=(2, 8, 4, 4), out=(1, 8, 4, 4)), ORIN, "batch dim"),
    ("slice.static", slice_(), slice_(static=False), ORIN, "build-time constants"),
    ("slice.rank", slice_(), slice_(shape=(1, 8, 4), out=(1, 4, 4)), ORIN, "4-D input"),
    ("slice.batch", LayerFacts("sp", "Split", {"axis": 1}, {}, [[2, 8, 4, 4]], [[2, 4, 4, 4]] * 2, [None]),
     LayerFacts("sp", "Split", {"axis": 0}, {}, [[2, 8, 4, 4]], [[1, 8, 4, 4]] * 2, [None]), ORIN, "batch dim"),
    # softmax (seed 000 L359–373)
    ("softmax.profile", softmax((1, 8, 1, 1)), softmax((1, 8, 1, 1)), (ORIN, XAVIER), "Orin only"),
    ("softmax.axis", softmax((1, 8, 1, 1), axis=1), softmax((1, 8, 1, 1), axis=0), ORIN, "non-batch"),
    ("softmax.optimized_axis", softmax((1, 1024, 2, 1)), softmax((1, 1025, 2, 1)), ORIN, "1024, got 1025"),
    ("softmax.dims", softmax((1, 8192, 1, 1)), softmax((1, 8193, 1, 1)), ORIN, "[1, 8192]"),
    ("softmax.kind", softmax((1, 8, 1, 1)), softmax((1, 8, 1, 1), log=True), ORIN, "LogSoftmax"),
    # shuffle (seed 000 L337–345)
    ("shuffle.rank", shuffle(), shuffle(shape=(1, 8, 16), out=(1, 8, 16)), ORIN, "4-D input"),
    ("shuffle.batch", shuffle(first=[0, 2, 3, 1], out=(1, 4, 4, 8)), shuffle(first=[1, 0, 2, 3], out=(8, 1, 4, 4)),
     ORIN, "batch dim cannot take part in a transpose"),
    ("shuffle.batch", shuffle(dims=[1, 8, 16, 1], out=(1, 8, 16, 1)), shuffle(shape=(2, 8, 4, 4), dims=[1, 16, 4, 4],
                                                                             out=(1, 16, 4, 4)), ORIN, "reshape"),
    # reduce (seed 000 L307–315)
    ("reduce.op", reduce("MAX", (1, 2, 3)), reduce("SUM", (1,)), ORIN, "reduce SUM"),
    ("reduce.axes", reduce("MAX", (2, 3)), reduce("MAX", (0,)), ORIN, "batch dim"),
    ("reduce.rank", reduce(), reduce(shape=(1, 8, 4), axes=(1,)), ORIN, "4-D input"),
    ("unary.dims", unary("ABS", shape=(1, 1, 1, 8192)), unary("ABS", shape=(1, 1, 1, 8193)), ORIN, "[1, 8192]"),
]


@pytest.mark.parametrize("rule,inside,outside,ctx,text", TABLE, ids=[f"{r[0]}-{i}" for i, r in enumerate(TABLE)])
def test_rule_table(rule, inside, outside, ctx, text):
    ctx_in, ctx_out = ctx if isinstance(ctx, tuple) else (ctx, ctx)
    v_in = check(inside, ctx_in)
    assert v_in.ok, f"just inside {rule} was rejected: {v_in.reason}"
    v_out = check(outside, ctx_out)
    assert not v_out.ok, f"just outside {rule} was accepted"
    assert v_out.rule == rule, v_out.reason
    assert v_out.reason.startswith(f"[{rule}] ") and text in v_out.reason, v_out.reason


def test_every_layer_family_of_seed_000_is_in_the_table():
    families = {r[0].split(".")[0] for r in TABLE}
    assert {"general", "conv", "deconv", "pool", "act", "prelu", "eltwise", "cmp", "scale", "lrn", "concat",
            "resize", "unary", "slice", "softmax", "shuffle", "reduce"} <= families


def test_notes_decompositions_and_upgrades():
    v = check(act("HARD_SWISH", 1 / 6, 0.5))
    assert v.ok and "Scale + Clipped ReLU(1) + Product" in v.reason
    v = check(act("TANH", precision="int8"), INT8)
    assert v.ok and "upgraded to FP16" in v.reason
    v = check(reduce("AVG", (2, 3), shape=(1, 8, 56, 56)))
    assert v.ok and "[8, 7] x [8, 7]" in v.reason
    v = check(reduce("AVG", (2, 3), shape=(1, 8, 11, 11)))
    assert not v.ok and v.rule == "reduce.op"
    assert pool_stages(14) == [7, 2] and pool_stages(13) is None
    assert softmax_mode([1, 8, 1, 1], 1) == "accurate" and softmax_mode([1, 8, 2, 1], 1) == "optimized"
    assert "Xavier" in check(eltwise("SUB"), XAVIER).reason and check(eltwise("SUB"), ORIN).notes == []
