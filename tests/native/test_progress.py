"""native.progress: a bar on a terminal, silence on a pipe or after set_quiet(True)."""
import io
import sys

import pytest

from native import progress as P


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def stderr_tty(monkeypatch):
    """A terminal-like stderr; set inside the test (pytest's capture replaces sys.stderr after fixture setup)."""
    stream = _Tty()

    def install():
        monkeypatch.setattr(sys, "stderr", stream)
        return stream
    yield install
    P.set_quiet(False)


def test_silent_when_not_a_tty(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    items = list(P.progress(range(5), desc="timing"))
    assert items == [0, 1, 2, 3, 4]
    with P.progress(total=3, desc="x") as bar:
        bar.update(2)
        bar.set_postfix_str("conv1")
        assert bar.n == 2 and bar.total == 3
    assert stream.getvalue() == ""


def test_bar_on_a_tty(stderr_tty):
    stderr_tty = stderr_tty()
    assert list(P.progress([1, 2, 3], desc="timing layers", unit="layer")) == [1, 2, 3]
    out = stderr_tty.getvalue()
    assert "timing layers" in out and "/3" in out


def test_quiet_silences_and_is_reversible(stderr_tty):
    stderr_tty = stderr_tty()
    P.set_quiet(True)
    with P.progress(total=4, desc="calibrating") as bar:
        bar.update(4)
    assert stderr_tty.getvalue() == ""
    P.set_quiet(False)
    with P.progress(total=4, desc="calibrating") as bar:
        bar.update(4)
        bar.set_postfix_str("batch 4")
    assert "calibrating" in stderr_tty.getvalue()


def test_a_search_bar_draws_its_final_count_before_it_goes(monkeypatch):
    """tqdm throttles redraws: steps that come within its minimum interval are not drawn. The search bar draws its
    final count once when it closes (then clears itself), so the last frame on the terminal is the whole search,
    not an early count (the terminal test of debug precision read `3/27` as the last frame of a quick search)."""
    import io
    import re

    from native import progress as P

    class Tty(io.StringIO):
        def isatty(self):
            return True
    err = Tty()
    monkeypatch.setattr(P.sys, "stderr", err)
    bar = P.SearchBar("search", 30)
    bar.bar.mininterval = 3600.0     # nothing after the first frame is drawn by the steps themselves
    for _ in range(20):
        bar.step()
    bar.close()
    counts = [int(n) for n in re.findall(r"(\d+)/30", err.getvalue())]
    assert counts and counts[-1] == 20
