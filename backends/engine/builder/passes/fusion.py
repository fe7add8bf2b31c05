"""Fusion driver: runs the fusion passes in order over the builder's Graph (skipped by BuilderFlag.DISABLE_FUSION).

Order matters: clean-ups first (so patterns see through Identity / no-op nodes), then the pattern rebuilders
(GELU, LayerNorm, Softmax, attention) that need the decomposed ElementWise / Unary nodes, then weight folding and
epilogues on convolutions and matrix multiplies, and last the generic pointwise chains over what is left.
Each pass is `f(graph, config, logger) -> rewrites`; matches are logged at verbose level, the totals at info.
"""
from __future__ import annotations

from backends.engine.builder.passes.attention_heads import fold_attention_heads
from backends.engine.builder.passes.fusion_residual_norm import fuse_residual_norm
from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.builder.passes.dedupe import dedupe_layers
from backends.engine.builder.passes.fusion_epilogue import (fold_conv_scale, fold_relu6_swish, fuse_epilogues,
                                                           fuse_norm_activation)
from backends.engine.builder.passes.fusion_patterns import (fuse_attention, fuse_gelu, fuse_layernorm, fuse_silu,
                                                          fuse_softmax, merge_parallel_gemms)
from backends.engine.builder.passes.fusion_pool import move_activation_past_maxpool
from backends.engine.builder.passes.fusion_ir import fuse_inverted_residual
from backends.engine.builder.passes.fusion_se import fuse_squeeze_excite
from backends.engine.builder.passes.fusion_shortcut import merge_shortcut_convs
from backends.engine.builder.passes.fusion_stft import merge_sibling_stfts
from backends.engine.builder.passes.fusion_pointwise import (eliminate_identities, fuse_pointwise, merge_reshape_transpose,
                                                           merge_shuffles, sink_gemm_reshapes)

PASSES = [
    ("identity elimination", eliminate_identities),
    ("duplicate layers", dedupe_layers),
    ("shuffle merging", merge_shuffles),
    ("activation past max pool", move_activation_past_maxpool),
    ("GELU patterns", fuse_gelu),
    ("SiLU patterns", fuse_silu),
    ("LayerNorm patterns", fuse_layernorm),
    ("Softmax patterns", fuse_softmax),
    ("attention", fuse_attention),
    ("conv + BatchNorm/Scale folding", fold_conv_scale),
    ("conv/matmul epilogues", fuse_epilogues),
    ("normalization + activation", fuse_norm_activation),
    ("parallel GEMM merging", merge_parallel_gemms),
    ("sibling STFT convolutions", merge_sibling_stfts),
    ("reshapes around GEMMs", sink_gemm_reshapes),
    ("conv/matmul epilogues (after reshape removal)", fuse_epilogues),
    ("shortcut convs into their residual conv", merge_shortcut_convs),
    ("squeeze-excite blocks", fuse_squeeze_excite),
    ("pointwise chains", fuse_pointwise),
    ("hard-swish chains into their conv", fold_relu6_swish),
    ("inverted-residual blocks", fuse_inverted_residual),
    ("reshape/transpose merging", merge_reshape_transpose),
    ("attention heads as strides", fold_attention_heads),
    ("residual add + LayerNorm", fuse_residual_norm),
]


def run_fusions(graph, config, logger) -> int:
    before = len(graph.nodes)
    total, done = 0, []
    for label, fn in PASSES:
        n = fn(graph, config, logger)
        if n:
            done.append(f"{label}: {n}")
        total += n
    eliminate_dead_layers(graph, config)
    for node in graph.nodes:   # fuse inside If / Loop / Scan bodies too
        for sub in node.subgraphs.values():
            total += run_fusions(sub, config, logger)
    if done:
        logger.info(f"fusion: {total} rewrites, {before} → {len(graph.nodes)} layers ({'; '.join(done)})")
    return total
