"""`grouprl train` end to end on the tiny model with the transformers engine:
resume equivalence, export, eval, and what a run directory holds."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from grouprl.ckpt.export import export_checkpoint, find_checkpoint, part_state
from grouprl.config.loader import load_config
from grouprl.driver.evaluate import evaluate_cli
from grouprl.driver.run import train

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sync_loop_fingerprint import fingerprint


def _cfg(tmp_path, name, tiny_model_dir, *extra):
    return load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            "rollout.engine=hf",
            "rollout.n=4",
            "rollout.max_tokens=40",
            "data.batch_size=4",
            "data.train.limit=64",  # of 20,000 (rendering them all: ~2 s a run)
            "data.eval.limit=8",
            "train.mini_batch_size=8",
            "train.micro_batch_size=4",
            "train.steps=4",
            "train.lr=1e-3",
            "trainer.eval_every=2",
            "metrics.progress=false",
            f"trainer.run_dir={tmp_path / name}",
            *extra,
        ],
    )


def _weights(run_dir, part="model"):
    ckpt = find_checkpoint(run_dir)
    return part_state(ckpt, part), ckpt


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("runs")
    summary = train(_cfg(tmp, "straight", tiny_model_dir, "metrics.report=true"))
    return tmp / "straight", summary


def test_run_directory_holds_metrics_samples_report_and_redacted_config(straight_run, tmp_path):
    run_dir, summary = straight_run
    assert summary["finished"] and summary["step"] == 4
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_steps = sorted({x["step"] for x in lines if "reward/mean" in x})
    assert train_steps == [1, 2, 3, 4]
    assert any("eval/accuracy" in x and x["step"] == 0 for x in lines)
    for key in ("kl", "clip_frac", "entropy", "tokens_per_s", "time/generate_s", "time/train_s"):
        if key == "kl":
            continue  # beta = 0: no reference, no KL
        assert any(key in x for x in lines), key
    hardware = (
        "memory/host_rss_gib",
        "memory/host_peak_rss_gib",
        "perf/generate_tokens_per_s",
        "perf/train_tokens_per_s",
        "perf/mfu",
        "time/update_s",
    )
    for x in (x for x in lines if "reward/mean" in x):  # what each step cost, every step
        assert all(x[key] > 0 and math.isfinite(x[key]) for key in hardware), x
        assert 0.05 < x["memory/host_rss_gib"] <= x["memory/host_peak_rss_gib"] < 64, x
    assert "What the steps cost" in (run_dir / "report.html").read_text()
    assert (run_dir / "samples.jsonl").read_text().count("\n") >= 4
    assert (run_dir / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert list((run_dir / "tensorboard").glob("events.*"))
    assert "held_out_accuracy_before" in json.loads((run_dir / "summary.json").read_text())
    assert (run_dir / "config.yaml").is_file()


def test_training_changes_the_weights(straight_run, tiny_model_dir):
    run_dir, _ = straight_run
    trained, _ = _weights(run_dir)
    shipped = load_file(f"{tiny_model_dir}/model.safetensors")
    assert any(not torch.equal(trained[k], shipped[k]) for k in shipped)


def test_resumed_run_ends_with_the_same_parameters(straight_run, tmp_path, tiny_model_dir):
    run_dir, _ = straight_run
    stopped = train(_cfg(tmp_path, "resumed", tiny_model_dir, "trainer.stop_after=2"))
    assert stopped["step"] == 2 and not stopped["finished"]
    resumed = train(_cfg(tmp_path, "resumed", tiny_model_dir, "trainer.resume=auto"))
    assert resumed["step"] == 4 and resumed["finished"]
    a, _ = _weights(run_dir)
    b, _ = _weights(tmp_path / "resumed")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=k)
    # metrics.jsonl continues without duplicated steps after the resume
    steps = [
        json.loads(x)["step"] for x in (tmp_path / "resumed/metrics.jsonl").read_text().splitlines()
    ]
    train_lines = [s for s in steps if s > 0]
    assert sorted(set(train_lines)) == [1, 2, 3, 4]


def test_export_writes_a_model_transformers_loads(straight_run, tmp_path):
    run_dir, _ = straight_run
    out = export_checkpoint(find_checkpoint(run_dir), tmp_path / "exported")
    model = AutoModelForCausalLM.from_pretrained(out)
    trained, _ = _weights(run_dir)
    params = model.state_dict()
    assert params.keys() == trained.keys()
    for k, v in trained.items():
        torch.testing.assert_close(params[k], v, rtol=0, atol=0)


def test_eval_scores_a_run(straight_run, tiny_model_dir, capsys):
    run_dir, summary = straight_run
    cfg = load_config(str(run_dir / "config.yaml"), [])
    metrics = evaluate_cli(str(run_dir), cfg)
    assert metrics["eval/accuracy"] == pytest.approx(summary["held_out_accuracy_after"])
    assert "held-out accuracy" in capsys.readouterr().out
    assert (
        json.loads((run_dir / "eval.json").read_text())["eval/accuracy"] == metrics["eval/accuracy"]
    )


def test_a_raising_reward_function_is_counted_and_the_run_goes_on(
    tmp_path, tiny_model_dir, caplog, capsys
):
    rewards = tmp_path / "flaky.py"
    rewards.write_text(
        "def flaky(completion, **_):\n"
        "    if '1' in completion:\n"
        "        raise RuntimeError('no ones allowed')\n"
        "    return 0.5\n"
    )
    functions = f"reward.functions=[{{name: math_answer}}, {{name: '{rewards}:flaky'}}]"
    cfg = _cfg(tmp_path, "flaky", tiny_model_dir, functions, "train.steps=1", "data.eval=null")
    summary = train(cfg)
    assert summary["finished"]
    lines = [json.loads(x) for x in (tmp_path / "flaky/metrics.jsonl").read_text().splitlines()]
    errors = [x["reward/errors"] for x in lines if "reward/errors" in x]
    assert errors and errors[0] > 0
    assert "no ones allowed" in caplog.text and "sample" in caplog.text
    assert "validating the initial model" not in capsys.readouterr().out  # data.eval=null


def test_kl_to_a_frozen_reference_when_beta_is_positive(tmp_path, tiny_model_dir):
    """At rollout.temperature=0.7 (one run serves both checks): the policy and the
    reference both score at T, so KL starts at 0; and the trainer's logprobs are the
    engine's, log_softmax(logits / T) on both sides, so the gap is rounding and the
    importance weight pi_trainer / pi_engine is 1: the update is on-policy. Scoring raw
    logits (before issue 19) gave a gap of ~1e-2 and a weight of 1.003."""
    cfg = _cfg(
        tmp_path,
        "kl",
        tiny_model_dir,
        "algo.beta=0.04",
        "train.steps=2",
        "data.eval=null",
        "train.mini_batch_size=null",  # one update per step: step 1 sees the reference policy
        "rollout.temperature=0.7",
        "algo.tis_cap=10",
    )
    train(cfg)
    lines = [json.loads(x) for x in (tmp_path / "kl/metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if "kl" in x]
    assert len(steps) == 2
    assert steps[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # step 1: policy == reference
    assert steps[1]["kl"] > 0.0  # after one update the policy has moved away from the reference
    for x in steps:  # step 2: after a weight push
        assert x["engine_logprob_gap"] < 1e-4, x
        assert x["tis/weight"] == pytest.approx(1.0, abs=1e-4), x


PPO = [
    "algo.name=ppo",
    f"critic.path={'{model}'}",
    "critic.lr=1e-3",
    "critic.warmup_steps=1",
    "algo.beta=0.05",
    "algo.kl_in=reward",
    "algo.kl_estimator=k1",
    "algo.kl_target=0.001",
    "algo.kl_horizon=100",
    "algo.tis_cap=2",
    "data.eval=null",
]


def _ppo_cfg(tmp_path, name, tiny_model_dir, *extra):
    ppo = [x.replace("{model}", str(tiny_model_dir)) for x in PPO]
    return _cfg(tmp_path, name, tiny_model_dir, *ppo, *extra)


def test_ppo_with_critic_and_adaptive_kl_resumes_exactly(tmp_path, tiny_model_dir):
    """Critic weights and optimizer, and the adaptive KL coefficient, survive a resume:
    a run stopped after 2 steps and resumed ends where an uninterrupted one does."""
    train(_ppo_cfg(tmp_path, "straight", tiny_model_dir))
    train(_ppo_cfg(tmp_path, "resumed", tiny_model_dir, "trainer.stop_after=2"))
    train(_ppo_cfg(tmp_path, "resumed", tiny_model_dir, "trainer.resume=auto"))
    for part in ("model", "critic"):
        a, _ = _weights(tmp_path / "straight", part)
        b, _ = _weights(tmp_path / "resumed", part)
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=f"{part}: {k}")
    lines = [json.loads(x) for x in (tmp_path / "straight/metrics.jsonl").read_text().splitlines()]
    by_step = {x["step"]: x for x in lines}
    # critic warmup: step 1 trains only the critic; the policy starts at step 2
    assert "critic/loss" in by_step[1] and "policy_loss" not in by_step[1]
    assert "policy_loss" in by_step[2]
    # KL lives in the reward: measured before the update, zero at step 1 (policy ==
    # reference), then above the tiny target, so the controller raises the coefficient
    assert by_step[1]["kl"] == pytest.approx(0.0, abs=1e-6)
    coefs = [by_step[s]["kl_coef"] for s in (1, 2, 3, 4)]
    assert coefs[0] < 0.05 and coefs[-1] > coefs[1]
    resumed = [json.loads(x) for x in (tmp_path / "resumed/metrics.jsonl").read_text().splitlines()]
    assert [x["kl_coef"] for x in resumed if x["step"] == 4] == [pytest.approx(coefs[-1])]


def test_dynamic_sampling_warns_and_fills_when_no_group_has_signal(
    tmp_path, tiny_model_dir, caplog
):
    constant = tmp_path / "constant.py"
    constant.write_text("def one(completion, **_):\n    return 1.0\n")
    cfg = _cfg(
        tmp_path,
        "dapo",
        tiny_model_dir,
        "algo.name=dapo",
        "algo.max_sampling_rounds=2",
        f"reward.functions=[{{name: '{constant}:one'}}]",
        "reward.correct_function=null",
        "train.steps=1",
        "data.eval=null",
    )
    summary = train(cfg)
    assert summary["finished"]
    lines = [json.loads(x) for x in (tmp_path / "dapo/metrics.jsonl").read_text().splitlines()]
    (line,) = [x for x in lines if x["step"] == 1]
    assert line["sampling/rounds"] == 2 and line["sampling/filled_groups"] == 4
    assert "accuracy" not in line  # reward.correct_function=null: nothing judges, no 0.000
    assert "found 0 of 4 groups" in caplog.text and "algo.max_sampling_rounds=2" in caplog.text


def test_a_multi_turn_search_run_logs_episode_metrics(tmp_path, tiny_model_dir):
    """The loop with a tool environment: MT-GRPO on the fictional encyclopedia (the
    arithmetic model cannot search, so its episodes end in parse errors or answers)."""
    cfg = _cfg(
        tmp_path,
        "search",
        tiny_model_dir,
        "algo.name=mt_grpo",
        "env.name=search_qa",
        "data.train={source: builtin:fictional, split: train}",
        "data.eval={source: builtin:fictional, split: test, limit: 4}",
        "reward.functions=[{name: qa_em}]",
        "reward.correct_function=qa_em",
        "data.max_prompt_tokens=400",
        "rollout.max_model_len=1024",
        "train.steps=2",
        "trainer.eval_every=null",
    )
    summary = train(cfg)
    assert summary["finished"]
    lines = [json.loads(x) for x in (tmp_path / "search/metrics.jsonl").read_text().splitlines()]
    step = next(x for x in lines if x["step"] == 1)
    stops = sum(v for k, v in step.items() if k.startswith("episode/stop/"))
    assert stops == pytest.approx(1.0)  # every episode ended with a reason
    assert {"episode/turns", "episode/tool_calls", "episode/tool_error_rate"} <= step.keys()
    assert any("eval/episode/turns" in x for x in lines)
    assert (tmp_path / ".cache").is_dir()  # the built-in corpus was indexed once, shared


def _metrics(run_dir, key) -> dict[int, float]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {x["step"]: x[key] for x in lines if key in x}


def _samples(run_dir) -> dict[int, list[dict]]:
    lines = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    out: dict[int, list[dict]] = {}
    for x in lines:
        out.setdefault(x["step"], []).append(x)
    return out


# The straight run's fingerprint (tests/sync_loop_fingerprint.py) as the code of 0b09adf,
# the commit before the stream (e4b4430, driver/stream.py), trained it; recorded with
#     git worktree add /tmp/old 0b09adf
#     PYTHONPATH=/tmp/old/src .venv/bin/python tests/sync_loop_fingerprint.py
# on 2 CPU cores (torch 2.13.0+cpu). 2285985 gave the same numbers bit for bit, and two
# runs of either are bit-identical, so they are compared exactly: any change to what the
# synchronous loop samples or trains fails here (a float rounding moved in the update
# too). A change meant to alter them re-records them here, saying why.
SYNC_LOOP_AT_0B09ADF = {
    "reward/mean": {1: 0.5, 2: 0.6875, 3: 0.1875, 4: 0.0},
    "eval/accuracy": {0: 0.75, 2: 0.375, 4: 0.125},
    "policy_loss": {
        1: -0.16847680881619453,
        2: -0.10039491672068834,
        3: -0.049628667533397675,
        4: 0.0,
    },
    "grad_norm": {1: 0.9880561977624893, 2: 0.8807943016290665, 3: 0.2849385440349579, 4: 0.0},
    "entropy": {
        1: 0.04963596910238266,
        2: 0.05476144980639219,
        3: 0.06653508730232716,
        4: 0.08485954254865646,
    },
    "clip_frac": {
        1: 0.0021008404437452555,
        2: 0.005747126415371895,
        3: 0.0025906735099852085,
        4: 0.0,
    },
    "weights_sha256": "1872cd659e5cd049406918f3ba295d857164dd6640a0276b66bdcd0034afbf86",
    "weights_abs_sum": 43583.22525489154,
}


def test_the_synchronous_loop_trains_as_before_the_stream(straight_run):
    """rollout.max_staleness=0 (the default, the straight run's) builds no stream and
    trains as the loop did before the stream was added: the same rewards, losses,
    gradients, entropies and final weights as recorded from 0b09adf. Counts (rewards,
    accuracy) compare exactly; the float figures within 1e-4 relative: bit for bit on the
    machine that recorded them, with room for another CPU's reduction order (an AMD EPYC
    moved step 1's grad_norm by 6.4e-6 relative; a shifted sampling seed moves step 2's
    loss by 47%)."""
    run_dir, _ = straight_run
    assert load_config(str(run_dir / "config.yaml"), []).rollout.max_staleness == 0
    lines = (run_dir / "metrics.jsonl").read_text()
    assert "staleness" not in lines and "stream/" not in lines
    got = fingerprint(run_dir)
    for key, want in SYNC_LOOP_AT_0B09ADF.items():
        if key == "weights_sha256":  # weights_abs_sum stands for it
            continue
        exact = key in ("reward/mean", "eval/accuracy")
        expected = want if exact else pytest.approx(want, rel=1e-4, abs=1e-9)
        assert got[key] == expected, f"{key}: {got[key]} at 0b09adf: {want}"


def test_one_step_off_policy_trains_each_batch_at_most_one_version_behind(
    straight_run, tmp_path, tiny_model_dir
):
    """rollout.max_staleness=1 (the stream, driver/stream.py): batch 2 is generated with
    weights 0 while batch 1 trains, and trains policy version 1; later batches start once
    the push they need has come, so they lag 1 (or 0 when the engine had the next version
    before they started). A run stopped and resumed trains the same prompts."""
    run_dir, _ = straight_run
    extra = ("rollout.max_staleness=1", "algo.tis_cap=2.0")
    summary = train(_cfg(tmp_path, "ahead", tiny_model_dir, *extra))
    ahead = tmp_path / "ahead"
    assert summary["finished"]
    staleness = _metrics(ahead, "staleness")
    assert staleness[1] == 0.0 and staleness[2] == 1.0 and max(staleness.values()) <= 1.0
    samples = _samples(ahead)
    versions = {s: {x["weight_version"] for x in rows} for s, rows in samples.items()}
    assert versions[1] == versions[2] == {0}
    assert all(versions[s] <= {s - 2, s - 1} for s in (3, 4)), versions
    # the first batch is generated before any training, as in the synchronous loop
    assert _metrics(ahead, "reward/mean")[1] == _metrics(run_dir, "reward/mean")[1]
    assert samples[1] == _samples(run_dir)[1]
    assert all(0.5 < w < 2.0 for w in _metrics(ahead, "tis/weight").values())
    trained, _ = _weights(ahead)
    shipped = load_file(f"{tiny_model_dir}/model.safetensors")
    assert any(not torch.equal(trained[k], shipped[k]) for k in shipped)

    train(_cfg(tmp_path, "ahead-resumed", tiny_model_dir, *extra, "trainer.stop_after=2"))
    resumed = train(_cfg(tmp_path, "ahead-resumed", tiny_model_dir, *extra, "trainer.resume=auto"))
    assert resumed["finished"]
    again = _samples(tmp_path / "ahead-resumed")
    for step in (3, 4):
        assert [x["prompt"] for x in again[step]] == [x["prompt"] for x in samples[step]]


def test_a_lora_policy_trains_with_its_base_as_the_kl_reference(tmp_path, tiny_model_dir):
    """train.lora.rank: only the adapters train, the reference is the policy with them
    off (no second model), the engine serves the merged weights (pushed as adapters after
    the first push), and export merges them."""
    cfg = _cfg(tmp_path, "lora", tiny_model_dir, "train.lora.rank=8", "algo.beta=0.05")
    summary = train(cfg)
    run_dir = tmp_path / "lora"
    assert summary["finished"]
    kl = _metrics(run_dir, "kl")
    assert kl[1] == pytest.approx(0.0, abs=1e-3) and kl[4] > kl[1]  # adapters start at zero
    # rollout.lora_push=adapters: the engine merges the adapters into the base it keeps
    assert max(_metrics(run_dir, "engine_logprob_gap").values()) < 1e-4
    pushed = _metrics(run_dir, "rollout/push_bytes")  # step 1 ships the base, then adapters
    assert all(pushed[step] < pushed[1] / 4 for step in (2, 3, 4))
    assert sorted(_metrics(run_dir, "time/push_apply_s")) == [1, 2, 3, 4]
    trained, _ckpt = _weights(run_dir)
    shipped = load_file(f"{tiny_model_dir}/model.safetensors")
    base = {k.replace(".base_layer.", "."): v for k, v in trained.items() if ".lora_" not in k}
    assert all(torch.equal(base[k], shipped[k]) for k in shipped)  # the base stayed frozen
    merged = export_checkpoint(find_checkpoint(run_dir), tmp_path / "merged")
    exported = AutoModelForCausalLM.from_pretrained(merged)
    params = exported.state_dict()
    assert any(not torch.equal(params[k], shipped[k]) for k in shipped)  # adapters merged in


def _arith_messages(n: int) -> tuple[list[list[dict]], list[str]]:
    """``n`` builtin:arith problems as chat messages, and their bare answers."""
    from grouprl.assets.arith import builtin_rows

    rows, _ = builtin_rows("train", n)
    messages = [[{"role": "user", "content": r["question"]}] for r in rows]
    return messages, [r["answer"].rsplit("#### ", 1)[1] for r in rows]


def _one_step_as_is(tmp_path, tiny_model_dir, name, source, messages, *keys):
    """Train one step on ``source`` with only the data keys set; the row's questions reach
    the engine and the answers the reward (the tiny model gets some right)."""
    cfg = _cfg(
        tmp_path,
        name,
        tiny_model_dir,
        f"data.train.source={source}",
        "data.prompt_key=prompt",
        *keys,
        "data.eval=null",
        "train.steps=1",
    )
    summary = train(cfg)
    assert summary["finished"] and summary["step"] == 1
    [step] = _metrics(tmp_path / name, "reward/mean").values()
    assert step > 0  # the reference came through the answer key
    prompts = {s["prompt"] for s in _samples(tmp_path / name)[1]}
    questions = {m[0]["content"] for m in messages}
    assert prompts and all(any(q in p for q in questions) for p in prompts)


def test_a_verl_parquet_trains_a_step_as_it_is(tmp_path, tiny_model_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    messages, answers = _arith_messages(8)
    rows = [  # the columns of verl's examples/data_preprocess/gsm8k.py
        {
            "data_source": "openai/gsm8k",
            "prompt": prompt,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": "train", "index": i},
        }
        for i, (prompt, answer) in enumerate(zip(messages, answers, strict=True))
    ]
    path = tmp_path / "verl.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    _one_step_as_is(
        tmp_path,
        tiny_model_dir,
        "verl",
        path,
        messages,
        "data.answer_key=reward_model.ground_truth",
    )


def test_a_trl_conversational_dataset_trains_a_step_as_it_is(tmp_path, tiny_model_dir):
    import datasets

    messages, answers = _arith_messages(8)
    rows = [{"prompt": m, "solution": a} for m, a in zip(messages, answers, strict=True)]
    path = tmp_path / "trl"
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    _one_step_as_is(tmp_path, tiny_model_dir, "trl", path, messages, "data.answer_key=solution")
