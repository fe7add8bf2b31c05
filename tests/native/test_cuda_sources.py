"""The CUDA kernel sources resolve without a GPU or NVRTC: every .cu a tactic names exists beside the tactics and
every .cu there is named by one; with a C preprocessor, every kernel name the tactics build from a literal base and
the float suffix scheme (`<base>_f32/_f16/_bf16`) is an entry point of its source."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA = os.path.join(ROOT, "native", "cuda")
GENERATED = {"pointwise_program.cu", "conv_i8t_program.cu", "generated.cu"}   # names of generated sources (nvrtc's program names)


def _python_files():
    for base, _, files in os.walk(CUDA):
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(base, f)


def _named_sources() -> dict:
    """{.cu file: [python files naming it]} from the string literals of native/cuda."""
    out = {}
    for path in _python_files():
        for name in re.findall(r"[\"']([\w]+\.cu)[\"']", open(path, encoding="utf-8").read()):
            if name not in GENERATED:
                out.setdefault(name, []).append(os.path.relpath(path, ROOT))
    return out


def test_every_named_source_exists_and_every_source_is_named():
    from native.cuda.nvrtc import KERNEL_DIR
    named = _named_sources()
    present = {f for f in os.listdir(KERNEL_DIR) if f.endswith(".cu")}
    assert named and present
    assert not set(named) - present, {k: named[k] for k in set(named) - present}
    assert not present - set(named), f"no tactic names {sorted(present - set(named))}"
    assert os.path.samefile(KERNEL_DIR, os.path.join(CUDA, "tactics"))   # each family's .cu beside its .py
    assert [f for f in os.listdir(KERNEL_DIR) if f.endswith(".cuh")], "the shared header travels with them"


def _entry_points(path, include) -> set:
    out = subprocess.run(["cpp", "-P", "-w", "-I", include, path], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(', out))


def _module_sources(text) -> dict:
    return dict(re.findall(r"^(\w*SRC)\s*=\s*\"(\w+\.cu)\"", text, re.M))


@pytest.mark.skipif(shutil.which("cpp") is None, reason="needs a C preprocessor (cpp) to expand the kernels' macros")
def test_every_suffixed_kernel_name_is_an_entry_point():
    from native.cuda.nvrtc import KERNEL_DIR
    from native.cuda.tactics.common import FLOAT_PRECISIONS, suffix
    entries = {f: _entry_points(os.path.join(KERNEL_DIR, f), KERNEL_DIR)
               for f in os.listdir(KERNEL_DIR) if f.endswith(".cu")}
    own = {os.path.splitext(os.path.basename(p))[0]: _module_sources(open(p, encoding="utf-8").read())
           for p in _python_files()}
    missing, checked, bases = [], 0, set()
    for path in _python_files():
        text = open(path, encoding="utf-8").read()
        local = {}
        for mod, names in re.findall(r"^from native\.cuda\.tactics\.(\w+) import (.+)$", text, re.M):
            local.update({k: v for k, v in own.get(mod, {}).items() if re.search(rf"\b{k}\b", names)})
        local.update(_module_sources(text))
        # kernel(SRC, "base" + suffix(...)) and launch_softmax("base" + suffix(...)) (pointwise.cu, with and
        # without its warp-per-row `_w` twin)
        uses = [(local.get(s, s.strip('"')), b, ("",)) for s, b in
                re.findall(r"kernel\((\w+|\"\w+\.cu\"), \"(\w+)\" \+ _?suffix\(", text)]
        uses += [("pointwise.cu", b, ("", "_w")) for b in re.findall(r"launch_softmax\(\"(\w+)\" \+ (?:suffix\(|sfx)",
                                                                       text)]
        for s, name in re.findall(r"kernel\((\w+|\"\w+\.cu\"), \"(\w+)\"\)", text):   # literal names
            checked += 1
            src = local.get(s, s.strip('"'))
            if name not in entries.get(src, ()):
                missing.append(f"{os.path.relpath(path, ROOT)}: {name} not in {src}")
        if path.endswith("resize.py"):   # its name is chosen in a conditional expression
            uses += [("geometry.cu", b, ("",)) for b in re.findall(r"\(\"(resize_interp\w*)\" if", text)]
            uses += [("geometry.cu", b, ("",)) for b in re.findall(r"else \"(resize_interp\w*)\"\)", text)]
        bases.update(b for _, b, _ in uses)
        for src, base, tails in uses:
            for p in FLOAT_PRECISIONS:
                for tail in tails:
                    checked += 1
                    if base + suffix(p) + tail not in entries[src]:
                        missing.append(f"{os.path.relpath(path, ROOT)}: {base + suffix(p) + tail} not in {src}")
    # the name tables of pointwise.cu: activations, unary math, binary ops (+ `_s` 32-bit index, `_f` flat)
    from native.cuda.tactics import pointwise
    names = set(pointwise._ACT.values()) | set(pointwise._UNARY.values())
    binaries = set(pointwise._BINARY.values()) | set(re.findall(r"binary\(\"(\w+)\"", "".join(
        open(p).read() for p in _python_files())))
    for p in FLOAT_PRECISIONS:
        for n in names:
            checked += 1
            if n + suffix(p) not in entries["pointwise.cu"]:
                missing.append(f"{n + suffix(p)} not in pointwise.cu")
        for n in binaries:
            for tail in ("", "_s", "_f"):
                checked += 1
                if n + suffix(p) + tail not in entries["pointwise.cu"]:
                    missing.append(f"{n + suffix(p) + tail} not in pointwise.cu")
    assert bases >= {"lrn", "col2im", "layernorm", "gpool", "pool2d", "attn_softmax", "softmax_rows", "resize_interp",
                     "resize_interp_s"}, bases
    assert checked > 100 and binaries and not missing, missing
    # pooling.py's _suffix adds the INT8 max pool's `_i8` to the float ones
    assert {"pool2d_i8", "pool2d_nhwc_v_i8"} <= entries["tensor.cu"]
    # the generated pointwise programs follow the same scheme
    text = open(pointwise.__file__).read()
    assert all(f"void prog{suffix(p)}(" in text for p in FLOAT_PRECISIONS)


def test_arch_specific_sources_compile_for_sm_90a_only_on_sm_90():
    """A source whose first line is nvrtc.ARCH_SPECIFIC (Hopper's wgmma) is compiled for sm_90a on an sm_90 GPU;
    other sources and other GPUs keep their architecture. conv_i8t.py's programs (wgmma, TMA) are ones, conv_i8.cu
    (mma.sync) not."""
    from native.cuda import nvrtc
    marked = nvrtc.ARCH_SPECIFIC + "\nextern \"C\" __global__ void k() {}\n"
    assert nvrtc.target(marked, "sm_90") == "sm_90a"
    assert nvrtc.target(marked, "sm_80") == "sm_80" and nvrtc.target(marked, "sm_100") == "sm_100"
    assert nvrtc.target("extern \"C\" __global__ void k() {}\n", "sm_90") == "sm_90"
    from native.cuda.tactics.conv_i8t import _source
    assert nvrtc.target(_source("CONV_I8T_KERNEL(128, 128, 2, 2, 1, 0)")[0], "sm_90") == "sm_90a"
    with open(os.path.join(CUDA, "tactics", "conv_i8.cu")) as f:
        assert nvrtc.target(f.read(), "sm_90") == "sm_90"
