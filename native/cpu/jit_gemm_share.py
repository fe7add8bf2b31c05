"""GEMM shares that the CPU pool's worker runs without the GIL (the `jit` extra; native/cpu/threads.py).

A GEMM split over the pool (matmul.gemm_columns: BERT's [16..32, K] x [K, N] layers, ~100-300 us) handed its
worker a Python function: the worker, polling outside the GIL, saw the job at once but then waited for the GIL,
which the caller held until its own share reached BLAS, and took it through a futex wake-up (25-100 us on this
2-vCPU VM): measured, the worker's half of [32, 256] x [256, 1024] started 30-100 us after the caller's, and the
split ran at 0.9-1.15x one thread. Here the share is a descriptor of one OpenBLAS `cblas_sgemm` call (row-major,
no transposes, alpha 1, beta 0; pointers and leading dimensions) that the worker runs from inside its poll loop
(`serve`), and the caller runs its own share through the same call (`run_share`), so neither side takes the GIL:
the same routine with the same arguments numpy's matmul passes for a 2-D float32 product of at least 2 rows and 2
columns, so the same floats (tested bitwise).

    serve(flags, job, j, value, i, seen, polls, busy, seen_at, polls_after, dozes=0, nap_us=0) -> bool
        jit_spin.publish_wait_change, and meanwhile run every GEMM share posted in `job` (flags[GEMM_POSTED]
        bumped): claim it (compare-and-swap of flags[GEMM_CLAIMED] from n - 1 to n), run it, store
        flags[GEMM_DONE] = n, then poll `polls_after` more times (the next GEMM layer of a run often comes after a
        few small layers: a worker that went back to Python to sleep would need the GIL, held by the caller's
        Python, to return). With `dozes`, when the polls run out it dozes instead of returning: flags[DOZING] = 1
        (flags[busy] 0: nothing is posted to it), up to `dozes` naps of usleep(nap_us) (~115 us each for 50 here),
        still without the GIL; a caller that stores 2 there wakes it to poll 4 * `polls_after` times more (the
        first kernel share of a run finds it dozing: woken without the GIL, where a worker asleep on its lock
        needs the GIL, which a busy caller's Python holds for up to its 5 ms switch interval, to wake). A 3 there
        (a caller backing off: threads._back_off) ends the polls at once: dozing, it leaves the CPU to the others;
        a 4 (threads.rest) ends the polls and the doze: it returns, to sleep on its lock.
        With `grace` and `waiting_at` >= 0, having seen flags[i] change (a Python job, which needs the GIL) it
        polls up to `grace` times more before returning (to take the GIL), or until flags[waiting_at] reaches
        the new flags[i] (the caller waits for that job, outside the GIL): the caller holds the GIL while it posts
        the job and enters its own share, and a worker that asks for the GIL then sleeps on the GIL's condition
        variable until the caller lets go, woken by a futex (25-100 us on this VM: threads.GIL_GRACE_POLLS).
    post(flags, job, share, n)        the caller: job[1:] = share, then flags[GEMM_POSTED] = n (release).
    finish(flags, job, n, polls, done_polls=1 << 22) -> int
        the caller, after its own share: 0 once the worker has run share n; 1 when the worker had not claimed it
        within `polls` polls (its CPU taken) and the caller ran it here instead; 2 when the worker claimed it but is
        still running it after `done_polls` polls (the caller then sleeps on it, threads.py).
    sgemm_descriptor(a, b, y, out)    out[:9] = threads.gemm_share(a, b, y)'s descriptor, compiled: numpy's
        `ctypes.data` costs ~3 us an address, ~9 us a share in Python (for threads.gemm_share to call).
    run_share(job_or_share)           one share here (job[0] is the cblas_sgemm address); a share whose m word
        (job[1]) is negative is a packed-panel GEMM's instead (jit_panel_gemm.panel_share: the
        packed-gemm-panels tactic's split, the same hand-off), and one whose m word is KERNEL a kernel share's:
        job[0](job[2], job[3]), a C function `void f(int64 *args, int64 code)` (a numba @cfunc's address) on an
        argument block of int64 words. numba's disk cache keys `serve` / `run_share` by this file only: after
        editing jit_panel_gemm.py, touch this one too (or clear the cache).
    kernel_stages(flags, job, n, fn, args, x, y, sample, first, stages, alone, polls) -> (stage, status, n)
        kernel shares for one worker: args[0] / args[1] = the addresses of x[sample] / y[sample], then for each stage
        st in [first, stages): post fn(args, 2 * st + 1) (share n + 1, ...) to the worker, run fn(args, 2 * st) here,
        `finish` it (whichever of the two runs it). Where both halves run here one after the other, the second's code
        has ALONE added (it may reuse what the first computed: the same floats). A stage that needs the whole of the
        previous one (a squeeze-excite gate over all channels) is a stage of its own: the post-and-finish is the
        barrier. Once a share is taken over (status 1: the worker's CPU taken), or with `alone`, the remaining stages
        run both halves here; status 2: the worker claimed stage `stage - 1`'s share and has not finished it after 1
        << 15 polls (~1 ms: preempted mid-share): the caller sleeps until it has (threads.kernel_shares), then runs
        the rest alone; status 3: every half ran where posted, but the worker finished one more than SLOW_CYCLES after
        the caller's and took over twice as long (it shares its CPU with another process: the caller then stops
        handing over for a while). The whole run is one call without the GIL: a hand-off within it costs a release
        store and a poll (measured in docs/PERFORMANCE.md), where a Python one costs 25-100 us.

Module level, so numba's disk cache finds it in the next process (the address is an argument, not a constant).
Imported only where numba is installed.
"""
from __future__ import annotations

