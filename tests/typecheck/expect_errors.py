"""Runs basedpyright over the files of this folder and checks that it rejects what they
expect it to: each ``# expect-error: TEXT`` comment needs an error whose message
contains TEXT on the next line, and no other line may have an error. Exit 1 otherwise.

    .venv/bin/python tests/typecheck/expect_errors.py      (what `make typecheck` runs)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXPECT = re.compile(r"^\s*#\s*expect-error:\s*(.+?)\s*$")


def expectations(path: Path) -> dict[int, str]:
    """{1-based line: expected text} for the line below each ``# expect-error:``."""
    lines = path.read_text().splitlines()
    found = {}
    for i, line in enumerate(lines):
        if match := EXPECT.match(line):
            found[i + 2] = match.group(1)
    return found


def diagnostics(files: list[Path]) -> list[dict]:
    checker = Path(sys.executable).parent / "basedpyright"
    cmd = [str(checker), "--outputjson", "--pythonpath", sys.executable, *map(str, files)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if not out.stdout.strip():
        sys.exit(f"basedpyright printed nothing (exit {out.returncode}): {out.stderr}")
    return [d for d in json.loads(out.stdout)["generalDiagnostics"] if d["severity"] == "error"]


def main() -> int:
    files = sorted(p for p in HERE.glob("*.py") if p.name != Path(__file__).name)
    errors = diagnostics(files)
    problems: list[str] = []
    for path in files:
        mine = [d for d in errors if Path(d["file"]).resolve() == path]
        by_line: dict[int, list[str]] = {}
        for d in mine:
            by_line.setdefault(d["range"]["start"]["line"] + 1, []).append(d["message"])
        wanted = expectations(path)
        before = len(problems)
        for line, text in wanted.items():
            if not any(text in message for message in by_line.get(line, [])):
                problems.append(f"{path.name}:{line}: expected an error containing {text!r}")
        for line, messages in by_line.items():
            if line not in wanted:
                problems += [f"{path.name}:{line}: unexpected error: {m}" for m in messages]
        verdict = "all reported" if len(problems) == before else "NOT as expected"
        print(f"{path.relative_to(ROOT)}: {len(wanted)} expected errors, {verdict}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
