"""Einsum on the GPU where it is a transpose or a (batched) matrix product: every label of a two-operand equation
is a batch label (both operands and the output), a contracted one (both operands, not the output) or a free one
(one operand and the output); the operands are transposed to [batch, free, contracted] / [batch, contracted,
free], multiplied by cuBLAS (gemm.matmul, FP32 accumulation) and the product transposed to the output's order.
Repeated labels (traces, diagonals), sums over a label of one operand, broadcasting and more than two operands
raise TacticRefusal: the host tactic (numpy.einsum) runs them."""
from __future__ import annotations

import numpy as np

from native.cuda.availability import missing
from native.cuda.tactics.common import FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, same_float
from native.cuda.tactics.tensor import transpose
from native.tactics import Tactic, TacticRefusal, register_tactic


def parse(equation: str, ranks) -> tuple[list, str]:
    """(operand label strings, output labels) with '...' spelled out as upper-case letters, implicit outputs made
    explicit (labels seen once, alphabetical, after the ellipsis)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise TacticRefusal(f"einsum '{equation}' names {len(terms)} operands, got {len(ranks)}")
    n_ell = max([r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t] or [0])
    ell = "".join(chr(ord("A") + i) for i in range(n_ell))
    out = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - len(t.replace("...", ""))
            if k != n_ell:
                raise TacticRefusal("ellipses of different ranks broadcast; the host tactic runs them")
            t = t.replace("...", ell[n_ell - k:])
        if len(t) != r or not t.isalpha():
            raise TacticRefusal(f"einsum term {t!r} does not match an operand of rank {r}")
        out.append(t)
    if arrow:
        rhs = rhs.replace("...", ell)
    else:
        counts = {}
        for t in out:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        rhs = ell + "".join(sorted(ch for ch, k in counts.items() if k == 1 and ch not in ell))
    return out, rhs


@register_tactic
class CublasEinsum(Tactic):
    kind, name, device = "Einsum", "cublas-transpose", "cuda"
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)

    def supports(self, op, input_shapes):
        return missing("cublas")

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.cuda.tactics.gemm import matmul
        xs = [on_device(x) for x in inputs]
        dtype = same_float(xs)
        terms, rhs = parse(op.params["equation"], [x.ndim for x in xs])
        if any(len(set(t)) != len(t) for t in terms + [rhs]):
            raise TacticRefusal("repeated einsum labels (traces, diagonals) run on the host")
        size = {}
        for t, x in zip(terms, xs):
            for ch, d in zip(t, x.shape):
                if size.setdefault(ch, d) != d:
                    raise TacticRefusal(f"einsum label {ch} has sizes {size[ch]} and {d}; the host tactic reports it")
        if len(xs) == 1:
            (a,), (ta,) = xs, terms
            if set(ta) != set(rhs):
                raise TacticRefusal("einsum sums over a label; the host tactic runs it")
            return [transpose(a, [ta.index(ch) for ch in rhs])]
        if len(xs) != 2:
            raise TacticRefusal(f"einsum of {len(xs)} operands runs on the host")
        (a, b), (ta, tb) = xs, terms
        batch = [ch for ch in rhs if ch in ta and ch in tb]
        free_a = [ch for ch in rhs if ch in ta and ch not in tb]
        free_b = [ch for ch in rhs if ch in tb and ch not in ta]
        contract = [ch for ch in ta if ch in tb and ch not in rhs]
        if set(ta) | set(tb) != set(batch + free_a + free_b + contract) or any(ch not in ta + tb for ch in rhs):
            raise TacticRefusal("einsum sums over a label of one operand; the host tactic runs it")

        def prod(labels):
            return int(np.prod([size[ch] for ch in labels], dtype=np.int64))

        nb, m, n, k = prod(batch), prod(free_a), prod(free_b), prod(contract)
        a = transpose(a, [ta.index(ch) for ch in batch + free_a + contract]).reshape((nb, m, k))
        b = transpose(b, [tb.index(ch) for ch in batch + contract + free_b]).reshape((nb, k, n))
        y = matmul(a, b, tf32=(op.math == "tf32"), out_dtype=dtype)
        order = batch + free_a + free_b
        y = y.reshape(tuple(size[ch] for ch in order))
        return [transpose(y, [order.index(ch) for ch in rhs])]
