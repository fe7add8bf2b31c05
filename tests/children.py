"""Child processes that tests signal or leave running: started in their own process group and always killed with it
when the test ends (also when it fails or times out), a readiness handshake instead of sleeps, and the termination
signals a terminal would deliver.

Why the signal dispositions: a suite started in the background by a non-interactive shell (`pytest ... &`, nohup,
a CI or landing script) runs with SIGINT (and SIGHUP, SIGQUIT) ignored, and children inherit that; Python then
installs no KeyboardInterrupt handler, so a test's Ctrl-C to its child would do nothing and the child would run on.
`TERMINAL_SIGNALS` (Python source, the first line of a child's script) gives the child what a process started from
a terminal has: SIGINT raises KeyboardInterrupt, SIGTERM and SIGHUP have their default action.
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time

TERMINAL_SIGNALS = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                    "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGHUP)]")

# how long a test waits for a child that should answer at once: a guard against a hang, never a budget that a
# loaded machine could exceed (the answer is waited for, not the clock)
HANG_GUARD_S = 300.0


@contextlib.contextmanager
def child(argv, ready=False, **popen_kw):
    """subprocess.Popen(argv) in a new session (its own process group); on leaving the block the whole group is
    killed (SIGKILL) and the child reaped, whatever happened in the block. With `ready`, the child gets the write
    end of a pipe, its number in the environment variable TEST_READY_FD, to say where it is (`wait_for_line`)."""
    fds = os.pipe() if ready else None
    if ready:
        popen_kw["env"] = dict(popen_kw.get("env") or os.environ, TEST_READY_FD=str(fds[1]))
        popen_kw["pass_fds"] = tuple(popen_kw.get("pass_fds", ())) + (fds[1],)
    try:
        proc = subprocess.Popen(argv, start_new_session=True, **popen_kw)
    finally:
        if ready:
            os.close(fds[1])   # the child's end: EOF here once the child is gone
    proc.ready_fd = fds[0] if ready else None
    try:
        yield proc
    finally:
        kill_group(proc)
        if ready:
            os.close(fds[0])


def kill_group(proc: subprocess.Popen):
    """SIGKILL to `proc`'s process group (its own: started with start_new_session), then reap it and close its
    pipes. The group is signalled only while the leader is not reaped yet: its pid cannot name another group then."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=HANG_GUARD_S)   # reaps, and drains and closes the pipes


def wait_for_line(proc: subprocess.Popen, want: str, timeout: float = HANG_GUARD_S) -> str:
    """Read the child's ready pipe until a line equals `want` (its "I am there" message); returns what was read.
    Fails when the child exits first or after `timeout` seconds (a hang guard)."""
    fd = proc.ready_fd
    got, end = b"", time.monotonic() + timeout
    while (want + "\n").encode() not in got:
        if time.monotonic() > end:
            raise AssertionError(f"child {proc.pid} did not say {want!r} within {timeout:.0f} s; it said {got!r}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError(f"child {proc.pid} closed its pipe before saying {want!r} (exit code "
                                     f"{proc.wait(HANG_GUARD_S)}); it said {got!r}")
            got += chunk
    return got.decode()


# the interpreter's own helpers, which end with it (multiprocessing's semaphore tracker and fork server)
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def kill_descendants(pid: int) -> list[tuple[int, str]]:
    """SIGKILL every live process below `pid` (children, their children, ...) and the process groups they lead;
    returns [(pid, command line)] of those killed. Linux (/proc); elsewhere nothing is found."""
    parent, state, groups = {}, {}, {}
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for p in entries:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue   # gone meanwhile
        state[p], parent[p], groups[p] = fields[0], int(fields[1]), int(fields[2])
    below, frontier = [], [pid]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        below += frontier
    killed = []
    for p in below:
        if state[p] in "ZX":
            continue   # already dead, waiting to be reaped by its owner
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if any(h in command for h in _HELPERS):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if groups[p] == p:
                os.killpg(p, signal.SIGKILL)
            os.kill(p, signal.SIGKILL)
            killed.append((p, command[:200]))
    return killed
