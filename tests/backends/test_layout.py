"""Layout pass (seed 004): NHWC conversion of conv regions, transpose insertion and pair cancellation."""
import numpy as np
from onnx import helper

from backends.engine.builder.passes.layout import count_transposes
from tests.backends.fusion_helpers import RNG, build, const, kinds, model, run


def _cnn():
    """conv → relu → maxpool → conv → add(residual) → relu → avgpool → conv(1×1) → global avg pool."""
    w1 = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = RNG.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    w3 = RNG.standard_normal((4, 8, 1, 1)).astype(np.float32) * 0.3
    b1 = RNG.standard_normal(8).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["a2"], name="add2"),
             helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
             helper.make_node("AveragePool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p2", "w3"], ["c3"], name="conv3"),
             helper.make_node("GlobalAveragePool", ["c3"], ["y"], name="gap")]
    return model(nodes, [("x", [2, 3, 16, 16])], ["y"], [const("w1", w1), const("w2", w2), const("w3", w3),
                                                         const("b1", b1)])


def test_nhwc_leaves_exactly_entry_and_exit_transposes():
    m = _cnn()
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    for fusion in (True, False):
        nchw, nhwc = build(m, fusion=fusion, nhwc=False), build(m, fusion=fusion, nhwc=True)
        assert count_transposes(nchw) == 0
        assert count_transposes(nhwc) == 2
        np.testing.assert_allclose(run(nhwc, {"x": x})[0], run(nchw, {"x": x})[0], rtol=1e-5, atol=1e-5)
        ks = kinds(nhwc)
        assert ks[0] == "Shuffle" and ks[-1] == "Shuffle"
        assert "Convolution" not in ks and ks.count("ConvolutionNHWC") == 3 and "Pooling" not in ks


def test_layout_off_by_default_on_cpu_and_by_flag():
    m = _cnn()
    assert "ConvolutionNHWC" not in kinds(build(m))
    assert "ConvolutionNHWC" not in kinds(build(m, nhwc=True, layout=False))


def test_nhwc_stops_at_layout_sensitive_ops():
    """A Flatten after the conv region needs NCHW again: one transpose in, one out, same values."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["s", "k"], ["m"], name="scale"),
             helper.make_node("Flatten", ["m"], ["y"], name="flat")]
    m = model(nodes, [("x", [1, 3, 5, 5])], ["y"], [const("w", w), const("k", np.float32(2.0))])
    x = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    g = build(m, fusion=False, nhwc=True)
    assert count_transposes(g) == 2
    np.testing.assert_allclose(run(g, {"x": x})[0], run(build(m, fusion=False), {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_transpose_pair_elimination_keeps_the_views_maps_as_a_refresh_builds_them():
    """eliminate_pairs rewires through View.bypass, which updates the producer / consumer maps in place instead
    of a full refresh per pair (quadratic on ssdlite's ~2000 layers): the maps must equal a fresh View's, in order."""
    from backends.engine.builder.passes.fusion_util import View
    from backends.engine.builder.passes.nhwc import TO_NCHW, TO_NHWC, eliminate_pairs
    from backends.engine.engine_graph import Graph, Node, TensorInfo

    def t(name, src, dst, perm):
        return Node(name=name, kind="Shuffle", inputs=[src], outputs=[dst],
                    params={"first_transpose": list(perm), "reshape_dims": None, "second_transpose": None})
    nodes = [Node(name="a", kind="Activation", inputs=["x"], outputs=["x1"], params={"type": "RELU"}),
             t("t1", "x1", "n1", TO_NHWC), t("t2", "n1", "c1", TO_NCHW),
             Node(name="b", kind="Activation", inputs=["x1"], outputs=["y1"], params={"type": "RELU"}),
             Node(name="c", kind="ElementWise", inputs=["c1", "x1"], outputs=["y2"], params={"op": "SUM"}),
             t("t3", "y2", "n3", TO_NHWC), t("t4", "n3", "c3", TO_NCHW),
             Node(name="d", kind="Activation", inputs=["c3"], outputs=["y3"], params={"type": "RELU"})]
    g = Graph(name="g", inputs=[TensorInfo("x", "float32", [1, 2, 3, 4])],
              outputs=[TensorInfo("y1", "float32", None), TensorInfo("y3", "float32", None)])
    g.set_nodes(nodes)
    view = View(g)
    assert eliminate_pairs(g, view) == 2
    assert [n.name for n in g.nodes] == ["a", "t1", "b", "c", "t3", "d"]
    fresh = View(g)
    assert view.prod == fresh.prod
    assert {k: [n.name for n in v] for k, v in view.cons.items()} == \
        {k: [n.name for n in v] for k, v in fresh.cons.items()}
    assert [n.name for n in view.cons["x1"]] == ["t1", "b", "c", "c"]
