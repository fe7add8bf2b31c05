"""Sibling STFT convolutions → one: an STFT exported as two Convs of one signal (openWakeWord's melspectrogram:
the real part's 257 cosine rows and the imaginary part's 257 sine rows, each ~110 us of the model's ~300 on one
CPU thread) becomes one Convolution over the concatenated rows plus a Split into the two original tensors, so one
layer frames the signal once and the conv1d-dft-shared tactic runs one FFT per frame for both parts (their fitted
windows agree within its fit tolerance). Only for weights that are such a basis, where the merged layer shares
a transform (`dft_plan(..., share=True)` finds fewer windows than blocks): other sibling convolutions are left as
they are. The merged layer computes the same products; its tactic (timed as any other) decides the floats. Only
where the device has that shared-window tactic (`merges_stft_convs`: the CPU).
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.fusion_util import fused_node
from native.cpu.kernels.conv.conv1d_dft import dft_plan

_SAME = ("kernel_shape", "strides", "pre_padding", "post_padding", "dilations", "groups", "auto_pad")


def _key(n):
    """Group key of a Convolution that may merge with its siblings (one input channel, constant kernel, no bias or
    post-ops, one output), else None."""
    w = n.weights.get("kernel")
    if n.kind != "Convolution" or w is None or len(n.outputs) != 1 or set(n.weights) != {"kernel"} or \
            len([i for i in n.inputs if i is not None]) != 1 or n.params.get("post_ops") or \
            n.meta.get("output_types") or np.ndim(w) not in (3, 4) or np.shape(w)[1] != 1 or \
            (n.params.get("groups", 1) or 1) != 1:
        return None
    return (n.inputs[0], str(np.asarray(w).dtype), np.shape(w)[1:], n.meta.get("precision_constraint"),
            tuple(str(n.params.get(k)) for k in _SAME))


def merge_sibling_stfts(graph, config, logger) -> int:
    if not getattr(getattr(config, "device", None), "merges_stft_convs", False):
        return 0
    groups: dict = {}
    for n in graph.nodes:
        key = _key(n)
        if key is not None:
            groups.setdefault(key, []).append(n)
    count = 0
    for key, nodes in groups.items():
        if len(nodes) < 2:
            continue
        kernel = np.concatenate([np.asarray(n.weights["kernel"]) for n in nodes], axis=0)
        plan = dft_plan(kernel, share=True)
        if isinstance(plan, str) or len(plan[1]) >= len(plan[2]):   # not a DFT basis, or no transform shared
            continue
        sizes = [int(np.shape(n.weights["kernel"])[0]) for n in nodes]
        params = dict(nodes[0].params, num_output_maps=int(sum(sizes)))
        merged = nodes[0].outputs[0] + "/merged_stft"
        conv = fused_node(nodes, "Convolution", [key[0]], [merged], params, {"kernel": kernel})
        split = fused_node(nodes, "Split", [merged], [n.outputs[0] for n in nodes], {"axis": 1, "split": sizes},
                           name=conv.name + " (split)")
        graph.replace_nodes(nodes, [conv, split], where="first")
        graph.tensor_info.pop(merged, None)
        logger.verbose(f"fusion: {len(nodes)} STFT convolutions of '{key[0]}' merged → '{conv.name}' ({sizes})")
        count += 1
    return count
