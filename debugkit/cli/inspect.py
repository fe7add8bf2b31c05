"""Describe a model (ONNX or plan: inputs, outputs, layers, tactics) or a saved HDF5 data file."""
from __future__ import annotations

import json
import os

import numpy as np

from debugkit.cli import _args
from native.errors import InputFileError


def register(subparsers):
    p = subparsers.add_parser("inspect", help=__doc__.splitlines()[0], description=__doc__)
    subs = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    m = subs.add_parser("model", help="inputs, outputs and layers of an ONNX model or a plan file")
    m.add_argument("path")
    m.add_argument("--show", nargs="+", default=[], choices=["layers", "attrs", "weights"],
                   help="also list layers (plans: with fused ONNX nodes, tactic and precision)")
    m.add_argument("--json", action="store_true",
                   help="print JSON instead: for a plan the EngineInspector document, for an ONNX model its inputs, "
                        "outputs (name, dtype, shape), opset, counts and, with --show layers, its nodes")
    _args.add_common_args(m)
    m.set_defaults(func=run)
    d = subs.add_parser("data", help="a data file written by --save-inputs / --save-outputs (or Polygraphy's JSON)")
    d.add_argument("path")
    d.add_argument("-s", "--show-values", action="store_true", help="print the values")
    d.add_argument("-a", "--all", action="store_true", help="every iteration (default: the first)")
    _args.add_common_args(d)
    d.set_defaults(func=run)
    from debugkit.cli import inspect_tactics
    inspect_tactics.register(subs)
    from debugkit.cli import inspect_capability   # `inspect capability MODEL --dla`
    inspect_capability.register(subs)


def run(args) -> int:
    _args.apply_common_args(args)
    if not os.path.exists(args.path):
        raise InputFileError(f"file not found: {args.path}")
    return _model(args) if args.what == "model" else _data(args)


def _shape(shape):
    return "?" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _model(args) -> int:
    from backends.runners.engine import is_plan
    if is_plan(args.path):
        from backends.engine.runtime import Runtime
        engine = Runtime().deserialize_engine(args.path)
        inspector = engine.create_engine_inspector()
        if args.json:
            print(inspector.get_engine_information())
            return 0
        info = json.loads(inspector.get_engine_information())
        print(f"==== Plan {args.path} ====")
        print(f"producer {info['Producer']} | device {info['Device']} | flags {info['BuildConfig'].get('flags')}")
        for kind in ("INPUT", "OUTPUT"):
            ts = [t for t in info["Bindings"] if (t["name"] in engine.graph.input_names) == (kind == "INPUT")]
            print(f"---- {len(ts)} {kind.title()}(s) ----")
            for t in ts:
                print(f"  {t['name']} [dtype={t['dtype']}, shape={_shape(t['shape'])}]")
        profiles = info["BuildConfig"].get("profiles") or []
        for i, p in enumerate(profiles):
            print(f"---- Profile {i} ----")
            for name, (lo, opt, hi) in p.items():
                print(f"  {name}: min={lo} opt={opt} max={hi}")
        layers = info["Layers"]
        consts = [l for l in layers if l["LayerType"] == "Constant"]
        show_consts = "weights" in args.show
        shown = layers if show_consts else [l for l in layers if l["LayerType"] != "Constant"]
        hidden = "" if show_consts or not consts else f" ({len(consts)} constant layers hidden; --show weights lists them)"
        print(f"---- {len(shown)} Layer(s){hidden} ----")
        for i, layer in enumerate(shown):
            shapes = ""
            if layer.get("InputShapes") is not None or layer.get("OutputShapes") is not None:
                shapes = f" {layer.get('InputShapes')} -> {layer.get('OutputShapes')}"
            timing = ""
            if layer.get("Timings_ms"):
                timing = " | timed: " + ", ".join(f"{k} {v:.3f} ms" for k, v in layer["Timings_ms"].items())
            for key, what in (("PrecisionTimings_ms", "precision"), ("LayoutTimings_ms", "layout")):
                if layer.get(key):
                    timing += f" | {what} timed: " + ", ".join(f"{k} {v:.3f} ms" for k, v in layer[key].items())
            types = [t for t in (layer.get("OutputTypes") or []) if t]
            stored = f" out={'+'.join(types)}" if types and set(types) != {layer["Precision"]} else ""
            math = f" math={layer['Math']}" if layer.get("Math") else ""
            math += f" ({layer['Int8']})" if layer.get("Int8") else ""
            inside = f" ({layer['TacticConfig']})" if layer.get("TacticConfig") else ""
            print(f"  Layer {i} | {layer['Fused']} [{layer['LayerType']}] tactic={layer['TacticName']}{inside} "
                  f"precision={layer['Precision']}{math}{stored}{shapes}{timing}")
        return 0
    from backends.runners import load_onnx
    model = load_onnx(args.path)
    info = onnx_summary(model, with_nodes="layers" in args.show)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    g = model.graph
    print(f"==== ONNX Model {args.path} ====")
    print(f"name {info['graph_name']} | opset {info['opset']} | producer {info['producer']}")
    for kind, key in (("Input", "inputs"), ("Output", "outputs")):
        print(f"---- {len(info[key])} {kind}(s) ----")
        for t in info[key]:
            print(f"  {t['name']} [dtype={t['dtype']}, shape={_shape(t['shape'])}]")
    print(f"---- {info['initializers']} Initializer(s) | {info['nodes']} Node(s) ----")
    if "layers" in args.show:
        from onnx import helper, numpy_helper
        inits = {i.name: i for i in g.initializer}
        for i, n in enumerate(g.node):
            print(f"  Node {i} | {n.name} [{n.op_type}] {list(n.input)} -> {list(n.output)}")
            if "attrs" in args.show:
                for a in n.attribute:
                    v = helper.get_attribute_value(a)
                    print(f"      {a.name} = {v if not hasattr(v, 'SerializeToString') else type(v).__name__}")
            if "weights" in args.show:
                for name in n.input:
                    if name in inits:
                        arr = numpy_helper.to_array(inits[name])
                        print(f"      {name} {arr.dtype} {list(arr.shape)}: {np.array2string(arr.ravel()[:8])}")
    return 0


