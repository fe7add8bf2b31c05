"""The tactic options' one command-line quirk: `--tactic-sources -NAME` (the options themselves are declared in
debugkit/options.py with the rest of the build group)."""
from __future__ import annotations


def join_signed_sources(argv: list) -> list:
    """`--tactic-sources -NAME,...` as `--tactic-sources=-NAME,...`: argparse would read -NAME as an option."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--tactic-sources" and i + 1 < len(argv) and argv[i + 1][:1] == "-" \
                and argv[i + 1][:2] != "--":
            out.append(f"--tactic-sources={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out
