"""Print the Polygraphy flag table of docs/migrating-from-polygraphy.md (debugkit/cli/polygraphy_flags.py against
Polygraphy 0.53.6's list of flags, tests/debugkit/data/polygraphy/flags-0.53.6.json).

    python tools/polygraphy_flags_table.py > table.md
"""
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from debugkit.cli.main import build_parser  # noqa: E402
from debugkit.cli.polygraphy_flags import markdown  # noqa: E402

if __name__ == "__main__":
    with open(os.path.join(REPO, "tests", "debugkit", "data", "polygraphy", "flags-0.53.6.json")) as f:
        sys.stdout.write(markdown(json.load(f)["commands"], build_parser()) + "\n")
