"""CPU convolution and transposed convolution, one module per tactic family (N-d, NCHW layouts).

Convolution tactics the builder times against each other (registration order breaks near-ties):
  im2col_gemm.py    im2col-gemm   column matrix of all kernel taps, one BLAS GEMM (handles everything)
  pointwise_1x1.py  1x1-gemm      pointwise convolution as a direct GEMM on the (strided) input
  depthwise.py      depthwise     groups == channels == outputs: per-tap multiply-accumulate, no GEMM
  depthwise_cl.py   depthwise-cl  the same channels-last between two reformats (many channels, small maps)
  conv1d_gemm.py    conv1d-gemm   1-D convolutions as 2-D ones of height 1 through the banded GEMM driver
  shifted_gemm.py   shifted-gemm  stride 1: kh*kw GEMMs over shifted windows of the flattened input
  winograd.py       winograd-f2x3, winograd-f4x3   3x3 stride 1: Winograd minimal filtering (other rounding)
                    winograd-f2x3-jit  F(2x2, 3x3) with compiled transforms (numba extra), bands over the CPU pool
                    winograd-f2x3-jit-bands  the same in smaller bands, for layers larger than one band
  sliding_window.py sliding-window  kh GEMMs of K = C*kw, one per kernel row (any stride; row partial sums)
  nhwc_gemm.py      nhwc-gemm     channel-last patches and one GEMM between two reformats (timed with them)
  nhwc_bands.py     nhwc-gemm-bands  the same in bands of output rows over the CPU pool, epilogue in the band
  row_bands.py      shifted-gemm-bands, sliding-window-bands: those two in bands of output rows over the CPU pool
  conv1d_direct.py  conv1d-direct small 1-D convolutions as a compiled loop (numba extra): no patch matrix, no GEMM
  conv1d_frames.py  conv1d-frames long-kernel 1-D convolutions (STFT, resampler) as frames x weights in channel bands
  conv1d_dft.py     conv1d-dft    an STFT as Conv (weights a windowed DFT basis) as real FFTs of windowed frames
  fft.py            fft           5x5+ kernels, stride 1: products of 2-D FFTs (error relative to the plane)
  phase_gemm.py     phase-gemm-s2  3x3 stride 2: four GEMMs over the input's phase planes, no patch matrix (numba extra)
  panel_gemm.py     nhwc-gemm-panels(-polyexp)  nhwc-gemm's GEMM by the compiled panel GEMM on the kernel packed at
                    build time (matmul_panels; numba extra; other rounding)
  patch_panels.py   patch-gemm-panels  kernel == stride (a ViT's patch embedding): the input reordered into its
                    non-overlapping patches, one panel GEMM (numba extra; other rounding)
  direct_panels.py  direct-panels  stride 1, no H padding: a compiled GEMM reading the NCHW input in place, 32
                    pixels x 8 channels a block, W padding as lane masks, bias + LeakyRelu / clip in registers,
                    halves over the CPU pool without the GIL (numba extra; other rounding)
  stem_direct.py    stem-direct-shares  3x3 over <= 4 input channels (a stem), direct, two row halves as kernel
                    shares (numba extra; other rounding)
  winograd_shares.py winograd-f2x3-shares  winograd-f2x3-jit's compiled band, two halves of tile rows as kernel
                    shares (numba extra; other band cuts)
  stem_gemm.py      stem-gemm-shares  few-channel k x k stems (resnet's 7x7 / 2): banded GEMMs over patch rows copied
                    from phase planes, two halves of the bands as kernel shares (numba extra; other rounding)
  phase_direct.py   phase-direct-s2  3x3 stride 2: a direct kernel (8 channels x 32 pixels in registers) over the
                    phase planes, bias + RELU / SiLU fused, two halves of the bands as kernel shares (numba extra)
  padded_direct.py  padded-direct-s1  3x3 stride 1: the same kernel over bands of the zero-padded input (no lane
                    masks; numba extra; other rounding)
  silu_polyexp.py   im2col-gemm-polyexp, 1x1-gemm-polyexp, nhwc-gemm-polyexp, nhwc-gemm-bands-polyexp: the base
                    tactic with its SiLU post-op by polyexp's exp in one compiled pass (numba extra; other floats)
Transposed convolution: deconv.py (gemm-col2im, gemm-col2im-bands: the 2x upsamplers over the CPU pool,
deconv-tiles-jit: few outputs a pixel as one compiled loop, and ONNX Col2Im).

Shared by the tactics: geometry.py (pads, output sizes, tap views; pooling uses it too), weights.py (finding and
packing kernel/bias), epilogue.py (bias, fused post-ops, merged shortcut), gemm2d.py (the threaded banded 2-D
GEMM driver of im2col-gemm and 1x1-gemm), flat_patches.py (im2col-gemm's single-threaded path for stride-1 layers
whose output rows are as wide as their input's: patches copied from the flattened input, the same floats),
tuning.py (cache blocks and parallel thresholds).
"""
from native.cpu.kernels.conv import im2col_gemm, pointwise_1x1, depthwise, shifted_gemm, winograd, deconv  # noqa: F401
from native.cpu.kernels.conv import sliding_window, nhwc_gemm, fft, depthwise_cl, conv1d_gemm  # noqa: F401,E402
from native.cpu.kernels.conv import nhwc_bands, conv1d_direct, conv1d_frames, conv1d_dft  # noqa: F401,E402
from native.cpu.kernels.conv import row_bands  # noqa: F401,E402
from native.cpu.kernels.conv import silu_polyexp  # noqa: F401,E402  (after their bases: a near tie keeps the base)
from native.cpu.kernels.conv import phase_gemm  # noqa: F401,E402  (new: a near tie keeps the older tactics)
from native.cpu.kernels.conv import panel_gemm  # noqa: F401,E402  (newer still)
from native.cpu.kernels.conv import patch_panels  # noqa: F401,E402  (newer still)
from native.cpu.kernels.conv import direct_panels  # noqa: F401,E402  (newer still)
from native.cpu.kernels.conv import stem_direct  # noqa: F401,E402  (newer still)
from native.cpu.kernels.conv import winograd_shares  # noqa: F401,E402  (newer still)
from native.cpu.kernels.conv import stem_gemm  # noqa: F401,E402  (newest)
from native.cpu.kernels.conv import phase_direct  # noqa: F401,E402  (newer than stem_gemm: a near tie keeps the others)
from native.cpu.kernels.conv import padded_direct  # noqa: F401,E402  (newest)
# (importing registers them; the order is the near-tie order)
from native.cpu.kernels.conv.deconv import Col2Im, DeconvGemmCol2im, deconv_geometry, scatter_taps  # noqa: F401
from native.cpu.kernels.conv.depthwise import Depthwise, depthwise2d  # noqa: F401
from native.cpu.kernels.conv.epilogue import side_input, side_term  # noqa: F401
from native.cpu.kernels.conv.gemm2d import conv2d_gemm  # noqa: F401
from native.cpu.kernels.conv.geometry import flat_taps, geometry, pad_input, resolve_pads, tap_slices  # noqa: F401
from native.cpu.kernels.conv.im2col_gemm import Im2colGemm  # noqa: F401
from native.cpu.kernels.conv.pointwise_1x1 import PointwiseGemm  # noqa: F401
from native.cpu.kernels.conv.shifted_gemm import ShiftedGemm  # noqa: F401
from native.cpu.kernels.conv.weights import conv_bias  # noqa: F401
from native.cpu.kernels.conv import fp16_accumulate  # noqa: F401,E402  (the FP16-accumulate variant, last)
