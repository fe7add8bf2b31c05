"""nvrtc.precompile: a build's kernel sources compile in background threads, each once; the kernel's first use
takes the compiled code (or compiles it again, in the open, when the background compile failed). CPU only: the
compiler is replaced by a recording fake, so what is asserted is the bookkeeping, not NVRTC."""
import threading

import pytest

nvrtc = pytest.importorskip("native.cuda.nvrtc")


@pytest.fixture
def fake_compiler(monkeypatch):
    calls = []

    def compile_source(src, name, arch):
        calls.append((name, arch, threading.current_thread().name))
        if name == "rnn.cu" and len([c for c in calls if c[0] == "rnn.cu"]) == 1:
            raise RuntimeError("NVRTC compile of rnn.cu failed: boom")
        return f"cubin of {name} for {arch}".encode()
    monkeypatch.setattr(nvrtc, "compile_source", compile_source)
    monkeypatch.setattr(nvrtc, "_CUBINS", {})
    monkeypatch.setattr(nvrtc, "_PENDING", {})
    return calls


def test_sources_compile_once_in_the_background_and_are_used_from_there(fake_compiler):
    files = ["pointwise.cu", "tensor.cu"]
    assert nvrtc.precompile("sm_90", files) == 2
    assert nvrtc.precompile("sm_90", files) == 0          # pending: not started twice
    src, key = nvrtc._source("tensor.cu")
    assert nvrtc.cubin_for(key, src, "tensor.cu", "sm_90") == b"cubin of tensor.cu for sm_90"
    src, key = nvrtc._source("pointwise.cu")
    assert nvrtc.cubin_for(key, src, "pointwise.cu", "sm_90") == b"cubin of pointwise.cu for sm_90"
    assert sorted(c[0] for c in fake_compiler) == files      # each compiled once, in a thread of its own
    assert all(c[2].startswith("nvrtc ") for c in fake_compiler)
    assert nvrtc.precompile("sm_90", files) == 0          # compiled: nothing to start
    assert set(nvrtc.cubins("sm_90")) == {nvrtc._source(f)[1] for f in files}   # what a plan carries
    assert nvrtc.precompile("sm_80", files[:1]) == 1      # another architecture is another cubin


def test_a_failed_background_compile_is_compiled_again_where_the_kernel_is_used(fake_compiler):
    assert nvrtc.precompile("sm_90", ["rnn.cu"]) == 1
    src, key = nvrtc._source("rnn.cu")
    assert nvrtc.cubin_for(key, src, "rnn.cu", "sm_90") == b"cubin of rnn.cu for sm_90"
    assert [c[2].startswith("nvrtc ") for c in fake_compiler] == [True, False]   # the retry on the caller's thread


def test_by_default_the_common_sources_compile(fake_compiler):
    import os
    assert all(os.path.isfile(os.path.join(nvrtc.KERNEL_DIR, f)) for f in nvrtc.COMMON)
    assert nvrtc.precompile("sm_90") == len(nvrtc.COMMON)
    for f in nvrtc.COMMON:
        src, key = nvrtc._source(f)
        nvrtc.cubin_for(key, src, f, "sm_90")
    assert sorted(c[0] for c in fake_compiler) == sorted(nvrtc.COMMON)
