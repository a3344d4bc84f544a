"""A 3-step run of every packaged CPU recipe (those whose model is ``builtin:``), and
what it trained: every per-step metric that depends on the sampled tokens or the update
(times, rates and memory left out) and a checksum of the final policy weights.

    .venv/bin/python scripts/recipe_fingerprints.py [--steps 3] [--only tiny-arith] --out a.json
    .venv/bin/python scripts/recipe_fingerprints.py --compare a.json b.json

A refactor that claims "behaviour unchanged" runs it before and after (the older commit's
code with ``PYTHONPATH=/tmp/old/src``) and compares: the runs must agree bit for bit.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Keys that vary with the machine's load, not with what was sampled or trained.
UNTIMED = ("time", "per_s", "_s", "mem", "mfu", "throughput", "wait", "lag", "gib", "bytes")


def _timed(key: str) -> bool:
    return any(part in key.lower() for part in UNTIMED)


def cpu_recipes() -> list[str]:
    import yaml

    names = []
    for path in sorted((ROOT / "src/grouprl/recipes").glob("*.yaml")):
        text = yaml.safe_load(path.read_text())
        parent = text.get("extends")
        model = (text.get("model") or {}).get("path", "")
        if str(model).startswith("builtin:") or (parent and parent.startswith("tiny-")):
            names.append(path.stem)
    return names


def fingerprint(run_dir: Path) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from sync_loop_fingerprint import fingerprint as weights_and_keys

    out = weights_and_keys(run_dir)
    metrics: dict[str, dict[int, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, value in record.items():
            if isinstance(value, int | float) and key != "step" and not _timed(key):
                metrics.setdefault(key, {})[record["step"]] = value
    return {
        "metrics": metrics,
        "weights_sha256": out["weights_sha256"],
        "weights_abs_sum": out["weights_abs_sum"],
    }


def run(names: list[str], steps: int) -> dict:
    from grouprl.api import load_config
    from grouprl.driver.run import train

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            run_dir = Path(tmp) / name
            cfg = load_config(
                name,
                [f"train.steps={steps}", "metrics.progress=false", f"trainer.run_dir={run_dir}"],
            )
            train(cfg)
            results[name] = fingerprint(run_dir)
            print(f"{name}: {results[name]['weights_sha256'][:16]}", file=sys.stderr, flush=True)
    return results


def compare(a: dict, b: dict) -> int:
    bad = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name}: only in {'first' if name in a else 'second'}")
            bad += 1
            continue
        diffs = [
            key
            for key in sorted(set(a[name]["metrics"]) | set(b[name]["metrics"]))
            if not _timed(key) and a[name]["metrics"].get(key) != b[name]["metrics"].get(key)
        ]
        same_weights = a[name]["weights_sha256"] == b[name]["weights_sha256"]
        n = len(a[name]["metrics"])
        verdict = "same" if same_weights and not diffs else "DIFFERENT"
        print(f"{name}: {verdict} ({n} metrics, weights {a[name]['weights_sha256'][:12]})")
        for key in diffs:
            print(f"  {key}: {a[name]['metrics'].get(key)} vs {b[name]['metrics'].get(key)}")
        bad += verdict != "same"
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="recipe names (default: every CPU recipe)")
    parser.add_argument("--out", help="where the JSON goes (the runs print to stdout)")
    parser.add_argument("--compare", nargs=2, metavar="JSON")
    args = parser.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        sys.exit(1 if compare(a, b) else 0)
    text = json.dumps(run(args.only or cpu_recipes(), args.steps), indent=1)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
