"""tools/build_spread.py's analysis: the layers whose pick differs, the builds' pairwise agreement, the engines'
latency per pick, the pass-to-pass rank correlation, and the --ab settings it parses (values planted, no build)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tools.build_spread import _settings, _spearman, agreement, by_choice, differing  # noqa: E402

BUILDS = [{"conv1": ("direct-panels", {}), "conv2": ("1x1-gemm", {}), "pool": ("strided-taps", {})},
          {"conv1": ("direct-panels", {}), "conv2": ("1x1-gemm-shares", {}), "pool": ("strided-taps", {})},
          {"conv1": ("direct-panels", {}), "conv2": ("1x1-gemm-shares", {}), "pool": ("max-pool-shares", {})}]


def test_the_layers_whose_pick_differs_and_what_each_build_took():
    assert differing(BUILDS) == {"conv2": ["1x1-gemm", "1x1-gemm-shares", "1x1-gemm-shares"],
                                 "pool": ["strided-taps", "strided-taps", "max-pool-shares"]}
    assert differing(BUILDS[:1]) == {}


def test_pairwise_agreement_is_the_share_of_layers_two_builds_picked_alike():
    # pairs (0,1): 2 of 3 alike, (0,2): 1 of 3, (1,2): 2 of 3
    assert agreement(BUILDS) == pytest.approx((2 / 3 + 1 / 3 + 2 / 3) / 3)
    assert agreement(BUILDS[:1]) == 1.0


def test_engines_grouped_by_a_layers_pick():
    assert by_choice(["a", "b", "a"], [9.0, 10.0, 8.0]) == {"a": [9.0, 8.0], "b": [10.0]}


def test_rank_correlation_of_two_passes():
    assert _spearman([1.0, 2.0, 3.0], [10.0, 20.0, 30.0]) == pytest.approx(1.0)
    assert _spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)


def test_ab_settings_name_module_and_class_attributes():
    from backends.engine.builder import tactic_selection
    from native.cpu.device import CpuDevice
    got = _settings("tactic_selection.RUNOFF_ROUNDS=0; native.cpu.device.CpuDevice.TIMING_WAIT_S=0.0")
    assert got == [(tactic_selection, "RUNOFF_ROUNDS", 0), (CpuDevice, "TIMING_WAIT_S", 0.0)]
    with pytest.raises(AttributeError):
        _settings("tactic_selection.NO_SUCH_NAME=1")
