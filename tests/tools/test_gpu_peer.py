"""tools/gpu_peer.py's CPU-visible parts: the alternating timing of contenders and the three-peer table."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tools.gpu_peer import alternating, table  # noqa: E402


def test_alternating_rotates_the_order_and_keeps_the_median_of_rounds():
    calls, syncs = [], []
    times = {"ours": iter([5.0, 1.0, 2.0]), "torch_eager": iter([3.0, 30.0, 4.0])}

    def contender(name):
        def fn():
            calls.append(name)
            return next(times[name])
        return fn
    got = alternating({k: contender(k) for k in times}, 3, lambda: syncs.append(1))
    assert got == {"ours": 2.0, "torch_eager": 4.0}
    assert calls == ["ours", "torch_eager", "torch_eager", "ours", "ours", "torch_eager"] and len(syncs) == 6


def test_the_table_has_all_three_peers_and_says_what_is_missing():
    row = {"model": "resnet50", "precision": "fp16", "batch": 128, "ours_compute_ms": 4.0, "torch_eager_ms": 8.0,
           "torch_cuda_graph_ms": 7.9, "torch_compile_ms": None, "torch_compile_mode": "default",
           "ours_vs_torch_eager": 0.5, "ours_vs_torch_cuda_graph": 0.506, "ours_vs_torch_compile": None,
           "cosine_vs_torch_fp32": 0.99999, "build_cold_s": 30.0, "build_warm_s": 2.0}
    head, rule, line = table([row]).splitlines()
    assert "eager ms" in head and "CUDA graph ms" in head and "torch.compile ms (mode)" in head
    assert line.split("|")[5:9] == [" 8.000 ", " 7.900 ", " n/a (default) ", " 0.500 "]
    assert "0.506" in line and "30.0/2.0" in line


def test_kernels_go_to_the_layer_range_they_start_in_and_replays_are_split_by_those_counts():
    from tools.gpu_kernels import PREFIX, by_layer, kernels_by_range, table
    ev = [{"ph": "X", "cat": "user_annotation", "name": PREFIX + "conv", "ts": 0, "dur": 100},
          {"ph": "X", "cat": "user_annotation", "name": PREFIX + "pool", "ts": 200, "dur": 50},
          {"ph": "X", "cat": "user_annotation", "name": "aten::copy_", "ts": 0, "dur": 500},
          {"ph": "X", "cat": "kernel", "name": "pad", "ts": 10, "dur": 5},
          {"ph": "X", "cat": "kernel", "name": "fprop", "ts": 20, "dur": 70},
          {"ph": "X", "cat": "kernel", "name": "pool2d", "ts": 210, "dur": 30},
          {"ph": "X", "cat": "kernel", "name": "stray", "ts": 400, "dur": 1}]
    got = kernels_by_range(ev)
    assert got == {"conv": [("pad", 5), ("fprop", 70)], "pool": [("pool2d", 30)], "?": [("stray", 1)]}
    layers = [("conv", "cudnn-plan-0"), ("pool", "window-kernel"), ("flatten", "strided-copy")]
    replay = [(0, 4, "pad"), (4, 60, "fprop"), (64, 25, "pool2d")] * 2    # two inferences: the first is kept
    rows = by_layer(layers, got, replay)
    assert rows == [("conv", "cudnn-plan-0", ["pad", "fprop"], 64), ("pool", "window-kernel", ["pool2d"], 25),
                    ("flatten", "strided-copy", [], 0)]
    # counts that do not divide the replay: the unreplayed times
    assert by_layer(layers, got, replay[:2])[0] == ("conv", "cudnn-plan-0", ["pad", "fprop"], 75)
    text = table({"rows": rows, "kernel_us": 89.0, "span_us": 89.0}, top=1)
    assert "89.0 us in 3 kernels" in text and "fprop" in text and "pool2d" not in text.splitlines()[-1]
