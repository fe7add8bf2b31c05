"""The DLA device: buffers are numpy arrays on the host, kernels are the CPU's with DLA numerics."""
from native.cpu.device import CpuDevice
from native.precision import Precision


class DlaDevice(CpuDevice):
    name = "dla"
    int8_rounding = "half_away"   # FP32 -> INT8 ties away from zero (seed 001 L829)
    calibrates_on = "cpu"         # the DLA's calibration statistics are the host's FP32 activations
    precisions = frozenset({Precision.FP16, Precision.INT8, Precision.FP32})   # FP32: layers left on the host
    fuses_squeeze_excite = False  # the DLA rules place the four layers one by one (native/dla/rules.py)
    fuses_relu6_swish = False     # nor do they know a HARD_SWISH_RELU6 post-op
    fuses_bound_clip = False      # nor do they know a convolution's CLIP post-op from a max / min
    fuses_residual_norm = False   # nor a LayerNorm that adds its residual first
    attention_heads_as_strides = False   # DLA builds keep the head split / merge layers as they were
    norm_post_ops = False

    def load_tactics(self):
        from native.tactics import tactics_for
        tactics_for("Convolution", "cpu")          # the CPU kernels first: the DLA tactics wrap them
        from native.dla.tactics import wrap_cpu_tactics
        wrap_cpu_tactics()
