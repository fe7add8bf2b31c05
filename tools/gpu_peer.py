"""Side-by-side GPU timing: our CUDA engine vs PyTorch eager on the same architecture, inputs and precision, in
one process (the peer PERFORMANCE.md reports ratios against).

    python tools/gpu_peer.py --model resnet50 --batch 1 32 [--json out.json]

Needs torch and torchvision on the GPU machine (the model is exported from torchvision with random weights;
nothing is downloaded). Our engine runs FP32 (TF32 off); PyTorch is timed in FP32 (TF32 off) and in FP16
channels_last with cudnn.benchmark, the reference points the CUDA issue names.
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


def _time(fn, sync, warm=3, iters=10):
    for _ in range(warm):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t) / iters * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "resnet18"])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    import torchvision
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    net = getattr(torchvision.models, args.model)().eval()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{args.model}.onnx")
        torch.onnx.export(net, torch.randn(1, 3, 224, 224), path, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "n"}}, opset_version=17, dynamo=False)
        from backends.runners import EngineRunner
        gpu = net.cuda()
        half = torchvision.models.__dict__[args.model]().eval().cuda().half().to(memory_format=torch.channels_last)
        half.load_state_dict({k: v.half() if v.is_floating_point() else v for k, v in net.state_dict().items()})
        for bs in args.batch:
            x = np.random.default_rng(0).standard_normal((bs, 3, 224, 224)).astype(np.float32)
            xt = torch.from_numpy(x).cuda()
            xh = xt.half().to(memory_format=torch.channels_last)
            with torch.no_grad():
                ref = gpu(xt).cpu().numpy()
                t_fp32 = _time(lambda: gpu(xt), torch.cuda.synchronize)
                t_fp16 = _time(lambda: half(xh), torch.cuda.synchronize)
            t0 = time.perf_counter()
            with EngineRunner(path, shapes={"x": x.shape}, device="cuda") as r:
                build_s = time.perf_counter() - t0
                y = r.infer({"x": x})["y"]
                ours = _time(lambda: r.infer({"x": x}), lambda: None, warm=2, iters=5)
                host = sum(1 for n in r.engine.graph.nodes if (n.tactic_name or "").startswith("host:"))
                layers = len(r.engine.graph.nodes)
            err = float(np.abs(y - ref).max())
            row = {"model": args.model, "batch": bs, "ours_fp32_ms": round(ours, 2), "torch_fp32_ms": round(t_fp32, 2),
                   "torch_fp16_cl_ms": round(t_fp16, 2), "ours_vs_torch_fp32": round(ours / t_fp32, 2),
                   "max_abs_vs_torch": err, "build_s": round(build_s, 1), "layers": layers, "host_layers": host,
                   "gpu": torch.cuda.get_device_name()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
