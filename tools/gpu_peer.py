"""Side-by-side GPU timing: our CUDA engine vs PyTorch eager on the same architecture, inputs and precision, in
one process (the peer PERFORMANCE.md reports ratios against).

    python tools/gpu_peer.py --model resnet50 --precision fp16 --batch 1 128 [--cuda-graph] [--json out.json]
    python tools/gpu_peer.py --model bert --precision fp16 --batch 32 --seq 128 [--torch-compile]

Needs torch (and torchvision for the ResNets) on the GPU machine; models get random weights, nothing is
downloaded. `bert` is BERT-base (12 layers, hidden 768, 12 heads, FFN 3072, GELU, post-LN) written here in plain
PyTorch and exported to ONNX. PyTorch runs eager, no_grad, cudnn.benchmark, channels_last for convnets in FP16;
TF32 off in FP32. Ours: build time (cold, then warm with the timing cache), GPU compute time per inference from
CUDA events (inputs already uploaded, as PyTorch's are), end-to-end time with copies, throughput.
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
    for _ in range(warm):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t) / iters * 1e3


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
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16"])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--cuda-graph", action="store_true", help="time our engine with CUDA graphs")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="also print our slowest layers (per-layer synchronized)")
    ap.add_argument("--torch-compile", action="store_true",
                    help="also time torch.compile (inductor, default mode) of the peer (compile time is "
                         "reported apart); recorded as null where compilation fails")
    ap.add_argument("--layout", choices=["timed", "nhwc", "nchw"], default="timed",
                    help="convolution layout: chosen by timing (the CUDA device's default), or forced")
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
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
        if fp16:
            peer = peer.half()
            if args.model != "bert":
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
                peer_in = [tin[0].half().to(memory_format=torch.channels_last)] if fp16 else tin
            with torch.no_grad():
                ref = ref_net(*tin).float().cpu().numpy()
                t_peer = _time(lambda: peer(*peer_in), torch.cuda.synchronize, iters=args.iterations)
                t_compiled = compile_s = None
                if args.torch_compile:
                    try:
                        compiled = torch.compile(peer)
                        t0 = time.perf_counter()
                        compiled(*peer_in)
                        torch.cuda.synchronize()
                        compile_s = time.perf_counter() - t0
                        t_compiled = _time(lambda: compiled(*peer_in), torch.cuda.synchronize,
                                           iters=args.iterations)
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
                if os.path.exists(cache):
                    with open(cache, "rb") as f:
                        config.set_timing_cache(config.create_timing_cache(f.read()))
                else:
                    config.set_timing_cache(config.create_timing_cache(b""))
                t0 = time.perf_counter()
                r = EngineRunner(path, shapes=shapes, device="cuda", config=config)
                r.activate()
                builds.append(time.perf_counter() - t0)
                with open(cache, "wb") as f:
                    f.write(config.get_timing_cache().serialize())
                if attempt == 0:
                    r.deactivate()
            y = r.infer(feeds)["y"]
            ctx = r.context
            if args.cuda_graph:
                ctx.enable_cuda_graph()
            for _ in range(3):
                ctx.execute(feeds)
            compute, total = [], []
            for _ in range(args.iterations):
                t = time.perf_counter()
                ctx.execute(feeds)
                total.append((time.perf_counter() - t) * 1e3)
                compute.append(ctx.timings["compute_ms"])
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
            host = sorted({n.kind for n in nodes if (n.tactic_name or "").startswith("host:")})
            r.deactivate()
            y = np.asarray(y, np.float64)
            cos = float((y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref) + 1e-30))
            ours = float(np.median(compute))
            row = {"model": args.model, "precision": args.precision, "batch": bs, "cuda_graph": args.cuda_graph, "layout": args.layout,
                   "ours_compute_ms": round(ours, 3), "ours_end_to_end_ms": round(float(np.median(total)), 3),
                   "torch_eager_ms": round(t_peer, 3), "ours_vs_torch": round(ours / t_peer, 3),
                   "torch_compile_ms": None if t_compiled is None else round(t_compiled, 3),
                   "ours_vs_torch_compile": None if t_compiled is None else round(ours / t_compiled, 3),
                   "torch_compile_s": None if compile_s is None else round(compile_s, 1),
                   "ours_samples_per_s": round(bs / ours * 1e3, 1), "torch_samples_per_s": round(bs / t_peer * 1e3, 1),
                   "cosine_vs_torch_fp32": cos, "max_abs_vs_torch_fp32": float(np.abs(y - ref).max()),
                   "build_cold_s": round(builds[0], 1), "build_warm_s": round(builds[1], 1), "layers": len(nodes),
                   "host_layer_kinds": host, "gpu": torch.cuda.get_device_name(),
                   "date": time.strftime("%Y-%m-%d")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        from native.files import output_file
        with output_file(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