import ctypes

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_panel_gemm import panel_share
from native.cpu.jit_spin import _load_acquire, _pause, _store_release, wait_change  # noqa: F401

GEMM_POSTED, GEMM_CLAIMED, GEMM_DONE, DOZING = 4, 5, 6, 7
KERNEL = -(1 << 62)   # job[1] of a kernel share (a panel share's m word is -1 - M; a cblas_sgemm share's M >= 0)
SLOW_CYCLES = 50000   # ~20 us: a kernel share's worker half later than the caller's by more than this and its length
ALONE = 1 << 8        # added to a kernel share's second-half code where the caller runs it right after the first
FLAG_WORDS = 8
JOB_WORDS = 10        # [cblas_sgemm address, m, n, k, a, lda, b, ldb, c, ldc]
_ROW_MAJOR, _NO_TRANS = 101, 111


@intrinsic
def _cas(typingctx, arr, idx, expected, value):
    """Atomic compare-and-swap of arr[idx] (int64) from `expected` to `value`; True when it swapped."""
    sig = types.boolean(arr, idx, expected, value)

    def codegen(context, builder, signature, args):
        from numba.core import cgutils
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        res = builder.cmpxchg(ptr, args[2], args[3], "acq_rel", "acquire")
        return builder.extract_value(res, 1)
    return sig, codegen


@intrinsic
def _sgemm(typingctx, fn, m, n, k, a, lda, b, ldb, c, ldc):
    """cblas_sgemm(RowMajor, NoTrans, NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc) through the address `fn`
    (OpenBLAS built with 64-bit integers, as numpy's scipy-openblas64 wheels are: threads.sgemm_address checks)."""
    sig = types.void(fn, m, n, k, a, lda, b, ldb, c, ldc)

    def codegen(context, builder, signature, args):
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, f32, p, i64, p, i64, f32, p, i64])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_ = args[1:]
        builder.call(f, [ir.Constant(i32, _ROW_MAJOR), ir.Constant(i32, _NO_TRANS), ir.Constant(i32, _NO_TRANS),
                         m_, n_, k_, ir.Constant(f32, 1.0), builder.inttoptr(a_, p), lda_, builder.inttoptr(b_, p),
                         ldb_, ir.Constant(f32, 0.0), builder.inttoptr(c_, p), ldc_])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _nap(typingctx, us):
    """usleep(us) (libc, found by name when numba links the function: cache-safe, no address baked in)."""
    sig = types.void(us)

    def codegen(context, builder, signature, args):
        from numba.core import cgutils
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32]), "usleep")
        builder.call(fn, [builder.trunc(args[0], i32)])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _cycles(typingctx):
    """The CPU's cycle counter (llvm.readcyclecounter: rdtsc on x86; 0 where there is none)."""
    sig = types.int64()

    def codegen(context, builder, signature, args):
        from numba.core import cgutils
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])
    return sig, codegen


@intrinsic
def _call(typingctx, fn, args, code):
    """fn(args, code) through the address `fn` of a C function void(int64 *, int64) (a numba @cfunc's)."""
    sig = types.void(fn, args, code)

    def codegen(context, builder, signature, a):
        i64 = ir.IntType(64)
        f = builder.inttoptr(a[0], ir.FunctionType(ir.VoidType(), [i64.as_pointer(), i64]).as_pointer())
        builder.call(f, [builder.inttoptr(a[1], i64.as_pointer()), a[2]])
        return context.get_dummy_value()
    return sig, codegen


@numba.njit(nogil=True, cache=True)
def sgemm_descriptor(a, b, y, out):
    m, k = a.shape
    out[0], out[1], out[2] = m, b.shape[1], k
    out[3], out[4] = np.int64(a.ctypes.data), a.strides[0] // 4
    out[5], out[6] = np.int64(b.ctypes.data), b.strides[0] // 4
    out[7], out[8] = np.int64(y.ctypes.data), y.strides[0] // 4


