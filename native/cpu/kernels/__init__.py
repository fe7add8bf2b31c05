"""CPU tactics, one module per layer family; importing this package registers them all."""
from native.cpu.kernels import (  # noqa: F401
    core, elementwise, reduce, conv, matmul, pooling, norm, resize, rnn, tensor, quantize, control, sequence,
    plugins, fused, losses, training, deform_conv, matmul_splitk, reduce_variants, reformat, matmul_fp16acc,
    pooling_variants, squeeze_excite, matmul_rows)
from native.cpu.kernels import conv_int8, matmul_int8, pooling_int8  # noqa: F401,E402  (INT8 tactics)
from native.cpu.kernels import mlas_conv  # noqa: F401,E402  (ONNX Runtime's FP32 order, for Q/DQ emulation)
from native.cpu.kernels import matmul_panels  # noqa: F401,E402  (a compiled GEMM on packed panels)
from native.cpu.kernels import matmul_gemv  # noqa: F401,E402  (a one-row GEMM as dot products)
from native.cpu.kernels import pooling_tiles  # noqa: F401,E402  (max pools whose windows tile the map)
from native.cpu.kernels import inverted_residual  # noqa: F401,E402  (passes/fusion_ir.py's fused blocks)
from native.cpu.kernels import norm_residual  # noqa: F401,E402  (passes/fusion_residual_norm.py's LayerNorms)
from native.cpu.kernels import gemv_shares  # noqa: F401,E402  (one-row products as kernel shares)
from native.cpu.kernels import pooling_shares  # noqa: F401,E402  (max pools as kernel shares)

from native.cpu import precision as _precision  # noqa: E402
from native.tactics import registered_tactics as _registered  # noqa: E402

_precision.declare_precisions(_registered("cpu"))  # what each tactic computes in (native/cpu/precision.py)
