"""The TRL half of ``step_time.py``: GRPOTrainer steps, timed. Runs in ``benchmarks/.venv-trl``.

    spec.json (from step_time.py) ──► dataset of the same chat prompts ──► GRPOTrainer
          │                                                                  │ max_steps =
          │        StepTimer callback: on_step_begin / on_step_end ◄─────────┘ warmup + steps
          ▼
    stdout: one line ``TRL_RESULT {json}`` with per-step wall and CPU seconds

Not a module of grouprl and imports none of it: the TRL venv does not have it.
Generation is TRL's default on a CPU, transformers ``generate`` (``use_vllm=False``);
``min_new_tokens = max_new_tokens`` makes every completion exactly that long.
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
import time
from importlib.metadata import version

RESULT_PREFIX = "TRL_RESULT "
_ANSWER = re.compile(r"####[ \t]*([^\n]*)")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads) and its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def marked_answer(text: str) -> str | None:
    found = _ANSWER.findall(text)
    return found[-1].strip().replace(",", "") if found else None


class Recorder:
    """Per-step timestamps (set by the callback) and tokens generated (seen by the reward)."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self.current: dict | None = None

    def begin(self) -> None:
        self.current = {"t0": time.perf_counter(), "cpu0": cpu_seconds(), "tokens": 0}

    def end(self) -> None:
        cur = self.current
        assert cur is not None, "on_step_end without on_step_begin"
        self.steps.append(
            {
                "wall_s": time.perf_counter() - cur["t0"],
                "cpu_s": cpu_seconds() - cur["cpu0"],
                "tokens": cur["tokens"],
                "generate_s": cur.get("generate_s"),
            }
        )
        self.current = None

    def reward(self, completions, completion_ids, answer, **_) -> list[float]:
        """1.0 when the completion's ``#### N`` matches the reference's (grouprl's math
        reward, simplified: the value does not matter for timing)."""
        cur = self.current
        if cur is not None:
            cur.setdefault("generate_s", time.perf_counter() - cur["t0"])
            cur["tokens"] += sum(len(ids) for ids in completion_ids)
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [
            float(marked_answer(t) is not None and marked_answer(t) == marked_answer(ref))
            for t, ref in zip(texts, answer, strict=True)
        ]


def main(spec_path: str) -> None:
    with open(spec_path) as file:
        spec = json.load(file)
    import torch

    torch.set_num_threads(spec["threads"])
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    recorder = Recorder()

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            recorder.begin()

        def on_step_end(self, args, state, control, **kwargs):
            recorder.end()

    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows = spec["rows"]
    for row in rows:  # the prompt TRL renders must be the token ids grouprl generates from
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": row["question"]}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        if list(ids) != row["prompt_ids"]:
            sys.exit(f"TRL's chat rendering differs from grouprl's for {row['question']!r}")
    conversations = [
        {"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]}
        for r in rows
    ]
    dataset = Dataset.from_list(conversations)
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    samples = spec["prompts"] * spec["group"]
    length = spec["completion_len"]
    config = GRPOConfig(
        output_dir=spec["output_dir"],
        max_steps=spec["warmup"] + spec["steps"],
        per_device_train_batch_size=spec["micro_batch"],
        gradient_accumulation_steps=samples // spec["micro_batch"],  # one optimizer step
        num_generations=spec["group"],  # generation batch = micro x accumulation = samples
        num_iterations=1,
        max_completion_length=length,
        generation_kwargs={"min_new_tokens": length},
        temperature=1.0,
        top_p=1.0,
        beta=spec["beta"],
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=spec["adam_betas"][0],
        adam_beta2=spec["adam_betas"][1],
        max_grad_norm=spec["max_grad_norm"],
        shuffle_dataset=False,
        use_vllm=False,
        gradient_checkpointing=False,  # TRL's default is True; grouprl does not recompute
        bf16=spec["bf16"],  # CPU autocast in transformers' Trainer; weights stay float32
        fp16=False,
        use_cpu=True,
        seed=spec["seed"],
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        log_completions=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=recorder.reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    trainer.train()
    result = {
        "trl": version("trl"),
        "transformers": version("transformers"),
        "torch": torch.__version__,
        "generation": "transformers generate (use_vllm=False)",
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "generation_batch_size": config.generation_batch_size,
        "steps_per_generation": config.steps_per_generation,
        "steps": recorder.steps,
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(sys.argv[1])
