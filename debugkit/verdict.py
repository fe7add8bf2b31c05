"""One verdict for every command that can pass or fail, and the one rule that turns it into an exit code.

A `Verdict` says what was compared (outputs, intermediate tensors, iterations run, inputs compared, and how many of
the comparisons saw at least one finite pair of values), the NaN/Inf counts, why it failed, the options' fingerprint,
and the result. The exit code derives from it by one rule (`exit_code`):

    3  internal error (a bug in debugkit)
    2  bad input or usage (the command could not judge anything it was asked to)
    0  passed: no disagreement, and at least one finite comparison of at least one input
       (a command that is not asked to compare, e.g. `run --onnxrt --save-outputs`, passes when it ran at least one
       input)
    1  everything else: a disagreement, or nothing compared

`run --json`, the terminal report's last line, `sweep` rows and `debug build|repeat` all read the same object, so
they cannot disagree. `combine()` folds many verdicts (the builds of `debug build`, the runs of `debug repeat`) into
one with the same rule: it passes only when every part passed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

PASSED, FAILED, ERROR, INTERNAL = "PASSED", "FAILED", "ERROR", "INTERNAL ERROR"
STATUS_BY_CODE = {0: PASSED, 1: FAILED, 2: ERROR, 3: INTERNAL}


@dataclass
class Compared:
    """What was compared: distinct model outputs, intermediate tensors, iterations (feeds) run, inputs (feeds) that
    had at least one comparison, comparisons made ((pair, iteration, output) triples) and how many of those saw at
    least one finite pair of values."""

    outputs: int = 0
    tensors: int = 0
    iterations: int = 0
    inputs: int = 0
    comparisons: int = 0
    finite: int = 0

    def __add__(self, other: "Compared") -> "Compared":
        return Compared(**{k: getattr(self, k) + getattr(other, k) for k in asdict(self)})


@dataclass
class Verdict:
    """The result of one command (or of one build/run inside a search)."""

    command: str = ""
    disagreements: list = field(default_factory=list)   # one line per reason the values disagree
    compared: Compared = field(default_factory=Compared)
    nonfinite: list = field(default_factory=list)        # {"source", "iteration", "tensor", "nan", "inf", ...}
    fingerprint: str | None = None
    error: str | None = None       # bad input: why nothing could be judged (exit 2)
    internal: str | None = None    # a bug in debugkit (exit 3)
    comparing: bool = True         # False: the command was not asked to compare (one source): ran = passed
    details: dict = field(default_factory=dict)

    # --- the one rule ------------------------------------------------------------------------------------------
    def nothing_compared(self) -> str | None:
        """Why this verdict compared nothing that counts, or None."""
        c = self.compared
        if c.iterations == 0:
            return "nothing compared: no input was run (the data loader yielded no feed, or --iterations 0)"
        if not self.comparing:
            return None
        if c.comparisons == 0:
            return "nothing compared: no output of one source had a counterpart in the other"
        if c.finite == 0:
            return (f"nothing compared: none of the {c.comparisons} comparison(s) saw a finite pair of values "
                    f"(every output empty, NaN or Inf)")
        return None

    @property
    def passed(self) -> bool:
        return self.error is None and self.internal is None and not self.disagreements \
            and self.nothing_compared() is None

    @property
    def exit_code(self) -> int:
        return exit_code(self)

    @property
    def status(self) -> str:
        return STATUS_BY_CODE[self.exit_code]

    def reasons(self) -> list:
        """Why it did not pass, one line each; never empty when it did not pass."""
        if self.internal:
            return [f"internal error: {self.internal}"]
        if self.error:
            return [self.error]
        out = list(self.disagreements)
        why = self.nothing_compared()
        if why:
            out.append(why)
        return out

    def headline(self) -> str:
        c = self.compared
        what = (f"{c.comparisons} comparison(s)" + (f" ({c.finite} finite)" if c.finite != c.comparisons else "")
                + (f" and {c.tensors} tensor(s)" if c.tensors else "") + f" over {c.iterations} iteration(s)")
        return f"{self.status} | {what}" + (f" | {'; '.join(self.reasons())}" if not self.passed else "")

    def to_json(self) -> dict:
        return {"command": self.command, "status": self.status, "passed": self.passed, "exit_code": self.exit_code,
                "reasons": self.reasons(), "compared": asdict(self.compared), "comparing": self.comparing,
                "nonfinite_counts": self.nonfinite,
                "fingerprint": self.fingerprint, **({"details": self.details} if self.details else {})}

    @classmethod
    def from_json(cls, doc: dict) -> "Verdict":
        """A verdict read back from `to_json` (sweep reads each model's run.json this way)."""
        code = doc.get("exit_code")
        reasons = list(doc.get("reasons") or [])
        v = cls(doc.get("command", ""), compared=Compared(**(doc.get("compared") or {})),
                nonfinite=list(doc.get("nonfinite_counts") or []), fingerprint=doc.get("fingerprint"),
                details=dict(doc.get("details") or {}), comparing=bool(doc.get("comparing", True)))
        if code == 3:
            v.internal = (reasons or [doc.get("error") or "internal error"])[0]
        elif code == 2:
            v.error = (reasons or [doc.get("error") or "bad input"])[0]
        elif code != 0 or not doc.get("passed"):
            derived = v.nothing_compared() if "compared" in doc else None   # recomputed from the counts
            v.disagreements = [r for r in reasons if r != derived]
            if not v.disagreements and derived is None:
                v.disagreements = ["failed"]
        if "compared" not in doc:   # a document written without the counts: its own word is all there is
            v.comparing = False
            v.compared.iterations = max(1, int(doc.get("iterations") or 0)) if code == 0 else 0
        return v

    @classmethod
    def from_exit_code(cls, code: int, message: str = "", command: str = "") -> "Verdict":
        """A verdict known only by a process's exit code (a --check command, a task without a verdict file)."""
        v = cls(command, comparing=False, compared=Compared(iterations=1, inputs=1))
        if code == 0:
            return v
        if code == 2:
            v.error = message or "bad input (exit 2)"
        elif code == 1:
            v.disagreements = [message or "failed (exit 1)"]
        else:
            v.internal = message or f"exit code {code}"
        return v


def exit_code(v: Verdict) -> int:
    """The one rule (module docstring): 3 internal error, 2 bad input, 0 passed, 1 otherwise."""
    if v.internal:
        return 3
    if v.error:
        return 2
    return 0 if v.passed else 1


def search_verdict(command: str, found: bool, answer: str, not_found: str = "", fingerprint: str | None = None) \
        -> Verdict:
    """A debug search's answer (debug tactics, precision, reduce) by the same rule: an answer found passes (exit 0),
    none found is a failure (exit 1, `not_found` the reason); bad input and internal errors never get here (they are
    exit 2 and 3 as for every command). `answer` (e.g. "2 guilty layer(s)") goes into the details."""
    v = Verdict(command, comparing=False, compared=Compared(iterations=1, inputs=1), fingerprint=fingerprint,
                details={"answer": answer})
    if not found:
        v.disagreements = [not_found or "no answer found"]
    return v


def combine(verdicts, command: str = "", label=lambda i: f"run {i}") -> Verdict:
    """Many verdicts as one: counts add up; it passes only when every part passed; the first internal error or
    bad input wins (in that order); each failing part's reasons are kept, prefixed by `label(index)`."""
    out = Verdict(command)
    verdicts = list(verdicts)
    for i, v in enumerate(verdicts):
        out.compared = out.compared + v.compared
        out.nonfinite += v.nonfinite
        out.comparing = out.comparing and v.comparing
        if v.internal and not out.internal:
            out.internal = f"{label(i)}: {v.internal}"
        if v.error and not out.error:
            out.error = f"{label(i)}: {v.error}"
        if not v.passed and not v.internal and not v.error:
            out.disagreements += [f"{label(i)}: {r}" for r in v.reasons()]
    if not verdicts:
        out.compared = Compared()
    return out


def from_summary(summary, *, command: str = "run", fingerprint: str | None = None, comparing: bool = True) -> Verdict:
    """The verdict of a Comparator run (debugkit.compare.comparator.RunSummary)."""
    outputs, comparisons, finite, compared_iters, tensors = set(), 0, 0, set(), 0
    nonfinite = []
    for pr in summary.pairs:
        for r in pr.outputs.values():   # each output's primary check (simple, or indices after --postprocess)
            outputs.add(r.name)
            comparisons += 1
            compared_iters.add(pr.iteration)
            if _finite_pairs(r) > 0:
                finite += 1
            entry = nonfinite_entry(r)
            if entry:
                nonfinite.append({"pair": f"{pr.source} vs {pr.reference}", "iteration": pr.iteration, **entry})
        tensors += len(pr.layers)
    disagreements = summary.reasons()
    for pr in summary.pairs:
        for r in list(pr.outputs.values()) + [r for d in pr.extra_funcs.values() for r in d.values()]:
            if not r.passed:
                disagreements.append(f"{pr.source} vs {pr.reference}, iteration {pr.iteration}: {r.name} "
                                     f"({r.func}): {r.reason or 'failed'}")
        if pr.layerwise and not pr.layerwise_passed and pr.divergence is not None:
            disagreements.append(f"{pr.source} vs {pr.reference}, iteration {pr.iteration}: layerwise, first "
                                 f"divergence at '{pr.divergence.tensor}'")
        elif pr.layerwise and not pr.layerwise_passed:
            disagreements.append(f"{pr.source} vs {pr.reference}, iteration {pr.iteration}: layerwise comparison "
                                 f"failed")
    for src, it, name, problems in summary.validation:
        disagreements.append(f"{src} iteration {it}: '{name}' has {', '.join(problems)}")
    for nf in summary.first_nonfinite.values():
        disagreements.append(nf.headline())
    if not disagreements and not summary.passed:   # the summary knows a reason this walk does not: keep its word
        disagreements.append("failed")
    return Verdict(command, list(dict.fromkeys(disagreements)),
                   Compared(len(outputs), tensors, summary.iterations, len(compared_iters), comparisons, finite),
                   nonfinite, fingerprint, comparing=comparing)


def _finite_pairs(r) -> int:
    """How many element pairs of one comparison were both finite and checked (OutputResult.compared: compare_simple
    counts finite pairs, compare_indices the positions it checks)."""
    return int(getattr(r, "compared", 0) or 0)


def nonfinite_entry(r) -> dict | None:
    """{"tensor", "nonfinite", "reference_nonfinite", "counts"} for a comparison that saw NaN/Inf, else None."""
    counts = getattr(r, "nonfinite", None)
    if counts is None or not counts.any:
        return None
    return {"tensor": r.name, "nonfinite": counts.actual.total, "reference_nonfinite": counts.expected.total,
            "counts": counts.to_dict()}
