"""Side-by-side GPU timing: our CUDA engine vs three PyTorch peers on the same architecture, inputs and precision,
in one process (the peers PERFORMANCE.md reports ratios against).

    python tools/gpu_peer.py --model resnet50 --precision fp16 --batch 1 128 [--cuda-graph] [--json out.json]
    python tools/gpu_peer.py --model resnet50 --precision tf32 --batch 128 --cuda-graph
    python tools/gpu_peer.py --model bert --precision fp16 --batch 32 --seq 128 [--compile-mode max-autotune-no-cudagraphs]
    python tools/gpu_peer.py --model resnet50 --precision fp16 --batch 128 --cuda-graph --kernels   # per-layer kernels

Needs torch (and torchvision for the ResNets) on the GPU machine; models get random weights, nothing is
downloaded. `bert` is BERT-base (12 layers, hidden 768, 12 heads, FFN 3072, GELU, post-LN) written here in plain
PyTorch and exported to ONNX. The peers, all three in every row: PyTorch eager; the same module replayed as a CUDA
graph (torch.cuda.CUDAGraph, captured once on static inputs); and torch.compile (inductor, --compile-mode, default
"default"; compile time reported apart; null with the reason printed where compilation fails). All run no_grad,
cudnn.benchmark, channels_last for convnets in FP16; TF32 on only with --precision tf32 (ours builds with --tf32
then), strict FP32 otherwise. Ours: build time (cold, then warm with the timing cache), GPU compute time per
inference from CUDA events (inputs already uploaded, as PyTorch's are), the host's enqueue time, end-to-end time
with copies, throughput. Timing alternates: rounds of --iterations inferences of each contender in turn, the
median of the round medians kept, so clock and thermal drift hits all alike and the ratios hold.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _time(fn, sync, warm=3, iters=20):
    """Milliseconds per call of fn() over `iters` calls, the device synchronised before and after."""
    for _ in range(warm):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t) / iters * 1e3


def cuda_graph_peer(torch, module, inputs):
    """A callable replaying `module(*inputs)` as a CUDA graph (warmed up on a side stream, captured once)."""
    static = [t.clone() for t in inputs]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            module(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        module(*static)

    def replay():
        graph.replay()
    # the graph reads its inputs from `static` at every replay: they must outlive it (freed, their blocks went back
    # to PyTorch's caching allocator and later tensors overwrote the captured input ids: a device-side assert in
    # the embedding gather, 2026-11-28)
    replay.static = static
    return replay


def alternating(contenders: dict, rounds: int, sync) -> dict:
    """{name: median ms}: `rounds` rounds, each timing every contender in turn (a contender is a function returning
    its ms for one batch of inferences), the order rotating per round; the median over rounds is kept."""
    got = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync()
            got[name].append(contenders[name]())
    return {k: float(np.median(v)) if v else None for k, v in got.items()}


def bert_base(torch, layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, max_pos=512):
    nn = torch.nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
            self.o = nn.Linear(hidden, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, mask):
            b, s, _ = x.shape
            d = hidden // heads

            def split(t):
                return t.view(b, s, heads, d).transpose(1, 2)
            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / (d ** 0.5) + mask
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, hidden)
            return self.ln(x + self.o(ctx))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.att = Attention()
            self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, mask):
            x = self.att(x, mask)
            return self.ln(x + self.fc2(torch.nn.functional.gelu(self.fc1(x))))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(max_pos, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList([Layer() for _ in range(layers)])

        def forward(self, input_ids, attention_mask):
            s = input_ids.shape[1]
            pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
            x = self.ln(self.word(input_ids) + self.pos(pos))
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, mask)
            return x

    return Bert()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "resnet18", "bert"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16"],
                    help="fp32: strict FP32 both sides; tf32: our --tf32 build vs PyTorch with TF32 allowed; fp16")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--cuda-graph", action="store_true", help="time our engine with CUDA graphs")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="also print our slowest layers (per-layer synchronized)")
    ap.add_argument("--kernels", action="store_true",
                    help="also print every layer's GPU kernels and their times in a CUDA-graph replay (PyTorch's "
                         "profiler; tools/gpu_kernels.py)")
    ap.add_argument("--compile-mode", default="default",
                    choices=["default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune"],
                    help="torch.compile's mode for the third peer (default: 'default'; max-autotune modes tune "
                         "kernels for minutes)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds (default 5)")
    ap.add_argument("--torch-compile", action="store_true", help=argparse.SUPPRESS)   # always on now
    ap.add_argument("--layout", choices=["timed", "nhwc", "nchw"], default="timed",
                    help="convolution layout: chosen by timing (the CUDA device's default), or forced")
    ap.add_argument("--json")
    args = ap.parse_args()
    # the "cold" build compiles its own kernels: a kernel cache of this run's own, not what an earlier process left
    import atexit
    import shutil
    kernels = tempfile.mkdtemp(prefix="gpu_peer_kernels_")
    os.environ["DEBUGKIT_KERNEL_CACHE"] = kernels
    atexit.register(shutil.rmtree, kernels, True)
    import torch
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    fp16 = args.precision == "fp16"
    if args.model == "bert":
        net = bert_base(torch).eval()
    else:
        import torchvision
        net = getattr(torchvision.models, args.model)().eval()
    from backends.engine.builder import BuilderConfig
    from backends.engine.builder.config import BuilderFlag
    from backends.runners import EngineRunner
    from native.files import write_bytes
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{args.model}.onnx")
        if args.model == "bert":
            ids = torch.randint(0, 30522, (1, args.seq))
            torch.onnx.export(net, (ids, torch.ones(1, args.seq, dtype=torch.int64)), path,
                              input_names=["input_ids", "attention_mask"], output_names=["y"],
                              dynamic_axes={"input_ids": {0: "n"}, "attention_mask": {0: "n"}}, opset_version=17,
                              dynamo=False)
        else:
            torch.onnx.export(net, torch.randn(1, 3, 224, 224), path, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "n"}}, opset_version=17, dynamo=False)
        import copy
        ref_net = net.cuda()
        peer = copy.deepcopy(net).cuda()
        channels_last = args.model != "bert" and args.precision in ("fp16", "tf32")   # cuDNN's tensor-core layout
        if fp16:
            peer = peer.half()
        if channels_last:
            peer = peer.to(memory_format=torch.channels_last)
        for bs in args.batch:
            rng = np.random.default_rng(0)
            if args.model == "bert":
                feeds = {"input_ids": rng.integers(0, 30522, (bs, args.seq)).astype(np.int64),
                         "attention_mask": np.ones((bs, args.seq), np.int64)}
                feeds["attention_mask"][:, args.seq * 3 // 4:] = 0
                tin = [torch.from_numpy(v).cuda() for v in feeds.values()]
                peer_in = tin
            else:
                feeds = {"x": rng.standard_normal((bs, 3, 224, 224)).astype(np.float32)}
                tin = [torch.from_numpy(feeds["x"]).cuda()]
                x = tin[0].half() if fp16 else tin[0].clone()
                peer_in = [x.to(memory_format=torch.channels_last) if channels_last else x]
            with torch.no_grad():
                if tf32:    # the reference stays strict FP32
                    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
                ref = ref_net(*tin).float().cpu().numpy()
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
                peers = {"torch_eager": lambda: peer(*peer_in)}
                try:
                    peers["torch_cuda_graph"] = cuda_graph_peer(torch, peer, peer_in)
                except Exception as e:
                    print(f"  CUDA graph capture of the peer failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
                compile_s = None
                try:
                    compiled = torch.compile(peer, mode=args.compile_mode)
                    t0 = time.perf_counter()
                    compiled(*peer_in)
                    torch.cuda.synchronize()
                    compile_s = time.perf_counter() - t0
                    peers["torch_compile"] = lambda: compiled(*peer_in)
                except Exception as e:   # torch.compile where it works: say why not elsewhere
                    print(f"  torch.compile failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            shapes = {k: v.shape for k, v in feeds.items()}
            cache = os.path.join(tmp, f"cache-{bs}.bin")
            builds = []
            for attempt in range(2):    # cold, then warm from the timing cache
                config = BuilderConfig()
                config.prefer_nhwc = {"timed": None, "nhwc": True, "nchw": False}[args.layout]
                if fp16:
                    config.set_flag(BuilderFlag.FP16)
                if tf32:
                    config.set_flag(BuilderFlag.TF32)
                if os.path.exists(cache):
                    with open(cache, "rb") as f:
                        config.set_timing_cache(config.create_timing_cache(f.read()))
                else:
                    config.set_timing_cache(config.create_timing_cache(b""))
                t0 = time.perf_counter()
                r = EngineRunner(path, shapes=shapes, device="cuda", config=config)
                r.activate()
                builds.append(time.perf_counter() - t0)
                write_bytes(cache, config.get_timing_cache().serialize(), "timing cache")
                if attempt == 0:
                    r.deactivate()
            y = r.infer(feeds)["y"]
            ctx = r.context
            if args.cuda_graph:
                ctx.enable_cuda_graph()
            for _ in range(3):
                ctx.execute(feeds)
            compute, total, enqueue = [], [], []

            def ours():
                got = []
                for _ in range(args.iterations):
                    t = time.perf_counter()
                    ctx.execute(feeds)
                    total.append((time.perf_counter() - t) * 1e3)
                    got.append(ctx.timings["compute_ms"])
                    enqueue.append(ctx.host_timings["enqueue_ms"])
                compute.extend(got)
                return float(np.median(got))
            contenders = {"ours": ours}
            with torch.no_grad():
                for name, fn in peers.items():
                    contenders[name] = lambda fn=fn: _time(fn, torch.cuda.synchronize, warm=1,
                                                           iters=args.iterations)
                medians = alternating(contenders, args.rounds, torch.cuda.synchronize)
            nodes = r.engine.graph.nodes
            if args.profile:
                from backends.engine.runtime.profiler import LayerProfiler
                prof = LayerProfiler()
                ctx.profiler = prof
                for _ in range(3):
                    ctx.execute(feeds)
                ctx.profiler = None
                kinds = {n.name: n.kind for n in nodes}
                by_kind = {}
                for row in prof.summary():
                    k = kinds.get(row["layer"], "?")
                    by_kind[k] = by_kind.get(k, 0.0) + row["median_ms"]
                print("  profile by kind (ms):", json.dumps({k: round(v, 2) for k, v in
                                                              sorted(by_kind.items(), key=lambda kv: -kv[1])}))
                print(prof.table(top=12), flush=True)
            kernel_stats = {}
            if args.kernels:
                from tools.gpu_kernels import profile as kernel_profile, table as kernel_table
                try:
                    kp = kernel_profile(ctx, r.engine, feeds, torch)
                    print(kernel_table(kp), flush=True)
                    kernel_stats = {"ours_kernel_us": round(kp["kernel_us"], 1),
                                    "ours_kernel_span_us": round(kp["span_us"], 1),
                                    "ours_kernels": sum(len(row[2]) for row in kp["rows"])}
                except Exception as e:    # the peer table still comes out
                    print(f"  --kernels failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            host = sorted({n.kind for n in nodes if (n.tactic_name or "").startswith("host:")})
            r.deactivate()
            y = np.asarray(y, np.float64)
            cos = float((y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref) + 1e-30))
            ours = medians["ours"]

            def ratio(k):
                return None if medians.get(k) is None else round(ours / medians[k], 3)

            def ms(k):
                return None if medians.get(k) is None else round(medians[k], 3)
            row = {"model": args.model, "precision": args.precision, "batch": bs, "cuda_graph": args.cuda_graph,
                   "layout": args.layout, "ours_compute_ms": round(ours, 3),
                   "ours_end_to_end_ms": round(float(np.median(total)), 3),
                   "ours_enqueue_ms": round(float(np.median(enqueue)), 3),
                   "torch_eager_ms": ms("torch_eager"), "torch_cuda_graph_ms": ms("torch_cuda_graph"),
                   "torch_compile_ms": ms("torch_compile"), "torch_compile_mode": args.compile_mode,
                   "ours_vs_torch_eager": ratio("torch_eager"), "ours_vs_torch_cuda_graph": ratio("torch_cuda_graph"),
                   "ours_vs_torch_compile": ratio("torch_compile"),
                   "torch_compile_s": None if compile_s is None else round(compile_s, 1),
                   "ours_samples_per_s": round(bs / ours * 1e3, 1),
                   "cosine_vs_torch_fp32": cos, "max_abs_vs_torch_fp32": float(np.abs(y - ref).max()),
                   "build_cold_s": round(builds[0], 1), "build_warm_s": round(builds[1], 1), "layers": len(nodes),
                   "host_layer_kinds": host, "gpu": torch.cuda.get_device_name(), "rounds": args.rounds,
                   "date": time.strftime("%Y-%m-%d"), **kernel_stats}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(table(rows))
    if args.json:
        from native.files import write_json
        write_json(args.json, rows, "--json", indent=1)
    return 0


def table(rows) -> str:
    """The rows as one markdown table: our compute time and every peer's, and ours / peer (< 1: ours faster)."""
    def f(v):
        return "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
    head = ("| model | precision | batch | ours ms | eager ms | CUDA graph ms | torch.compile ms (mode) | "
            "ours/eager | ours/graph | ours/compile | cosine vs FP32 | build cold/warm s |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        lines.append(f"| {r['model']} | {r['precision']} | {r['batch']} | {f(r['ours_compute_ms'])} | "
                     f"{f(r['torch_eager_ms'])} | {f(r['torch_cuda_graph_ms'])} | {f(r['torch_compile_ms'])} "
                     f"({r['torch_compile_mode']}) | {f(r['ours_vs_torch_eager'])} | "
                     f"{f(r['ours_vs_torch_cuda_graph'])} | {f(r['ours_vs_torch_compile'])} | "
                     f"{r['cosine_vs_torch_fp32']:.6f} | {r['build_cold_s']}/{r['build_warm_s']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
