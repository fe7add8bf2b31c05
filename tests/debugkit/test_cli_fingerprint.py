"""The CLI refuses a plan built for another machine, and --ignore-fingerprint is the explicit opt-out (one command)."""
from backends.engine import BuilderConfig
from backends.engine.build import parse_onnx
from backends.engine.builder import Builder
from backends.engine.plan import serialize_plan
from native.config import settings
from tests.backends.test_engine_core import mlp_model


def test_run_refuses_a_foreign_plan_unless_told_to_ignore_the_fingerprint(cli, tmp_path, monkeypatch):
    from native.cpu.device import CpuDevice
    real = CpuDevice.fingerprint
    monkeypatch.setattr(CpuDevice, "fingerprint", lambda self: dict(real(self), machine="riscv64"))
    net, _ = parse_onnx(mlp_model(dynamic=False).SerializeToString())
    plan = tmp_path / "foreign.plan"
    plan.write_bytes(serialize_plan(Builder().build_graph(net, BuilderConfig()), BuilderConfig()))
    monkeypatch.setattr(CpuDevice, "fingerprint", real)
    code, _, err = cli("run", plan, "--engine")
    assert code == 2 and "another machine" in err and "riscv64" in err and "--ignore-fingerprint" in err
    code, out, err = cli("run", plan, "--engine", "--ignore-fingerprint")
    assert code == 0, err
    assert settings().check_fingerprint is True     # the flag lasted one command