def _dtype_name(elem_type) -> str:
    """numpy's name for an ONNX element type (float32, int64, bfloat16, ...), the same for inputs and outputs."""
    from onnx import TensorProto, helper
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        return TensorProto.DataType.Name(elem_type).lower() if elem_type else "unknown"


def _value_info(vi) -> dict:
    t = vi.type
    if not t.HasField("tensor_type"):
        return {"name": vi.name, "dtype": t.WhichOneof("value") or "unknown", "shape": None}
    tt = t.tensor_type
    shape = None if not tt.HasField("shape") else [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
    return {"name": vi.name, "dtype": _dtype_name(tt.elem_type), "shape": shape}


def onnx_summary(model, with_nodes=False) -> dict:
    """What `inspect model` says about an ONNX model, as a JSON-ready dict."""
    g = model.graph
    inits = {i.name for i in g.initializer}
    info = {"format": "onnx", "graph_name": g.name,
            "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "inputs": [_value_info(i) for i in g.input if i.name not in inits],
            "outputs": [_value_info(o) for o in g.output], "initializers": len(g.initializer), "nodes": len(g.node)}
    if with_nodes:
        info["node_list"] = [{"name": n.name, "op_type": n.op_type, "inputs": list(n.input),
                              "outputs": list(n.output)} for n in g.node]
    return info


def _data(args) -> int:
    from debugkit.data_file import open_data_file
    with open_data_file(args.path) as f:
        attrs = f.attrs
        print(f"==== {f.kind} file {args.path} ({attrs.get('format')}) ====")
        for k in ("model_path", "model_sha256", "command", "versions"):
            if k in attrs:
                print(f"{k}: {attrs[k]}")
        groups = f.runners() if f.kind == "outputs" else [None]
        for runner in groups:
            if runner is not None:
                ra = f.runner_attrs(runner)
                print(f"---- runner {runner} ----")
                if ra.get("build_config"):
                    print(f"build_config: {json.dumps(ra['build_config'])}")
            its = f.iterations(runner)
            print(f"{len(its)} iteration(s)")
            for it in its if args.all else its[:1]:
                names = f.tensor_names(it, runner)
                print(f"  iteration {it}: {len(names)} tensor(s), inputs_hash {_short_hash(f.inputs_hash(it, runner))}")
                for n in names:
                    v = f.read(it, n, runner)
                    if isinstance(v, (np.ndarray, np.generic)):
                        v = np.asarray(v)
                        shape = "scalar" if v.ndim == 0 else f"shape={list(v.shape)}"
                        line = f"    {n} [dtype={v.dtype.name}, {shape}]"
                        if v.size and v.dtype.kind in "fiub":
                            vf = v.astype(np.float64)
                            line += f" | mean={vf.mean():.4g} min={vf.min():.4g} max={vf.max():.4g}"
                        print(line)
                        if args.show_values:
                            print("      " + np.array2string(v, threshold=50).replace("\n", "\n      "))
                    else:
                        print(f"    {n} [{'none' if v is None else 'sequence'}]")
    return 0


def _short_hash(h):
    return f"{h[:16]}…" if h else "(not recorded)"
