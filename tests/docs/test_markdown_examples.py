"""Every shell and Python example in README.md and docs/*.md runs as a test (one test per example block).

The convention, for everyone who writes docs:

* A fenced block labelled ``bash``, ``sh``, ``shell``, ``console`` or ``python`` is an example and runs. Blocks
  labelled ``text`` or ``json``, or not labelled at all, are not examples: synopses (``debugkit run MODEL
  [--flag]``), sample output, file formats. An unlabelled block that looks like commands (``$ `` prompts, or only
  ``debugkit``/``python`` lines without synopsis notation such as ``[--opt]``, ``A|B``, ``...``, ``MODEL``) fails
  this test: label it ``bash`` or ``console``, so an example cannot go untested by accident.
* ``bash``/``sh``/``shell``: every line that is not blank or a comment is a command (a trailing ``\\`` continues
  it). ``console``: only ``$ `` lines are commands; the other lines are sample output and are not checked, except
  that ``$ echo $?`` followed by a number sets the exit code the command before it must have.
* Every command must exit 0 (and print no traceback), unless a marker says otherwise. ``python`` blocks run as one
  script and must exit 0.
* Markers are comment lines inside the block (visible to readers, so keep the reason readable):

  - ``# doctest: skip REASON``: not run; the test is reported as skipped with REASON (never silently).
  - ``# doctest: needs NAME [NAME ...]``: corpus models by their name in tests/corpus/models.json (``bert_mini``,
    ``yolov8n``, ...); each is placed in the scratch directory as ``NAME.onnx`` (``NAME=FILE`` names the file:
    ``tv-ssdlite320_mobilenet_v3_large=ssdlite.onnx``), found through tests/corpus/corpus.py; when one cannot be
    had, the test skips with the corpus' reason.
  - ``# doctest: exit N``: the next command must exit with N (e.g. a comparison that is meant to fail: 1).

* Each block runs in its own scratch directory holding the stand-in models of tests/docs/stand_ins.py
  (``model.onnx``: a small CNN with input ``x`` [N,3,224,224], output ``logits`` and torchvision-style tensor names
  such as ``/layer2/Relu_output_0``; ``bad.onnx``: check lint's demo of a broken model), a copy of ``examples/``,
  and ``tools`` (the repository's). Add a stand-in there when a doc needs another name. Files written by
  one command are there for the next command of the same block, not for other blocks.
* ``debugkit`` means this checkout's CLI (plain ``debugkit ...`` commands run in-process through
  ``debugkit.cli.main.main``, the function the console script calls; commands with shell syntax run in bash with
  ``debugkit`` and ``python`` bound to this interpreter). ``pip install ...`` steps are not run: the suite runs
  where debugkit is installed already.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_LANGS = {"bash", "sh", "shell", "console", "python"}
MARKER = re.compile(r"^\s*(?:\$\s*)?#\s*doctest:\s*(\w+)\s*(.*?)\s*$")
SHELL_SYNTAX = re.compile(r"[|&;<>$`]|\(|\)")
COMMAND_TIMEOUT = 600


@dataclass
class Command:
    text: str
    line: int
    expect: int = 0


@dataclass
class Block:
    path: str          # relative to the repository
    line: int          # line of the opening fence
    lang: str
    body: list = field(default_factory=list)
    skip: str | None = None
    needs: list = field(default_factory=list)
    commands: list = field(default_factory=list)

    @property
    def id(self):
        return f"{self.path}:{self.line}"


def markdown_files() -> list[str]:
    docs = os.path.join(REPO, "docs")
    files = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(docs) if f.endswith(".md"))
    return [f for f in files if os.path.isfile(os.path.join(REPO, f))]


def fenced_blocks(text: str, path: str = "<doc>") -> list[Block]:
    """Every fenced block (``` or ~~~) with its language label and body lines."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = re.match(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), i
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        blocks.append(Block(path, start + 1, lang, body))
        i += 1
    return blocks


def parse(block: Block) -> Block:
    """Markers and commands of an example block (see the module docstring)."""
    pending_exit = None
    lines = block.body
    console = block.lang == "console"
    i = 0
    while i < len(lines):
        raw, lineno = lines[i], block.line + 1 + i
        i += 1
        m = MARKER.match(raw)
        if m:
            kind, arg = m.group(1), m.group(2)
            if kind == "skip":
                block.skip = arg or "no reason given"
            elif kind == "needs":
                block.needs += arg.replace(",", " ").split()
            elif kind == "exit":
                pending_exit = int(arg)
            else:
                raise ValueError(f"{block.path}:{lineno}: unknown doctest marker '{kind}' (skip, needs, exit)")
            continue
        if block.lang == "python":
            continue
        s = raw.strip()
        if console:
            if not s.startswith("$ "):
                continue
            s = s[2:].strip()
        if not s or s.startswith("#"):
            continue
        while s.endswith("\\") and i < len(lines):    # continuation lines
            s = s[:-1].rstrip() + " " + lines[i].strip()
            i += 1
        if console and s == "echo $?":
            if block.commands and i < len(lines) and lines[i].strip().isdigit():
                block.commands[-1].expect = int(lines[i].strip())
            continue
        block.commands.append(Command(s, lineno, pending_exit if pending_exit is not None else 0))
        pending_exit = None
    return block


def example_blocks() -> list[Block]:
    out = []
    for f in markdown_files():
        with open(os.path.join(REPO, f), encoding="utf-8") as fh:
            out += [parse(b) for b in fenced_blocks(fh.read(), f) if b.lang in RUN_LANGS]
    return out


# running ---------------------------------------------------------------------------------------------------------
def _scratch(tmp_path, block: Block) -> str:
    from tests.docs.stand_ins import write_stand_ins
    d = str(tmp_path)
    write_stand_ins(d)
    shutil.copytree(os.path.join(REPO, "examples"), os.path.join(d, "examples"))
    os.symlink(os.path.join(REPO, "tools"), os.path.join(d, "tools"))
    if block.needs:
        from tests.corpus import corpus
        names = {m["name"] for m in corpus.manifest()}
        for need in block.needs:
            name, _, filename = need.partition("=")
            if name not in names:
                pytest.fail(f"{block.id}: '# doctest: needs {name}': no such model in tests/corpus/models.json "
                            f"(it has {sorted(names)})")
            try:
                path = corpus.find_path(corpus.entry(name))
            except corpus.CorpusUnavailable as e:
                pytest.skip(f"{block.id} needs corpus model {name}: {e}")
            os.symlink(path, os.path.join(d, filename or f"{name}.onnx"))
    return d


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("NO_COLOR", "1")
    return env


def _drop_pip(command: str) -> str:
    """`pip install -e . && python x.py` -> `python x.py` (the suite runs where debugkit is installed)."""
    parts = [p.strip() for p in command.split("&&")]
    return " && ".join(p for p in parts if not re.match(r"^(python3? -m )?pip3? install\b", p))


def _run_in_process(argv, cwd) -> tuple[int, str]:
    from debugkit.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    old, old_path = os.getcwd(), os.environ.get("PATH", "")
    os.chdir(cwd)
    # a `python` that a command runs (a --check command) is the suite's interpreter, as in the activated venv the
    # docs assume; the first `python` on PATH may be another one, without onnxruntime
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + old_path
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:   # argparse errors and --help
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        os.chdir(old)
        os.environ["PATH"] = old_path
    return int(code or 0), out.getvalue() + err.getvalue()


def _run_in_bash(command, cwd) -> tuple[int, str]:
    py = shlex.quote(sys.executable)
    script = (f"debugkit() {{ {py} -m debugkit \"$@\"; }}\npython() {{ {py} \"$@\"; }}\n"
              f"python3() {{ {py} \"$@\"; }}\n{command}\n")
    p = subprocess.run(["bash", "-c", script], cwd=cwd, env=_env(), capture_output=True, text=True,
                       timeout=COMMAND_TIMEOUT)
    return p.returncode, p.stdout + p.stderr


def run_command(command: str, cwd: str) -> tuple[int, str]:
    command = _drop_pip(command)
    if not command:
        return 0, ""
    code_part = command.split(" #")[0]
    parts = [p.strip() for p in code_part.split("&&")]
    if len(parts) > 1 and not any(SHELL_SYNTAX.search(p.replace("&&", "")) for p in parts):
        outputs = []
        for p in parts:          # a && b: b only when a succeeded, as the shell does
            code, out = run_command(p, cwd)
            outputs.append(out)
            if code:
                break
        return code, "".join(outputs)
    words = shlex.split(command, comments=True)
    if not SHELL_SYNTAX.search(code_part) and words and words[0] == "debugkit":
        return _run_in_process(words[1:], cwd)
    return _run_in_bash(command, cwd)


def _check(block, cmd_text, line, code, expect, output):
    where = f"{block.path}:{line}: `{cmd_text}`"
    assert "Traceback (most recent call last)" not in output and "internal error in" not in output, \
        f"{where} crashed:\n{output[-3000:]}"
    assert code == expect, f"{where} exited {code}, the doc expects {expect}:\n{output[-3000:]}"


BLOCKS = example_blocks()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_markdown_example(block: Block, tmp_path):
    if block.skip:
        pytest.skip(f"{block.id}: {block.skip}")
    cwd = _scratch(tmp_path, block)
    if block.lang == "python":
        script = os.path.join(cwd, "example.py")
        with open(script, "w") as f:
            f.write("\n".join(block.body) + "\n")
        p = subprocess.run([sys.executable, script], cwd=cwd, env=_env(), capture_output=True, text=True,
                           timeout=COMMAND_TIMEOUT)
        _check(block, "python block", block.line, p.returncode, 0, p.stdout + p.stderr)
        return
    assert block.commands, f"{block.id}: a {block.lang} block without a command"
    for cmd in block.commands:
        code, output = run_command(cmd.text, cwd)
        _check(block, cmd.text, cmd.line, code, cmd.expect, output)


def looks_like_commands(body) -> bool:
    """An unlabelled block that is a shell example, not a synopsis: `$ ` prompts, or only debugkit/python command
    lines (and comments, continuations) without synopsis notation (`[--opt]`, `A|B`, `...`, UPPER-CASE MODEL)."""
    lines = [l.strip() for l in body if l.strip()]
    if any(l.startswith("$ ") for l in lines):
        return True
    starts = ("debugkit ", "python ", "python3 ", "#")
    continued = False
    for l in lines:
        if not (continued or l.startswith(starts)):
            return False
        continued = l.endswith("\\")
    text = " ".join(lines)
    return bool(lines) and not re.search(r"\[-|\||\.\.\.|\bMODEL\b|\bFILE\b", text)


def test_every_shell_example_is_labelled():
    """An unlabelled block of commands or `$ ` prompts is a shell example that would go untested."""
    bad = []
    for f in markdown_files():
        with open(os.path.join(REPO, f), encoding="utf-8") as fh:
            bad += [b.id for b in fenced_blocks(fh.read(), f) if b.lang in ("", "text") and looks_like_commands(b.body)]
    assert not bad, f"label these blocks ```bash (or ```console for transcripts) so their commands run: {bad}"


def test_the_label_guard():
    assert looks_like_commands(["$ debugkit run m.onnx", "PASSED"])
    assert looks_like_commands(["debugkit run bert_mini.onnx --engine \\", "    --onnxrt", "# PASSED"])
    assert not looks_like_commands(["debugkit run MODEL [--engine] [--onnxrt]"])
    assert not looks_like_commands(["[I] Folding constants", "[I] Total nodes"])


def test_the_convention_is_applied():
    """The extraction itself: markers, console prompts, continuations, `echo $?`."""
    doc = "\n".join([
        "```console", "$ # doctest: needs bert_mini", "$ debugkit run bert_mini.onnx --engine \\", "    --onnxrt",
        "PASSED | 1/1", "$ debugkit check lint bad.onnx", "[E] ...", "$ echo $?", "1", "```",
        "```bash", "# doctest: exit 1", "debugkit run a.onnx --engine   # a comment", "", "echo hi", "```",
        "```text", "$ not run", "```",
        "```python", "# doctest: skip needs a GPU", "print(1)", "```"])
    blocks = [parse(b) for b in fenced_blocks(doc) if b.lang in RUN_LANGS]
    assert [b.lang for b in blocks] == ["console", "bash", "python"]
    c, sh, py = blocks
    assert c.needs == ["bert_mini"]
    assert [(x.text, x.expect) for x in c.commands] == [("debugkit run bert_mini.onnx --engine --onnxrt", 0),
                                                        ("debugkit check lint bad.onnx", 1)]
    assert [(x.text, x.expect) for x in sh.commands] == [("debugkit run a.onnx --engine   # a comment", 1),
                                                         ("echo hi", 0)]
    assert py.skip == "needs a GPU"
    assert _drop_pip("pip install -e . && python examples/x.py") == "python examples/x.py"
