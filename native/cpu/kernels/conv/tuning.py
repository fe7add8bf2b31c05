"""Convolution tuning knobs: cache-block sizes and the work below which a layer stays on the calling thread.

Read at call time through this module (`tuning.X`), so tests and experiments can change them in one place."""

COLS_BYTES = 1 << 20  # patch-matrix bytes per GEMM call: still in cache when the GEMM reads it
DW_BYTES = 1 << 18  # depthwise accumulator block (cache)
# below this many multiply-adds a layer runs on the calling thread: a parallel_for costs 25-100 us on a 2-vCPU VM
# (waking the pool thread, handing the GIL over, waking the caller again, and the worker starting late), more than
# the split saves below ~4M MACs of GEMM (~0.1 ms on one core). Paired A/B against 1M and 16M: ppocr_v4_det 5.7%
# faster than at 16M, yolov8n 2% faster than at 1M.
PARALLEL_MIN_MACS = 1 << 22
PARALLEL_MIN_DW_MACS = 1 << 18  # depthwise: numpy multiply-adds run ~1 ns per MAC, so the bar is far lower
# depthwise through the compiled loops (the jit extra) runs ~0.1 ns per MAC: a split pays from ~0.4 ms of work. Paired
# A/B against 1 << 18 (2-core VM, load ~1): ppocr_cls 0.94x, mobilenetv3 0.93x (a no-op hand-off measured 76-118 us)
PARALLEL_MIN_DW_JIT_MACS = 1 << 22
# an epilogue over at least this many elements is split over the pool (a hand-off costs 25-100 us on a VM)
PARALLEL_EPILOGUE_MIN = 1 << 20
# winograd-f2x3-jit: bytes of one band's transformed input and GEMM output ([16, C + M, tiles] float32). Sub-bands of
# fewer tile rows ran no faster on one thread (one-thread A/B, 2-8 MiB, yolov8n and resnet18 shapes) and at some
# splits slower (resnet18's 128-channel 28x28 layer 1.29 ms in two sub-bands against 0.80 in one)
WINOGRAD_BYTES = 1 << 23
# winograd-f2x3-jit-bands (layers over WINOGRAD_BYTES): PaddleOCR v4's 96 -> 24 channels at 160x160 / 80x80, one thread:
# 8 MiB 8.0-8.4 / 1.43 ms, 4 MiB 6.0 / 1.32, 3 MiB 5.5-5.7 / 1.17-1.20, 2 MiB 5.6-5.8 / 1.25, 1 MiB 7.2-7.5 / 1.52
WINOGRAD_LARGE_BYTES = 3 << 20
# phase-gemm-s2: bytes of one band's phase planes and GEMM output ([4C + M, rows + 1, Wo + 1] float32)
PHASE_GEMM_BYTES = 1 << 20
# a stride-1 1x1 convolution (1x1-gemm's direct bands) under this many multiply-adds runs its two bands one after
# the other on the caller (the same GEMM calls, so the same floats as split): split, yolov8n's 80x80 / 40x40 1x1
# layers (6-13 M MACs) ran 0.79-0.82x one thread, as GEMM shares (their descriptors, the post and the wait cost more
# than half of a ~65 us GEMM saves, the epilogue stays on the caller) or, refused, as Python parts (h76, gated
# two-thread profile, 2026-11-29 10:11)
DIRECT_SPLIT_MIN_MACS = 1 << 25
