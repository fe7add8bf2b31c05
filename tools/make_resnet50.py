"""Write a ResNet-50-shaped ONNX model (random weights, BatchNorm folded into the convolutions, as a deployment
export has it) for benchmarks and searches that need a real-sized CNN without torchvision.

    python tools/make_resnet50.py -o resnet50.onnx [--size 224] [--seed 0] [--blocks 3 4 6 3] [--batch 1|N]

Stem conv 7x7/2 + ReLU + MaxPool 3x3/2, four stages of bottleneck blocks (1x1 -> 3x3 -> 1x1, x4 expansion, a 1x1
projection on the first block of a stage), global average pool, a 1000-way Gemm: 53 Conv, 49 ReLU, 16 Add, 122
nodes in all. Weights are He-initialised; each block's last convolution is scaled by 0.25 (what a trained network's
last BatchNorm gamma does), so activations keep their scale through the 16 residual additions.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def resnet50(size: int = 224, seed: int = 0, blocks=(3, 4, 6, 3), classes: int = 1000,
             batch=1) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x, cin, cout, k, stride, name, scale=1.0):
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)) * scale).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.weight"), numpy_helper.from_array(b, f"{name}.bias")])
        p = k // 2
        nodes.append(helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"], [f"{name}.out"], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p]))
        return f"{name}.out"

    def relu(x, name):
        nodes.append(helper.make_node("Relu", [x], [f"{name}.out"], name=name))
        return f"{name}.out"

    x = relu(conv("input", 3, 64, 7, 2, "conv1"), "relu1")
    nodes.append(helper.make_node("MaxPool", [x], ["maxpool.out"], name="maxpool", kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "maxpool.out", 64
    for s, n in enumerate(blocks):
        width = 64 * 2 ** s
        for b in range(n):
            stride = 2 if (b == 0 and s > 0) else 1
            p = f"layer{s + 1}.{b}"
            y = relu(conv(x, cin, width, 1, 1, f"{p}.conv1"), f"{p}.relu1")
            y = relu(conv(y, width, width, 3, stride, f"{p}.conv2"), f"{p}.relu2")
            y = conv(y, width, width * 4, 1, 1, f"{p}.conv3", scale=0.25)
            short = conv(x, cin, width * 4, 1, stride, f"{p}.downsample") if b == 0 else x
            nodes.append(helper.make_node("Add", [y, short], [f"{p}.add.out"], name=f"{p}.add"))
            x, cin = relu(f"{p}.add.out", f"{p}.relu3"), width * 4
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool.out"], name="avgpool"))
    nodes.append(helper.make_node("Flatten", ["pool.out"], ["flat.out"], name="flatten", axis=1))
    w = (rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin)).astype(np.float32)
    inits.extend([numpy_helper.from_array(w, "fc.weight"),
                  numpy_helper.from_array(np.zeros(classes, np.float32), "fc.bias")])
    nodes.append(helper.make_node("Gemm", ["flat.out", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "resnet50",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_resnet50")
    model.ir_version = 8
    return model


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--blocks", type=int, nargs=4, default=[3, 4, 6, 3], help="blocks per stage (ResNet-50: 3 4 6 3)")
    p.add_argument("--batch", default="1", help="the input's batch dimension: a number, or a name for a dynamic "
                   "one (default 1)")
    a = p.parse_args(argv)
    batch = int(a.batch) if a.batch.isdigit() else a.batch
    model = resnet50(a.size, a.seed, a.blocks, batch=batch)
    onnx.checker.check_model(model)
    from debugkit.surgeon.external_data import save_model
    save_model(model, a.output)
    print(f"wrote {a.output}: {len(model.graph.node)} nodes, input [{batch}, 3, {a.size}, {a.size}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
