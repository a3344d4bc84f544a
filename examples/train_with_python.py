"""Train the shipped tiny model from Python: a reward function of your own, a packaged
recipe with overrides, a few GRPO steps that keep the best validation's checkpoint, then
the held-out score of the result. No command line involved (docs/python-api.md).

    .venv/bin/python examples/train_with_python.py [RUN_DIR]

About a minute on a 2-core CPU (the transformers engine: no vLLM start-up). RUN_DIR
defaults to a new runs/python-api-TIME; an existing run's directory is refused.
"""

from __future__ import annotations

import sys
import time

import grouprl


@grouprl.register_reward("shows_work")
def shows_work(completion: str, *, reference: str, **kwargs) -> float:
    """As many equations as the worked reference has, up to 1: credit for each step."""
    wanted = max(reference.count("="), 1)
    return min(completion.count("=") / wanted, 1.0)


def main(run_dir: str) -> None:
    cfg = grouprl.load_config(
        "tiny-arith",
        [
            "rollout.engine=hf",
            "rollout.n=4",
            "data.batch_size=8",
            "data.eval.limit=32",
            "train.mini_batch_size=32",
            "train.micro_batch_size=16",
            "train.steps=4",
            "trainer.eval_every=2",
            "checkpoint.keep_best=true",
            "metrics.progress=false",
            f"trainer.run_dir={run_dir}",
            "reward.functions=[{name: math_answer}, {name: shows_work, weight: 0.2}]",
        ],
    )
    summary = grouprl.train(cfg)
    print(f"trained {summary['step']} steps in {summary['run_dir']}; best: {summary['best']}")
    metrics = grouprl.evaluate(summary["run_dir"])
    print(f"held-out accuracy of the newest checkpoint: {metrics['eval/accuracy']:.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else f"runs/python-api-{time.strftime('%H%M%S')}")
