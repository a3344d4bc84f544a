"""Resuming: a finished run is left as it is (decided from the manifests before anything
loads), and a resume under another config names each key that changed."""

from __future__ import annotations

import json

import pytest
import yaml

from cli_probe import run_cli
from grouprl.ckpt.manifest import write_manifest
from grouprl.config.loader import load_config
from grouprl.config.redact import redacted_dict, save_resolved
from grouprl.driver.checkpointing import changed_keys, config_hash, finished_run


def _cfg(run_dir, *overrides):
    return load_config(
        "tiny-arith", [f"trainer.run_dir={run_dir}", "trainer.resume=auto", *overrides]
    )


def _finished_run(run_dir, *, steps: int) -> dict[str, bytes]:
    """What `grouprl train` leaves after its last step: the final checkpoint on disk (its
    manifest and config; no shards are read here), summary, curves. Returns the files."""
    cfg = _cfg(run_dir, f"train.steps={steps}")
    ckpt = run_dir / "checkpoints" / f"step_{steps:06d}"
    ckpt.mkdir(parents=True)
    (ckpt / "config.yaml").write_text(yaml.safe_dump(redacted_dict(cfg), sort_keys=False))
    write_manifest(
        ckpt, step=steps, weight_version=steps, world_size=1, config_hash=config_hash(cfg)
    )
    save_resolved(cfg, run_dir / "config.yaml")
    summary = {"run_dir": str(run_dir), "step": steps, "total_steps": steps, "finished": True}
    summary |= {"held_out_accuracy_before": 0.25, "held_out_accuracy_after": 0.5}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "held_out.txt").write_text("held-out accuracy: 0.25 -> 0.50\n")
    (run_dir / "metrics.jsonl").write_text('{"step": 2, "eval/accuracy": 0.5}\n')
    return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}


@pytest.mark.procs
def test_resuming_a_finished_run_says_so_and_touches_nothing(tmp_path):
    run_dir = tmp_path / "run"
    before = _finished_run(run_dir, steps=2)
    argv = ["grouprl", "train", "tiny-arith", f"trainer.run_dir={run_dir}", "train.steps=2"]
    [outcome], _ = run_cli([[*argv, "trainer.resume=auto"]])
    assert outcome.code == "0", outcome.stderr
    text = " ".join(outcome.stderr.split())
    assert "already finished" in text and "step 2 of train.steps=2" in text
    assert "raise train.steps" in text
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert after == before  # summary.json, held_out.txt, config.yaml, metrics untouched
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([*before, "checkpoints"])


def test_a_run_with_steps_left_or_not_resuming_is_not_finished(tmp_path):
    run_dir = tmp_path / "run"
    _finished_run(run_dir, steps=2)
    done = finished_run(_cfg(run_dir, "train.steps=2"), run_dir)
    assert done is not None and done.summary["held_out_accuracy_after"] == 0.5
    assert finished_run(_cfg(run_dir, "train.steps=4"), run_dir) is None  # extended
    never = _cfg(run_dir, "train.steps=2", "trainer.resume=never")
    assert finished_run(never, run_dir) is None
    assert finished_run(_cfg(tmp_path / "new", "train.steps=2"), tmp_path / "new") is None


def test_a_resume_under_another_config_names_each_changed_key(tmp_path):
    run_dir = tmp_path / "run"
    _finished_run(run_dir, steps=2)
    saved = run_dir / "checkpoints" / "step_000002" / "config.yaml"
    # trainer, checkpoint and metrics may change without changing the run
    extended = _cfg(run_dir, "train.steps=4", "algo.beta=0.04", "trainer.eval_every=1")
    assert changed_keys(saved, extended) == "algo.beta: 0.0 -> 0.04, train.steps: 2 -> 4"
    assert changed_keys(saved, _cfg(run_dir, "train.steps=2")) == "no key differs"
