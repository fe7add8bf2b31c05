"""tools/layer_scaling.py: the per-layer profiler gives each layer its own pool-counter deltas, and a block counts
other processes' CPU time as the busy ticks of the machine less this process's, per tick of wall time."""
from tools import layer_scaling


def test_each_layer_gets_its_own_counter_deltas():
    seen = {"python": 0, "gemm": 0, "taken": 0}
    prof = layer_scaling._Counting(lambda: dict(seen))
    prof.start_inference()
    seen["python"] += 2
    prof.report_layer_time("conv", 0.5)
    seen["gemm"] += 1
    prof.report_layer_time("pool", 0.25)
    prof.report_layer_time("conv", 0.5)
    assert prof.times == {"conv": [0.5, 0.5], "pool": [0.25]}
    assert prof.uses["conv"] == {"python": 2, "gemm": 0, "taken": 0}
    assert prof.uses["pool"] == {"python": 0, "gemm": 1, "taken": 0}


def test_others_share_is_busy_ticks_less_ours_per_wall_tick(monkeypatch):
    monkeypatch.setattr(layer_scaling.os, "sysconf", lambda name: 100)
    # 1 s of wall time (100 ticks): the CPUs were busy 130 ticks, 100 of them ours -> others held 0.3 of a CPU
    assert abs(layer_scaling._others_share((1000, 500, 10.0), (1130, 600, 11.0)) - 0.3) < 1e-9
    assert layer_scaling._others_share((1000, 500, 10.0), (1090, 600, 11.0)) == 0.0   # never negative
    assert layer_scaling._others_share(None, (1, 1, 1.0)) == 0.0                     # unknown: nothing counted
    got = layer_scaling._cpu_ticks()
    assert got is None or (len(got) == 3 and got[0] >= got[1] >= 0)
