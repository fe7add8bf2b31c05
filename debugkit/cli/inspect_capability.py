"""`inspect capability MODEL --dla`: which engine layers the emulated DLA would run, the rule that decides each,
the loadables the build would make, and ONNX files of the supported and unsupported subgraphs.

The model is built as `run --fp16 --use-dla-core N --allow-gpu-fallback` would build it (fusion included: the rules
apply to the layers the build makes), so what this prints is what a DLA build does.
"""
from __future__ import annotations

import collections
import os

from debugkit.cli import _args
from native.errors import InputFileError
from native.logger import G_LOGGER


def register(subs):
    c = subs.add_parser("capability", help="which layers run on the emulated DLA, and why not",
                        description=__doc__)
    c.add_argument("path", help="ONNX model")
    c.add_argument("--dla", action="store_true", required=True, help="check against the DLA (seed 000 rules)")
    c.add_argument("--dla-profile", default="orin", choices=["orin", "xavier"], help="DLA profile (default orin)")
    c.add_argument("--input-shapes", nargs="+", default=[], metavar="NAME:[D0,D1,...]",
                   help="static shapes for dynamic inputs (the DLA has no dynamic dims; unset dynamic dims are 1)")
    c.add_argument("--json", metavar="FILE", help="write the per-layer verdicts and loadables as JSON")
    c.add_argument("-o", "--save-subgraphs", metavar="DIR",
                   help="write supported_<i>.onnx / unsupported_<i>.onnx for each DLA / host subgraph")
    from debugkit.options import add_aliases
    add_aliases(c, "inspect capability")   # --profile: the old spelling of --dla-profile
    _args.add_common_args(c)
    c.set_defaults(func=run)


def run(args) -> int:
    _args.apply_common_args(args)
    if not os.path.exists(args.path):
        raise InputFileError(f"file not found: {args.path}")
    report = capability(args.path, profile=args.dla_profile,
                        shapes=_args.parse_shape_list(args.input_shapes), save_dir=args.save_subgraphs)
    print_report(report, args.path)
    if args.json:
        from native.files import write_json
        write_json(args.json, report, "--json", indent=1)
        G_LOGGER.info(f"wrote {args.json}")
    return 0


def capability(path, *, profile="orin", int8=False, shapes=None, save_dir=None) -> dict:
    """Build the model for the DLA with GPU fallback and report every engine layer's placement."""
    import onnx

    from backends.engine.build import parse_onnx, profile_from_shapes
    from backends.engine.builder import Builder, BuilderConfig, BuilderFlag
    from backends.engine.builder.config import DeviceType
    network, _ = parse_onnx(path)
    shapes = dict(shapes or {})
    for t in network.inputs:
        if t.shape is not None and any(d < 0 for d in t.shape) and t.name not in shapes:
            shapes[t.name] = tuple(1 if d < 0 else d for d in t.shape)
            G_LOGGER.warning(f"input '{t.name}' has dynamic shape {list(t.shape)}; the DLA has no dynamic dims, so it "
                             f"is checked at {list(shapes[t.name])} (pass --input-shapes to choose)")
    config = BuilderConfig()
    config.set_flag(BuilderFlag.INT8 if int8 else BuilderFlag.FP16)
    config.set_flag(BuilderFlag.GPU_FALLBACK)
    config.default_device_type = DeviceType.DLA
    config.dla_profile = profile
    config.avg_timing_iterations = 1
    prof = profile_from_shapes(network, shapes)
    if prof is not None:
        config.add_optimization_profile(prof)
    graph = Builder().build_graph(network, config)
    layers, loadables, host_runs, run = [], [], [], []
    for node in graph.nodes:
        if node.kind == "DlaLoadable":
            if run:
                host_runs.append(run)
                run = []
            body = node.subgraphs["body"]
            loadables.append({"name": node.name, "layers": sum(1 for n in body.nodes if n.kind != "Constant"),
                              "batch": node.params["batch"], "pools": node.params["pools"],
                              "inputs": [d["name"] for d in node.params["inputs"]],
                              "outputs": [d["name"] for d in node.params["outputs"]],
                              "formats": {d["name"]: d["format"] for d in node.params["inputs"] + node.params["outputs"]}})
            for n in body.nodes:
                if n.kind != "Constant":
                    layers.append(_entry(n, True, len(loadables) - 1))
        elif node.kind in ("DlaReformat", "Constant"):
            continue
        else:
            layers.append(_entry(node, False, None))
            run.append(node)
    if run:
        host_runs.append(run)
    reasons = collections.Counter(e["rule"] for e in layers if not e["dla"])
    report = {"model": os.path.basename(path), "profile": profile, "precision": "int8" if int8 else "float16",
              "layers": layers, "loadables": len(loadables), "layers_on_dla": sum(e["dla"] for e in layers),
              "layers_total": len(layers), "fallback_reasons": dict(reasons.most_common()),
              "loadable_details": loadables}
    if save_dir:
        model = onnx.load(path)
        report["subgraph_files"] = _save_subgraphs(model, graph, loadables, host_runs, save_dir)
    return report


