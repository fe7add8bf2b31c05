"""Joining a Ray cluster for `--ray ADDRESS|auto`, failing fast and clearly when nobody answers.

An explicit address is checked with a plain TCP connection (a few seconds) before Ray is asked, and `ray.init` itself
runs under a bound: an address nobody answers is a usage error (exit 2) within 30 s, not minutes of Ray's retries.
`auto` joins the cluster named by RAY_ADDRESS or by the last `ray start` on this machine when its head answers, and
otherwise (no cluster, or one that crashed and left its address file behind) starts a local one at once.
"""
from __future__ import annotations

import socket
import threading
import time

from native import config
from native.errors import UsageError
from native.logger import G_LOGGER

CONNECT_TIMEOUT_S = 5.0    # one TCP connection attempt to the head's port
INIT_TIMEOUT_S = 20.0      # ray.init once the port answers


class RayUnreachableError(UsageError):
    """--ray names an address where no Ray cluster answers."""


def split_address(address: str):
    """(host, port) of 'host:port', 'ray://host:port' (Ray client, default port 10001) or '[v6]:port'."""
    text = address.strip()
    default = None
    if text.startswith("ray://"):
        text, default = text[len("ray://"):], 10001
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not port and default is not None:
        return host, default
    try:
        return host, int(port)
    except ValueError:
        raise UsageError(f"--ray {address}: give HOST:PORT of the cluster's head (ray start --head prints it), "
                         f"ray://HOST:PORT for a Ray client server, or auto") from None


def answers(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when a TCP connection to host:port opens within timeout_s, else why not (one phrase)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except socket.timeout:
        return f"no answer within {timeout_s:g} s"
    except OSError as e:
        return e.strerror or str(e)


def _recorded_address():
    """The address `auto` would join: RAY_ADDRESS, or the last `ray start` on this machine; None if neither."""
    import os
    env = os.environ.get("RAY_ADDRESS")
    if env and env != "auto":
        return env, "RAY_ADDRESS"
    try:
        from ray._private.utils import read_ray_address
        addr = read_ray_address()
    except Exception:
        addr = None
    return (addr, "the last `ray start` on this machine") if addr else (None, None)


def _init_bounded(ray, timeout_s: float, **kwargs):
    """ray.init(**kwargs) joining a running cluster, in a helper thread waited for at most timeout_s (Ctrl-C still
    reaches this thread). Only for joining: a local instance must be started from the main thread."""
    box = {}

    def target():
        try:
            box["ok"] = ray.init(**kwargs)
        except BaseException as e:   # handed to the caller's thread
            box["error"] = e
    t = threading.Thread(target=target, name="debugkit-ray-init", daemon=True)
    t.start()
    end = time.monotonic() + timeout_s
    while t.is_alive() and time.monotonic() < end:
        t.join(0.2)
    if t.is_alive():
        return f"Ray did not finish connecting within {timeout_s:g} s"
    if "error" in box:
        e = box["error"]
        if isinstance(e, (ConnectionError, TimeoutError, RuntimeError, ValueError)):
            return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise e
    return None


def _join(ray, address: str, **kwargs):
    """None once Ray has joined the cluster at `address`, else why not (one phrase): the head's port is checked
    with one TCP connection first, then ray.init runs under INIT_TIMEOUT_S. A failed ray.init is shut down again
    (only then: a port that does not answer never reached Ray)."""
    host, port = split_address(address)
    why = answers(host, port)
    if why is not None:
        return why
    why = _init_bounded(ray, INIT_TIMEOUT_S, address=address, **kwargs)
    if why is not None:
        try:
            ray.shutdown()
        except Exception:
            pass
    return why


def connect(address: str = "auto", num_cpus: int | None = None):
    """The `ray` module, initialised on the cluster at `address` (see the module docstring)."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'debugkit[ray]'") from None
    if ray.is_initialized():
        return ray
    env = {"env_vars": config.single_core_env()}
    common = dict(ignore_reinit_error=True, log_to_driver=False, runtime_env=env)
    t0 = time.monotonic()
    if address != "auto":
        why = _join(ray, address, **common)
        if why is None:
            return ray
        raise RayUnreachableError(f"--ray {address}: no Ray cluster answers there ({why}, after "
                                  f"{time.monotonic() - t0:.0f} s); start one with `ray start --head` or use "
                                  f"--ray auto")
    addr, source = _recorded_address()
    if addr:
        why = _join(ray, addr, **common)
        if why is None:
            return ray
        G_LOGGER.warning(f"--ray auto: the cluster at {addr} ({source}) does not answer ({why}); "
                         f"starting a local Ray instance instead")
    G_LOGGER.info("--ray auto: starting a local Ray instance" + (f" with {num_cpus} CPUs" if num_cpus else ""))
    import os
    stale = os.environ.pop("RAY_ADDRESS", None)   # the dead address must not steer the new instance
    try:
        # in this (the main) thread: Ray's head processes die with the thread that started them (their parent
        # death signal follows the thread), so a helper thread would leave a cluster killed a moment later
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **common)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UsageError(f"--ray auto: could not start a local Ray instance ({str(e).splitlines()[0]})") from None
    finally:
        if stale is not None:
            os.environ["RAY_ADDRESS"] = stale
    return ray
