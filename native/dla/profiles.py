"""DLA device profiles: the facts that differ between Xavier and Orin (seed 000), selectable by name.

Numbers the seed gives are cited by seed line; the rest (CBUF geometry, DRAM pool defaults) are ours and say so.
"""
from __future__ import annotations

from dataclasses import dataclass

from native.errors import UsageError

KiB, MiB = 1024, 1024 * 1024

MAX_BATCH = 4096            # seed 000 L143: max batch 4096
MAX_DIM = 8192              # seed 000 L145: max non-batch dim 8192
MAX_LOADABLES_PER_CORE = 16  # seed 000 L153: at most 16 loadables loaded per core


@dataclass(frozen=True)
class DlaProfile:
    name: str
    num_cores: int
    softmax: bool                 # Softmax runs on Orin only (seed 000 L359)
    sub_emulated: bool            # Xavier runs ElementWise SUB as Scale + Sum (seed 001 L1693)
    fp19_nonconv_weights: bool    # Orin stores non-conv weights as FP19 in 4-byte containers (seed 000 L383)
    hwc4_w_align: int             # kDLA_HWC4 W stride alignment in bytes: 32 Xavier, 64 Orin (seed 000 L417)
    managed_sram: int             # default managed-SRAM pool per loadable: 1 MiB Xavier, 0.5 MiB Orin (seed 000 L480)
    local_dram: int = 1024 * MiB  # ours (TensorRT's documented default), intermediates per loadable
    global_dram: int = 512 * MiB  # ours (TensorRT's documented default), weights per loadable
    cbuf_banks: int = 16          # numConvBufBankAllotted (seed 000 L229)
    cbuf_bank_bytes: int = 32 * KiB  # ours: NVDLA nv_full geometry (512 KiB CBUF in 16 banks)


PROFILES = {
    "orin": DlaProfile("orin", num_cores=2, softmax=True, sub_emulated=False, fp19_nonconv_weights=True,
                       hwc4_w_align=64, managed_sram=512 * KiB),
    "xavier": DlaProfile("xavier", num_cores=2, softmax=False, sub_emulated=True, fp19_nonconv_weights=False,
                         hwc4_w_align=32, managed_sram=1 * MiB),
}


def get_profile(name: str | DlaProfile = "orin") -> DlaProfile:
    if isinstance(name, DlaProfile):
        return name
    try:
        return PROFILES[str(name).lower()]
    except KeyError:
        raise UsageError(f"unknown DLA profile '{name}'; choose one of: {', '.join(PROFILES)}") from None
