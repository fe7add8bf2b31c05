"""Short spin-waits outside the GIL for the CPU pool's hand-offs (the `jit` extra; native/cpu/threads.py).

A hand-off through a lock puts the waiting thread to sleep, and on a 2-vCPU VM waking it again (a futex wake, the
idle vCPU's interrupt) costs 25-100 us: more than a band of a small GEMM. Here the waiting thread polls a flag
word instead, with `pause` between polls, for a bounded number of polls, without holding the GIL (so the other
thread runs Python meanwhile); the lock is still taken after the spin, so the spin only decides how the wait is
spent, never whether it is correct. The flag is read with an atomic acquire load (a plain load would be hoisted
out of the loop) and written with a release store. No sched_yield between polls: on this kernel's scheduler (EEVDF)
a thread that yields loses its place behind CPU-bound processes for a whole slice (a no-op hand-off measured 4 ms
with two busy processes beside it); the polls are kept short instead and stop when the CPUs are taken (threads.py).

    wait_change(flags [n] int64, i, seen, polls) -> bool
        poll flags[i] until it differs from `seen` (True) or `polls` polls have passed (False).
    publish_wait_change(flags, j, value, i, seen, polls, busy, seen_at) -> bool
        store `value` into flags[j] once the GIL is released, then wait_change(flags, i, seen, polls): the worker's
        "done" and its wait for the next job in one call, so the caller that polls flags[j] takes the GIL back
        without waiting for it; flags[busy] is 1 while it polls (a job handed over then should start at once), and
        the new value of flags[i] goes to flags[seen_at] as soon as it is seen, before the GIL is taken back.

Module level, so numba's disk cache finds it in the next process. Imported only where numba is installed.
"""
from __future__ import annotations

import platform

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)


@intrinsic
def _load_acquire(typingctx, arr, idx):
    sig = types.int64(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        return builder.load_atomic(ptr, "acquire", 8)
    return sig, codegen


@intrinsic
def _store_release(typingctx, arr, idx, value):
    sig = types.void(arr, idx, value)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        builder.store_atomic(args[2], ptr, "release", 8)
        return context.get_dummy_value()
    return sig, codegen


# the spin-loop hint (x86 `pause`; elsewhere a no-op store-free poll is still correct, only hotter)
_PAUSE = "llvm.x86.sse2.pause" if platform.machine().lower() in ("x86_64", "amd64", "i686", "x86") else None


@intrinsic
def _pause(typingctx):
    sig = types.void()

    def codegen(context, builder, signature, args):
        if _PAUSE is None:
            return context.get_dummy_value()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), _PAUSE)
        builder.call(fn, [])
        return context.get_dummy_value()
    return sig, codegen


@numba.njit(nogil=True, cache=True)
def wait_change(flags, i, seen, polls):
    for k in range(polls):
        if _load_acquire(flags, i) != seen:
            return True
        _pause()
    return _load_acquire(flags, i) != seen


@numba.njit(nogil=True, cache=True)
def publish_wait_change(flags, j, value, i, seen, polls, busy, seen_at):
    _store_release(flags, busy, 1)
    _store_release(flags, j, value)
    got = wait_change(flags, i, seen, polls)
    if got:   # what it saw, stored before it waits for the GIL: the caller learns the worker is on a CPU
        _store_release(flags, seen_at, _load_acquire(flags, i))
    _store_release(flags, busy, 0)
    return got
