"""Write docs/config.md, the configuration reference, from the schema.

    python scripts/config_reference.py          # rewrite docs/config.md
    python scripts/config_reference.py --check  # exit 1 if the doc and the schema differ

The text comes from ``grouprl.config.reference`` (every key's type, default and field
docstring); ``tests/unit/test_config_reference.py`` checks that the file is current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grouprl.config.reference import DOC_PATH, SCRIPT, reference_markdown

DOC = Path(__file__).resolve().parents[1] / DOC_PATH


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    args = parser.parse_args()
    text = reference_markdown()
    if args.check:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"{DOC} is stale: run python {SCRIPT}", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
