"""One logger for the whole package, with TensorRT's severities.

Logging is the user interface: say what was done, what failed, and what to try next.
"""
import contextlib
import enum
import logging
import re
import sys
import threading
import warnings


class Severity(enum.IntEnum):
    INTERNAL_ERROR = 50
    ERROR = 40
    WARNING = 30
    INFO = 20
    VERBOSE = 10


class Logger:
    """Thread-safe logger with a severity threshold (`Logger(Logger.WARNING)` as in TensorRT)."""

    INTERNAL_ERROR = Severity.INTERNAL_ERROR
    ERROR = Severity.ERROR
    WARNING = Severity.WARNING
    INFO = Severity.INFO
    VERBOSE = Severity.VERBOSE

    def __init__(self, min_severity=Severity.WARNING, stream=None):
        self.min_severity = Severity(min_severity)
        self.stream = stream
        self._lock = threading.Lock()
        self.formatter = None  # callable(severity, message) -> str, set by the CLI for colour
        # --log-file: a file that also gets what is below the terminal's threshold, down to file_severity
        self.file = None
        self.file_severity = Severity.INFO

    def log(self, severity, message):
        severity = Severity(severity)
        if severity < self.min_severity:
            if self.file is not None and severity >= self.file_severity:
                with self._lock:
                    self.file.write(f"[{severity.name[0]}] {message}\n")
                    self.file.flush()
            return
        text = self.formatter(severity, message) if self.formatter else f"[{severity.name[0]}] {message}"
        with self._lock:
            print(text, file=self.stream or sys.stderr, flush=True)

    def verbose(self, message):
        self.log(Severity.VERBOSE, message)

    def info(self, message):
        self.log(Severity.INFO, message)

    def warning(self, message):
        self.log(Severity.WARNING, message)

    def error(self, message):
        self.log(Severity.ERROR, message)


G_LOGGER = Logger()


_KIND = re.compile(r"^(overflow|invalid value|divide by zero|underflow)")


class WarningTally:
    """numpy's floating-point RuntimeWarnings ("overflow encountered in matmul"), counted instead of printed.

    Each warning goes to the log (the first per layer and kind at INFO, so -v and --log-file show it; the rest at
    VERBOSE), and `summary()` is the one line a terminal sees: "412 numpy warnings (overflow 400, invalid value 12)
    in 9 layers (fp16 9), see -v or the log file". `locate()` (given by whoever knows what is executing) returns the
    layer running now (an object with `name` and `precision`) or None. Other warnings are shown as usual.
    """

    def __init__(self, locate=None, logger=None):
        self.locate = locate
        self.logger = logger or G_LOGGER
        self.count = 0
        self.kinds: dict = {}
        self.sites: dict = {}     # (kind, numpy function) -> count
        self.layers: dict = {}    # layer name -> precision
        self._seen = set()
        self._lock = threading.Lock()
        self._show = None

    def show(self, message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if not (issubclass(category, RuntimeWarning) and "encountered in" in text):
            return self._show(message, category, filename, lineno, file, line)
        m = _KIND.match(text)
        kind = m.group(1) if m else text.split(" encountered")[0]
        op = text.rsplit(" encountered in ", 1)[-1] if " encountered in " in text else ""
        layer = None
        if self.locate is not None:
            try:
                layer = self.locate()
            except Exception:   # attribution is a nicety; never let it break a run
                layer = None
        name = getattr(layer, "name", None)
        precision = str(getattr(layer, "precision", "") or "")
        with self._lock:
            self.count += 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            self.sites[(kind, op)] = self.sites.get((kind, op), 0) + 1
            if name is not None:
                self.layers[name] = precision
            first = (name, kind) not in self._seen
            self._seen.add((name, kind))
        where = f"layer '{name}' ({precision})" if name is not None else "outside a layer"
        self.logger.log(Severity.INFO if first else Severity.VERBOSE,
                        f"numpy: {text} in {where} at {filename}:{lineno}")

    def summary(self, see="-v or --log-file") -> str | None:
        if not self.count:
            return None
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items(), key=lambda kv: -kv[1]))
        text = f"{self.count} numpy warning{'s' if self.count != 1 else ''} ({kinds})"
        if self.layers:
            by_prec: dict = {}
            for p in self.layers.values():
                by_prec[_short(p)] = by_prec.get(_short(p), 0) + 1
            precs = ", ".join(f"{p} {n}" for p, n in sorted(by_prec.items(), key=lambda kv: -kv[1]))
            text += f" in {len(self.layers)} layer{'s' if len(self.layers) != 1 else ''} ({precs})"
        return f"{text}; each is in the log, see {see}"


def _short(precision: str) -> str:
    return {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16", "int8": "int8"}.get(precision, precision or "?")


@contextlib.contextmanager
def tally_warnings(locate=None, logger=None):
    """Within the block, numpy's floating-point RuntimeWarnings are counted by a WarningTally (yielded) and logged
    instead of printed; the warning filters and the display hook are restored on exit."""
    tally = WarningTally(locate, logger)
    with warnings.catch_warnings():
        warnings.simplefilter("always", RuntimeWarning)
        tally._show = warnings.showwarning
        warnings.showwarning = tally.show
        yield tally
logging.getLogger("debugkit").addHandler(logging.NullHandler())
