"""Transfers on the CUDA device: chunked pinned uploads round-trip exactly; GPU tensors (torch) are fed in place and
results handed out as device arrays, with no host copy either way, also under CUDA graphs."""
import numpy as np
import onnx
import pytest

from tests.native.cuda.test_cuda_kernels import _convnet

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("nbytes", [0, 1000, (4 << 20) + 3, 41 * (1 << 20) + 12])
def test_chunked_pinned_upload_round_trips_exactly(nbytes):
    from native.cuda.array import GpuArray
    from native.cuda.driver import UPLOAD_CHUNK_BYTES
    x = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    assert nbytes < 2 * UPLOAD_CHUNK_BYTES or nbytes > 4 * UPLOAD_CHUNK_BYTES
    np.testing.assert_array_equal(GpuArray.from_host(x).get(), x)


def _no_host_copies(monkeypatch):
    from native.cuda.driver import Context

    def refuse(*a, **k):
        raise AssertionError("a host copy happened")
    monkeypatch.setattr(Context, "upload", refuse)
    monkeypatch.setattr(Context, "download", refuse)


@pytest.mark.parametrize("graph", [False, True])
def test_torch_cuda_tensors_in_and_device_arrays_out_without_host_copies(tmp_path, monkeypatch, graph):
    torch = pytest.importorskip("torch")
    from backends.runners import EngineRunner
    path = tmp_path / "convnet.onnx"
    onnx.save(_convnet(), path)
    xs = [np.random.default_rng(i).standard_normal((4, 16, 32, 32)).astype(np.float32) for i in range(2)]
    with EngineRunner(str(path), device="cuda", shapes={"x": xs[0].shape}) as r:
        want = [r.infer({"x": x})["y"] for x in xs]
        ctx = r.context
        if graph:
            ctx.enable_cuda_graph()
            ctx.execute({"x": xs[0]})            # capture from a host feed, then replay from device tensors
        feeds = [torch.from_numpy(x).cuda() for x in xs]
        torch.cuda.synchronize()
        with monkeypatch.context() as m:
            _no_host_copies(m)
            got = [ctx.execute({"x": f}, device_outputs=True)["y"] for f in feeds]
        assert all(hasattr(g, "__cuda_array_interface__") for g in got)
        host = [torch.as_tensor(g, device="cuda").cpu().numpy() for g in got]
    for a, b in zip(host, want):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(host[0], host[1])


def test_runner_infer_takes_torch_feeds_and_refuses_non_contiguous_ones(tmp_path):
    torch = pytest.importorskip("torch")
    from backends.runners import EngineRunner
    from native.errors import FeedError
    path = tmp_path / "convnet.onnx"
    onnx.save(_convnet(), path)
    x = np.random.default_rng(3).standard_normal((4, 16, 32, 32)).astype(np.float32)
    with EngineRunner(str(path), device="cuda", shapes={"x": x.shape}, device_outputs=True) as r:
        got = r.infer({"x": torch.from_numpy(x).cuda()})["y"]
        ref = r.context.execute({"x": x})["y"]
        np.testing.assert_array_equal(torch.as_tensor(got, device="cuda").cpu().numpy(), ref)
        strided = torch.from_numpy(x).cuda().transpose(2, 3)
        with pytest.raises(FeedError, match="not C-contiguous"):
            r.infer({"x": strided})
