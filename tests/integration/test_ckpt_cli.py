"""`grouprl ckpt ls|verify|prune|export` on real checkpoints of the shipped tiny model,
written by the real Checkpointer to disk and to a loopback S3 server (moto)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import boto3
import pytest
import torch
from typer.testing import CliRunner

from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.resume import training_state
from grouprl.ckpt.state import TrainerState, rng_state
from grouprl.cli import app
from grouprl.config.ckpt import CheckpointConfig

STEPS = (1, 2, 3)
NAMESPACE = "cli"
WIDE = {"COLUMNS": "250"}  # rich folds table cells to the terminal width


def _hf_files(model, tokenizer) -> dict[str, bytes]:
    """What the trainer puts under hf/ (train/checkpointing.py small_files)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return {f"hf/{p.name}": p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}


def _write_checkpoints(model_dir: str, run_dir: Path, **cfg) -> dict[int, dict]:
    """Saves the tiny model after each of STEPS optimizer steps; returns step -> weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    files = _hf_files(model, AutoTokenizer.from_pretrained(model_dir))
    cfg = {"namespace": NAMESPACE, "disk": {"every": 1, "keep": len(STEPS)}} | cfg
    ckpt = Checkpointer(
        CheckpointConfig.model_validate(cfg),
        run_dir=run_dir,
        run_name="t",
        config_hash="0123456789abcdef",
    )
    weights = {}
    for step in STEPS:
        ids = torch.randint(0, model.config.vocab_size, (2, 16))
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        trainer = TrainerState(step, step, {}, {}, rng_state(), {})
        state = lambda: training_state(model=model, optimizer=optimizer)
        assert ckpt.save(step, state=state, trainer=trainer, files=files, final=True)
        ckpt.wait()  # one at a time: an S3 save due during an upload replaces a queued one
        weights[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ckpt.close()
    return weights


@pytest.fixture(scope="module")
def pristine(tiny_model_dir, tmp_path_factory) -> tuple[Path, dict[int, dict]]:
    run_dir = tmp_path_factory.mktemp("pristine") / "run"
    return run_dir, _write_checkpoints(tiny_model_dir, run_dir)


@pytest.fixture
def run(pristine, tmp_path) -> tuple[Path, dict[int, dict]]:
    """A fresh copy of the run with checkpoints at STEPS, for tests that change it."""
    src, weights = pristine
    shutil.copytree(src, tmp_path / "run")
    return tmp_path / "run", weights


def _cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], env=WIDE)


def _assert_same_weights(out: Path, expected: dict) -> None:
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert loaded.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(loaded[key], value), key


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_ls_lists_every_tier_spelling_from_manifests(run):
    run_dir, _ = run
    ckpts = run_dir / "checkpoints"
    (ckpts / ".tmp-step_000004").mkdir()  # a save in progress: ls must leave it alone
    (ckpts / "step_000005").mkdir()  # an interrupted save: no manifest, not listed
    for target in (run_dir, ckpts):
        result = _cli("ckpt", "ls", target)
        assert result.exit_code == 0, result.output
        assert f"3 checkpoints in {ckpts}" in result.output
        for step in STEPS:
            assert f"step_{step:06d}" in result.output
        assert "step_000005" not in result.output
        assert "0123456789abcdef" in result.output and "MiB" in result.output
    assert (ckpts / ".tmp-step_000004").is_dir()
    one = _cli("ckpt", "ls", ckpts / "step_000002")
    assert one.exit_code == 0 and "step_000002" in one.output and "step_000003" not in one.output


def test_verify_passes_then_reports_the_damaged_checkpoint(run):
    run_dir, _ = run
    ok = _cli("ckpt", "verify", run_dir)
    assert ok.exit_code == 0, ok.output
    assert ok.output.count("ok      step") == len(STEPS)

    shard = next((run_dir / "checkpoints/step_000002/shards").glob("*.distcp"))
    _flip_byte(shard)
    bad = _cli("ckpt", "verify", run_dir)
    assert bad.exit_code == 1
    assert "DAMAGED step 2" in bad.output and "does not match its checksum" in bad.output
    assert "ok      step 1" in bad.output and "ok      step 3" in bad.output
    assert _cli("ckpt", "verify", run_dir, "--step", "3").exit_code == 0


def test_prune_keeps_the_newest(run):
    run_dir, _ = run
    result = _cli("ckpt", "prune", run_dir, "--keep", "1")
    assert result.exit_code == 0, result.output
    assert "removed step 1" in result.output and "removed step 2" in result.output
    assert [p.name for p in (run_dir / "checkpoints").glob("step_*")] == ["step_000003"]
    again = _cli("ckpt", "prune", run_dir, "--keep", "1")
    assert again.exit_code == 0 and "nothing to remove" in again.output


def test_export_writes_a_loadable_model_with_the_checkpoint_weights(pristine, tmp_path):
    run_dir, weights = pristine
    result = _cli("ckpt", "export", run_dir, tmp_path / "at2", "--step", "2")
    assert result.exit_code == 0, result.output
    _assert_same_weights(tmp_path / "at2", weights[2])
    old_command = _cli("export", run_dir, tmp_path / "newest")  # `grouprl export RUN OUT`
    assert old_command.exit_code == 0, old_command.output
    assert "step 3" in old_command.output
    _assert_same_weights(tmp_path / "newest", weights[3])


def test_exported_files_get_the_mode_of_a_new_file(pristine, tmp_path):
    # save_pretrained writes model.safetensors 0600; the export gives it what the umask
    # gives any new file (0644 under 022), like the config and tokenizer files
    run_dir, _ = pristine
    (tmp_path / "probe").touch()
    expected = (tmp_path / "probe").stat().st_mode & 0o777
    result = _cli("export", run_dir, tmp_path / "out")
    assert result.exit_code == 0, result.output
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()}
    assert "model.safetensors" in modes and "config.json" in modes
    assert modes == dict.fromkeys(modes, expected), modes


def test_user_errors_name_the_argument_and_exit_2(pristine, tmp_path):
    run_dir, _ = pristine
    missing = _cli("ckpt", "ls", tmp_path / "nope")
    assert missing.exit_code == 2 and "TARGET=" in missing.output and "Allowed:" in missing.output
    unknown = _cli("ckpt", "export", run_dir, tmp_path / "out", "--step", "99")
    assert unknown.exit_code == 2
    assert "--step=99" in unknown.output and "Allowed: 1, 2, 3" in unknown.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    full = _cli("ckpt", "export", run_dir, tmp_path / "full")
    assert full.exit_code == 2 and "OUT=" in full.output
    runs = _cli("ckpt", "ls", run_dir.parent)  # a directory of runs
    assert runs.exit_code == 2 and f"Did you mean {run_dir}?" in runs.output
    keep0 = _cli("ckpt", "prune", run_dir, "--keep", "0")
    assert keep0.exit_code == 2 and "--keep=0" in keep0.output
    for out in (missing, unknown, full, keep0):
        assert "Traceback" not in out.output


@pytest.mark.s3
def test_s3_ls_verify_export_prune(s3_server, aws_env, tiny_model_dir, tmp_path):
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    admin = boto3.client("s3", endpoint_url=s3_server.endpoint_url)
    admin.create_bucket(Bucket=bucket)
    s3 = {"uri": f"s3://{bucket}/prefix", "endpoint_url": s3_server.endpoint_url, "every": 1}
    weights = _write_checkpoints(tiny_model_dir, tmp_path / "run", s3=s3 | {"keep": 3})
    tier = f"s3://{bucket}/prefix/{NAMESPACE}"
    url = ("--endpoint-url", s3_server.endpoint_url)

    ls = _cli("ckpt", "ls", tier, *url)
    assert ls.exit_code == 0, ls.output
    assert f"in {tier}" in ls.output
    assert all(f"step_{step:06d}" in ls.output for step in STEPS)

    up = _cli("ckpt", "ls", f"s3://{bucket}/prefix", *url)  # the prefix of namespaces
    assert up.exit_code == 2 and f"Did you mean {tier}?" in up.output

    verify = _cli("ckpt", "verify", tier, *url)
    assert verify.exit_code == 0 and verify.output.count("ok      step") == len(STEPS)
    shard = next(
        o["Key"]
        for o in admin.list_objects_v2(Bucket=bucket, Prefix=f"prefix/{NAMESPACE}/step_000001/")[
            "Contents"
        ]
        if o["Key"].endswith(".distcp")
    )
    body = bytearray(admin.get_object(Bucket=bucket, Key=shard)["Body"].read())
    body[0] ^= 0xFF
    admin.put_object(Bucket=bucket, Key=shard, Body=bytes(body))
    damaged = _cli("ckpt", "verify", tier, *url)
    assert damaged.exit_code == 1 and f"DAMAGED step 1  checkpoint {tier}/step_000001" in (
        damaged.output
    )

    export = _cli("ckpt", "export", f"{tier}/step_000002", tmp_path / "out", *url)
    assert export.exit_code == 0, export.output
    _assert_same_weights(tmp_path / "out", weights[2])

    prune = _cli("ckpt", "prune", tier, "--keep", "1", *url)
    assert prune.exit_code == 0, prune.output
    after = _cli("ckpt", "ls", tier, *url)
    assert "step_000003" in after.output and "step_000002" not in after.output
    missing = _cli("ckpt", "verify", f"{tier}/step_000002", *url)
    assert missing.exit_code == 2 and "TARGET=" in missing.output
    no_bucket = _cli("ckpt", "ls", f"s3://{bucket}-gone/prefix", *url)
    assert no_bucket.exit_code == 2 and "NoSuchBucket" in no_bucket.output
    assert f"TARGET='s3://{bucket}-gone/prefix'" in no_bucket.output
