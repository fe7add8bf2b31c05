"""The one exception family. Every bad input names the thing that is wrong.

It lives in the bottom room so that every room can raise it; `debugkit.errors` re-exports it.
"""


class DebugkitError(Exception):
    """Root of every error debugkit raises on purpose (bad input, unsupported feature, failed check)."""


class InputFileError(DebugkitError):
    """A file is missing, unreadable, or not of the expected kind."""


class ModelError(DebugkitError):
    """An ONNX model is corrupt or invalid."""


class ParseError(DebugkitError):
    """The ONNX parser could not import a model; `.errors` lists (node, op_type, reason)."""

    def __init__(self, message, errors=()):
        super().__init__(message)
        self.errors = list(errors)


class UnsupportedOpError(ParseError):
    """An op type has no importer or plugin."""


class BuildError(DebugkitError):
    """The builder could not produce an engine."""


class PlanError(DebugkitError):
    """A plan file is corrupt, truncated, of another format version, or not a plan."""


class ShapeError(DebugkitError):
    """A shape does not fit the model or its optimization profile."""


class FeedError(DebugkitError):
    """A feed has the wrong name, dtype or shape."""


class ExecutionError(DebugkitError):
    """A layer failed while running; the message names the layer and its ONNX nodes."""


class DataFileError(DebugkitError):
    """A saved data file is unreadable or does not match what it is compared with."""


class UsageError(DebugkitError):
    """A command line or API call is malformed (unknown name, bad value)."""


class CalibrationError(DebugkitError):
    """INT8 calibration failed: a corrupt calibration cache (named with its line), batches that do not fit the
    network, or tensors left without scales."""


class GraphError(BuildError):
    """The builder's graph broke an invariant (Graph.lint) or a mutation would break one; names pass and tensor."""


class OutputFileError(DebugkitError):
    """An output could not be written (disk full, permission, a target that cannot take this format, another
    process writing it, or a path the same command reads); the message says the old file is unchanged."""
class UserCodeExit(BaseException):
    """User code (a --tactics-module, a --data-loader-script) raised SystemExit or KeyboardInterrupt. debugkit
    stops, as that code asked, but says whose code it was (the CLI exits 2 naming the file): never a silent exit 0.
    A BaseException, like the exception it replaces, so no `except Exception` on the way (a tactic skipped during
    timing, a pass that tolerates failures) swallows it."""


def user_code_exit(what: str, exc: BaseException) -> UserCodeExit:
    """The UserCodeExit for `exc` (SystemExit / KeyboardInterrupt) raised inside `what` (e.g. "--tactics-module F")."""
    if isinstance(exc, SystemExit):
        how = f"called sys.exit({exc.code!r})" if exc.code is not None else "called sys.exit()"
    else:
        how = f"raised {type(exc).__name__}"
    return UserCodeExit(f"{what} {how}; user code cannot end debugkit (fix or remove that call)")
