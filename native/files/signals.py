"""Holding termination signals while a C library calls back into Python.

h5py's file-object driver runs our Python `write` from inside HDF5. A KeyboardInterrupt or SystemExit raised by a
signal handler at that moment is raised inside the callback, where h5py can only turn it into an HDF5 error: the
interrupt is lost (or the process later dies of SIGINT instead of exiting 130) and HDF5 is left mid-operation.
`signals_deferred()` records SIGINT/SIGTERM/SIGHUP during such a call and delivers the first one (calls the
handler that was installed before, or re-raises the signal when that was the default) as soon as the call is over.
Process-wide and reversible: the previous handlers are back when the block ends. Main thread only (elsewhere
Python cannot set handlers, and signals are not delivered there anyway).
"""
from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None),
                            getattr(signal, "SIGHUP", None)) if s is not None)


@contextlib.contextmanager
def signals_deferred():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum, frame):
        pending.append(signum)

    saved = {}
    try:
        for sig in SIGNALS:
            old = signal.getsignal(sig)
            if old is signal.SIG_IGN or old is None:
                continue
            saved[sig] = old
            signal.signal(sig, hold)
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
        if pending:
            _deliver(pending[0], saved.get(pending[0]))


def _deliver(signum, handler):
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)
