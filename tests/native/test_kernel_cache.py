"""The kernel cache kept between processes (native/cuda/nvrtc.py: disk_key / disk_get / disk_put): what is put is
got back, a damaged entry is never returned, its key changes with everything the compile depends on, and
DEBUGKIT_KERNEL_CACHE=0 keeps nothing. (The NVRTC compile around it runs in the cuda-marked tests.)"""
import os

import pytest

from native import config


@pytest.fixture
def nv():
    from native.cuda import nvrtc   # importable without the cuda extra: the cache layer needs no GPU
    return nvrtc


def test_default_place_and_off(monkeypatch, tmp_path):
    monkeypatch.delenv("DEBUGKIT_KERNEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.kernel_cache_dir() == os.path.join(str(tmp_path), "debugkit", "kernels")
    for off in ("0", "off", ""):
        monkeypatch.setenv("DEBUGKIT_KERNEL_CACHE", off)
        assert config.kernel_cache_dir() is None
    monkeypatch.setenv("DEBUGKIT_KERNEL_CACHE", str(tmp_path / "k"))
    assert config.kernel_cache_dir() == str(tmp_path / "k")


def test_put_then_get_and_a_damaged_entry_is_not_returned(nv, monkeypatch, tmp_path):
    monkeypatch.setenv("DEBUGKIT_KERNEL_CACHE", str(tmp_path / "k"))
    key = nv.disk_key("__global__ void f() {}", "sm_90", [b"-std=c++17"], [b"// header"], (13, 0))
    assert nv.disk_get(key) is None
    nv.disk_put(key, b"\x7fELF cubin bytes")
    assert nv.disk_get(key) == b"\x7fELF cubin bytes"
    assert [f for f in os.listdir(tmp_path / "k")] == [key + ".cubin"]   # no temporary file left behind
    path = tmp_path / "k" / (key + ".cubin")
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert nv.disk_get(key) is None                     # the checksum catches it: compiled again, not loaded
    path.write_bytes(b"DKCUBIN1")
    assert nv.disk_get(key) is None
    monkeypatch.setenv("DEBUGKIT_KERNEL_CACHE", "0")
    nv.disk_put(key, b"x")
    assert nv.disk_get(key) is None


def test_the_key_depends_on_everything_the_compile_does(nv):
    base = ("src", "sm_90", [b"-std=c++17"], [b"h1"], (13, 0))
    k = nv.disk_key(*base)
    variants = [("src2",) + base[1:], base[:1] + ("sm_100",) + base[2:], base[:2] + ([b"-O0"],) + base[3:],
                base[:3] + ([b"h2"],) + base[4:], base[:4] + ((13, 1),)]
    assert len({k} | {nv.disk_key(*v) for v in variants}) == 6
    assert nv.disk_key(*base) == k


@pytest.mark.cuda
def test_a_compile_is_kept_and_a_later_process_loads_it_without_nvrtc(nv, monkeypatch, tmp_path):
    """On a GPU: the first compile of a source runs NVRTC and keeps its cubin; the same compile later (as in a fresh
    process: nothing in this process's caches) is read from the cache, bit for bit, and NVRTC is not called."""
    from native.cuda.driver import context
    monkeypatch.setenv("DEBUGKIT_KERNEL_CACHE", str(tmp_path / "k"))
    arch = context().arch
    src = 'extern "C" __global__ void dk_cache_probe(float* x) { x[threadIdx.x] += 1.0f; }\n'
    first = nv.compile_source(src, "probe.cu", arch)
    assert first[:4] == b"\x7fELF" and len(os.listdir(tmp_path / "k")) == 1

    def refuse(*a, **k):
        raise AssertionError("NVRTC called for a kept compile")
    monkeypatch.setattr(nv, "_compile", refuse)
    assert nv.compile_source(src, "probe.cu", arch) == first
