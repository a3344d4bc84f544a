"""What pins the synchronous loop: the per-step metrics and a checksum of the trained
weights of a run, for tests/integration/test_train_run.py's
``test_the_synchronous_loop_trains_as_before_the_stream``.

Run as a script, it trains that file's straight run (its ``_cfg``, 4 steps of the tiny
model on the hf engine; without ``metrics.report``, which older code lacks) with
whatever grouprl is on the path and prints the fingerprint, so the expected numbers can
be recorded from an older commit's code::

    git worktree add /tmp/old 0b09adf
    PYTHONPATH=/tmp/old/src .venv/bin/python tests/sync_loop_fingerprint.py

Heavy imports are inside functions: the reward workers, started with spawn, import this
script again.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

# Every metric that depends on the sampled tokens or the update, by step: the rewards,
# the loss, its gradient and the clip (the update), the policy's entropy on the samples.
KEYS = ("reward/mean", "eval/accuracy", "policy_loss", "grad_norm", "entropy", "clip_frac")


def fingerprint(run_dir: Path) -> dict:
    """``{key: {step: value}}`` for ``KEYS`` from ``metrics.jsonl``, plus the final
    checkpoint's policy weights as ``weights_sha256`` (of each parameter's name and its
    float32 bytes, in name order) and ``weights_abs_sum`` (a readable figure of the same)."""
    from grouprl.ckpt.export import find_checkpoint, part_state

    out: dict = {key: {} for key in KEYS}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key in KEYS:
            if key in record:
                out[key][record["step"]] = record[key]
    state = part_state(find_checkpoint(run_dir), "model")
    digest = hashlib.sha256()
    abs_sum = 0.0
    for name in sorted(state):
        values = state[name].float().contiguous()
        digest.update(name.encode())
        digest.update(values.numpy().tobytes())
        abs_sum += float(values.double().abs().sum())
    out["weights_sha256"] = digest.hexdigest()
    out["weights_abs_sum"] = abs_sum
    return out


def main() -> None:
    tests = Path(__file__).resolve().parent
    sys.path.insert(0, str(tests / "integration"))
    from test_train_run import _cfg

    import grouprl
    from grouprl.driver.run import train

    model = tests.parent / "src/grouprl/assets/tiny-arith"
    print(f"grouprl from {Path(grouprl.__file__).parent}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        train(_cfg(Path(tmp), "straight", model))
        print(json.dumps(fingerprint(Path(tmp) / "straight"), indent=1))


if __name__ == "__main__":
    main()
