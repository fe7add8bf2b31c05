"""The importer registry: OpImporter, the class every op importer derives from, and the @onnx_op decorator that
files it by (domain, op type) and the opset it appeared in. The importer modules import this (not their package),
so the package can import them without a cycle."""
from __future__ import annotations

_IMPORTERS: dict[tuple[str, str], list] = {}


class OpImporter:
    op_type = ""
    domain = ""
    since_version = 1

    def convert(self, ctx, node, inputs, attrs):
        raise NotImplementedError


def onnx_op(op_type: str, since_version: int = 1, domain: str = ""):
    """Class decorator registering an importer for (domain, op_type) from `since_version` on."""

    def wrap(cls):
        cls.op_type, cls.since_version, cls.domain = op_type, since_version, domain
        _IMPORTERS.setdefault((domain, op_type), []).append(cls())
        _IMPORTERS[(domain, op_type)].sort(key=lambda imp: imp.since_version)
        return cls

    return wrap