def _entry(node, on_dla, loadable):
    d = node.meta.get("dla") or {}
    reason = d.get("reason") or ("runs on DLA" if on_dla else "host layer")
    return {"name": node.name, "kind": node.kind, "onnx_nodes": list(node.source_nodes or [node.name]),
            "dla": bool(on_dla), "rule": "ok" if on_dla else d.get("rule", "host"), "reason": reason,
            "loadable": loadable}


def _save_subgraphs(model, graph, loadables, host_runs, save_dir) -> list:
    from debugkit.surgeon.extract import AUTO, extract_model
    os.makedirs(save_dir, exist_ok=True)
    onnx_name = {v: k for k, v in graph.aliases.items()}
    outputs = set(graph.output_names)
    written = []

    def save(kind, i, ins, outs):
        ins = [onnx_name.get(t, t) for t in ins]
        outs = [onnx_name.get(t, t) for t in outs]
        path = os.path.join(save_dir, f"{kind}_{i}.onnx")
        try:
            sub = extract_model(model, {t: (AUTO, AUTO) for t in ins}, {t: AUTO for t in outs})
        except Exception as e:   # a boundary the fusion renamed: say so, keep the others
            G_LOGGER.warning(f"could not extract {kind} subgraph {i} ({e})")
            return
        from debugkit.surgeon.external_data import save_model
        save_model(sub, path, what="subgraph")
        written.append(path)

    for i, ld in enumerate(loadables):
        save("supported", i, ld["inputs"], ld["outputs"])
    for i, run in enumerate(host_runs):
        produced = {o for n in run for o in n.outputs}
        consumers = graph.consumers()
        ins = list(dict.fromkeys(t for n in run for t in n.inputs if t is not None and t not in produced
                                 and graph.producers().get(t, None) is not None
                                 and graph.producers()[t].kind != "Constant" or t in graph.input_names))
        ins = [t for t in ins if t is not None and t not in produced]
        outs = [o for o in produced if o in outputs or any(c not in run for c in consumers.get(o, []))]
        save("unsupported", i, ins, outs)
    return written


def print_report(report, path):
    print(f"==== DLA capability of {path} ({report['profile']}, {report['precision']}) ====")
    print(f"{report['layers_on_dla']} of {report['layers_total']} engine layers on DLA, "
          f"{report['loadables']} loadable(s)")
    for i, ld in enumerate(report["loadable_details"]):
        names = {"dla_managed_sram": "managed SRAM", "dla_local_dram": "local DRAM", "dla_global_dram": "global DRAM"}
        pools = ", ".join(f"{names.get(k, k)} {v / 1024:.0f} KiB" for k, v in ld["pools"].items())
        print(f"  loadable {i}: {ld['name']} | {ld['layers']} layers, batch {ld['batch']} | needs {pools}")
    print("---- layers ----")
    for e in report["layers"]:
        where = f"DLA (loadable {e['loadable']})" if e["dla"] else "host"
        print(f"  {where:<18} {e['name'][:90]}  [{e['kind']}] {'' if e['dla'] else e['reason']}")
    if report["fallback_reasons"]:
        print("---- fallback reasons ----")
        for rule, n in report["fallback_reasons"].items():
            print(f"  {n:4d} x {rule}")
    for f in report.get("subgraph_files", []):
        print(f"wrote {f}")