@numba.njit(nogil=True, cache=True)
def run_share(job):
    if job[1] == KERNEL:
        _call(job[0], job[2], job[3])
    elif job[1] < 0:
        panel_share(job)
    else:
        _sgemm(job[0], job[1], job[2], job[3], job[4], job[5], job[6], job[7], job[8], job[9])


@numba.njit(nogil=True, cache=True)
def serve(flags, job, j, value, i, seen, polls, busy, seen_at, polls_after, dozes=0, nap_us=0, grace=0,
          waiting_at=-1):
    _store_release(flags, DOZING, 0)     # (a rest asked for before this call is for the call before it)
    _store_release(flags, busy, 1)
    _store_release(flags, j, value)
    got = False
    k = 0
    left = polls
    d = -1
    while True:
        if _load_acquire(flags, i) != seen:
            got = True
            break
        n = _load_acquire(flags, GEMM_POSTED)
        if n != _load_acquire(flags, GEMM_DONE) and _cas(flags, GEMM_CLAIMED, n - 1, n):
            run_share(job)
            _store_release(flags, GEMM_DONE, n)
            k = 0
            left = polls_after
            continue
        if k < left and _load_acquire(flags, DOZING) < 3:
            _pause()
            k += 1
            continue
        if _load_acquire(flags, DOZING) == 4:    # told to rest (threads.rest): return, to sleep on the lock
            break
        if d < 0:    # polls used up, or told to stop (3: a caller backed off): doze, not polling (no share posted)
            if dozes <= 0:
                break
            _store_release(flags, busy, 0)
            _store_release(flags, DOZING, 1)
            d = 0
        if _load_acquire(flags, DOZING) == 2:    # woken: poll again (GEMM_KICK-long)
            _store_release(flags, DOZING, 0)
            _store_release(flags, busy, 1)
            d = -1
            k = 0
            left = polls_after << 2
            continue
        if d >= dozes:
            break
        _nap(nap_us)
        d += 1
    if not got:
        got = _load_acquire(flags, i) != seen
    if got:
        _store_release(flags, seen_at, _load_acquire(flags, i))
        if waiting_at >= 0 and grace > 0:   # a Python job: give the caller time to leave the GIL (see above)
            _store_release(flags, busy, 0)
            target = _load_acquire(flags, i)
            for _ in range(grace):
                if _load_acquire(flags, waiting_at) == target:
                    break
                _pause()
    _store_release(flags, DOZING, 0)
    _store_release(flags, busy, 0)
    return got


@numba.njit(nogil=True, cache=True)
def post(flags, job, share, n):
    for q in range(JOB_WORDS - 1):
        job[q + 1] = share[q]
    _store_release(flags, GEMM_POSTED, n)


@numba.njit(nogil=True, cache=True)
def finish(flags, job, n, polls, done_polls=1 << 22):
    claimed = False
    for _ in range(polls):
        if _load_acquire(flags, GEMM_CLAIMED) == n:
            claimed = True
            break
        _pause()
    if not claimed and _cas(flags, GEMM_CLAIMED, n - 1, n):
        run_share(job)
        _store_release(flags, GEMM_DONE, n)
        return 1
    for _ in range(done_polls):
        if _load_acquire(flags, GEMM_DONE) == n:
            return 0
        _pause()
    return 2


@numba.njit(nogil=True, cache=True)
def kernel_stages(flags, job, n, fn, args, x, y, sample, first, stages, alone, polls):
    args[0] = np.int64(x.ctypes.data) + sample * x.strides[0]
    args[1] = np.int64(y.ctypes.data) + sample * y.strides[0]
    at = np.int64(args.ctypes.data)
    status = 0
    for st in range(first, stages):
        if alone:
            _call(fn, at, 2 * st)
            _call(fn, at, 2 * st + 1 + ALONE)
            continue
        n += 1
        job[0], job[2], job[3] = fn, at, 2 * st + 1
        job[1] = KERNEL
        _store_release(flags, GEMM_POSTED, n)
        t0 = _cycles()
        _call(fn, at, 2 * st)
        t1 = _cycles()
        got = finish(flags, job, n, polls, 1 << 15)    # ~1 ms: then the caller sleeps (a preempted worker)
        if got == 2:
            return st + 1, 2, n
        if got == 1:
            alone = True
            status = 1
        elif _cycles() - t1 > (t1 - t0) + SLOW_CYCLES:    # its half took over twice ours: its CPU is shared
            status = 3
    return stages, status, n


def sgemm_address(lib_path_fns):
    """The address of the 64-bit-integer cblas_sgemm in numpy's OpenBLAS (the library `lib_path_fns` finds), or 0."""
    fn = lib_path_fns(("scipy_cblas_sgemm64_", "cblas_sgemm64_"))
    if fn is None:
        return 0
    return ctypes.cast(fn, ctypes.c_void_p).value or 0
