"""One logger for the whole package, with TensorRT's severities.

Logging is the user interface: say what was done, what failed, and what to try next.
"""
import enum
import logging
import sys
import threading


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

    def log(self, severity, message):
        severity = Severity(severity)
        if severity < self.min_severity:
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
logging.getLogger("debugkit").addHandler(logging.NullHandler())
