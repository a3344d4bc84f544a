"""Write docs/migration.md's verl and TRL tables, and the table of keys grouprl renamed,
from ``grouprl.config.aliases``.

    python scripts/migration_tables.py          # rewrite the tables in place
    python scripts/migration_tables.py --check  # exit 1 if the doc and the table differ

Each table sits between ``<!-- aliases:FRAMEWORK -->`` and ``<!-- /aliases:FRAMEWORK -->``;
``tests/unit/test_config.py`` checks that the doc holds exactly the table's rows.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from grouprl.config.aliases import markdown_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "migration.md"
FRAMEWORKS = ("verl", "TRL", "grouprl")


def rendered(text: str) -> str:
    """``text`` with each framework's table replaced by the one the alias table makes."""
    for framework in FRAMEWORKS:
        start, end = f"<!-- aliases:{framework} -->", f"<!-- /aliases:{framework} -->"
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
        found = pattern.search(text)
        if found is None:
            raise SystemExit(f"{DOC}: no {start} ... {end} block")
        block = f"{start}\n{markdown_table(framework)}{end}"
        text = text[: found.start()] + block + text[found.end() :]
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    args = parser.parse_args()
    text = DOC.read_text()
    new = rendered(text)
    if args.check:
        if new != text:
            print(f"{DOC} is stale: run python scripts/migration_tables.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
