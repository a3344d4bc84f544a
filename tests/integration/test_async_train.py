"""`grouprl train` with the rollout stream (rollout.max_staleness=2, partial rollouts in
segments of 4 tokens) on the tiny model and the transformers engine: the staleness bound
holds at every step and is reached,
every batch trains, and a run stopped and resumed trains the same prompts, each once."""

import functools
import json
import time

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train
from grouprl.workers.policy import PolicyWorker

BATCH = 2


def _cfg(tmp_path, name, tiny_model_dir, *extra):
    return load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            "rollout.engine=hf",
            "rollout.n=2",
            "rollout.max_tokens=8",
            "rollout.max_staleness=2",
            f"data.batch_size={BATCH}",
            "data.train.limit=32",
            "data.eval=null",
            "train.mini_batch_size=4",
            "train.micro_batch_size=4",
            "train.steps=5",
            "train.lr=1e-3",
            "trainer.eval_every=null",
            f"trainer.log_samples={BATCH}",  # every prompt a step trains, in samples.jsonl
            "metrics.progress=false",
            f"trainer.run_dir={tmp_path / name}",
            *extra,
        ],
    )


def _lines(run_dir, name):
    return [json.loads(x) for x in (run_dir / name).read_text().splitlines()]


def _prompts(run_dir) -> dict[int, list[int]]:
    """The prompt indices each step trained (samples.jsonl: the first sample of each)."""
    out: dict[int, list[int]] = {}
    for x in _lines(run_dir, "samples.jsonl"):
        out.setdefault(x["step"], []).append(x["prompt_index"])
    return out


@pytest.fixture(scope="module")
def streamed(tmp_path_factory, tiny_model_dir):
    """A streamed run whose policy update takes 1 s longer than it does: a round of 4
    samples of at most 8 tokens takes far less, so the producer runs as far ahead as
    admission lets it, whatever else loads the machine."""
    tmp = tmp_path_factory.mktemp("async")
    update = PolicyWorker.update

    @functools.wraps(update)
    def slow_update(self, *args, **kwargs):
        time.sleep(1.0)
        return update(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PolicyWorker, "update", slow_update)
        # in segments of 4 tokens (partial rollouts): a push waits for one segment
        summary = train(_cfg(tmp, "streamed", tiny_model_dir, "rollout.partial_rollout_tokens=4"))
    return tmp / "streamed", summary


def test_every_batch_trains_within_the_staleness_bound_and_reaches_it(streamed):
    run_dir, summary = streamed
    assert summary["finished"] and summary["step"] == 5
    steps = {x["step"]: x for x in _lines(run_dir, "metrics.jsonl") if x["step"] > 0}
    assert sorted(steps) == [1, 2, 3, 4, 5]
    staleness = [steps[s]["staleness"] for s in sorted(steps)]
    assert staleness[0] == 0.0 and max(staleness) <= 2.0
    # rounds 1 and 2 generate with version 0 while step 1 trains: step 3 trains round 2
    # two versions behind
    assert staleness[2] == 2.0, staleness
    for x in steps.values():
        assert {"stream/buffer_groups", "stream/in_flight_groups", "stream/dropped_stale"} <= set(x)
        assert x["stream/dropped_stale"] == 0  # staleness_policy=wait drops nothing
        assert x["time/wait_generate_s"] >= 0 and x["stream/admission_wait_s"] >= 0
        # the loss saw each token's weight version: its lags, within the bound
        lags = {int(k.split("/")[1].removeprefix("lag")) for k in x if k.endswith("/kl")}
        assert lags and max(lags) <= 2, x
    assert sum(x.get("rollout/segments", 0) for x in steps.values()) > 0
    prompts = _prompts(run_dir)
    trained = [i for s in sorted(prompts) for i in prompts[s]]
    assert len(trained) == 5 * BATCH and len(set(trained)) == len(trained)


def test_a_stopped_and_resumed_run_trains_the_same_prompts_each_once(
    streamed, tmp_path, tiny_model_dir
):
    run_dir, _ = streamed
    stopped = train(_cfg(tmp_path, "resumed", tiny_model_dir, "trainer.stop_after=2"))
    assert stopped["step"] == 2 and not stopped["finished"]
    trainer = json.loads(next((tmp_path / "resumed").rglob("trainer.json")).read_text())
    stream = trainer["stream"]  # the buffer and the round in flight went into the checkpoint
    held = len(stream["buffer"]) + sum(len(r["rows"]) for r in stream["unfinished"])
    assert held >= BATCH  # at least step 3's prompts were drawn ahead
    resumed = train(_cfg(tmp_path, "resumed", tiny_model_dir, "trainer.resume=auto"))
    assert resumed["finished"]
    # FIFO batches from the sampler's order: the same prompts at every step, once each
    assert _prompts(tmp_path / "resumed") == _prompts(run_dir)
