"""The memory planner against measured CUDA runs of configs it was not fitted to (GPU only).

Each case is a 2-step tiny-arith run (rollout.engine=hf, ignore_eos) in a process of its
own; it prints one ``RESULT {json}`` line: ``torch.cuda.max_memory_reserved`` and
``max_memory_allocated`` against ``plan_for_run``'s peak reserved and peak per GPU (whose
rows include a 0.5 GiB CUDA context that ``max_memory_reserved`` never counts). The
``mid-*`` cases use a randomly initialised 0.2B model of the tiny model's vocabulary,
written to /tmp/mid-model first. On a GPU machine without network (README, "The GPU
tier")::

    PYTHONPATH=/tmp/site:src python3 scripts/gpu_plan_check.py
    CASES=mid-0.2B CASE_TIMEOUT=165 PYTHONPATH=/tmp/site:src python3 scripts/gpu_plan_check.py

Issue 27's closing note has an H200's figures. Every case is one rank, so it checks the
one-rank path (autocast over float32 weights); the sharded path's FSDP2 mixed precision
is checked by tests/gpu/test_cuda_precision.py.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "src/grouprl/assets/tiny-arith"
MID = Path("/tmp/mid-model")
BASE = [
    "train.device=cuda",
    "rollout.engine=hf",
    "rollout.ignore_eos=true",
    "data.eval=null",
    "metrics.progress=false",
    "train.steps=2",
]
CASES = {
    "tiny-ckpt-long": [
        "model.path=" + str(TINY),
        "rollout.max_tokens=384",
        "data.max_prompt_tokens=64",
        "rollout.max_model_len=512",
        "train.micro_batch_size=16",
        "train.activation_checkpointing=true",
    ],
    "tiny-lora": [
        "model.path=" + str(TINY),
        "rollout.max_tokens=256",
        "data.max_prompt_tokens=64",
        "rollout.max_model_len=384",
        "train.micro_batch_size=32",
        "train.lora.rank=8",
    ],
    "tiny-packing": [
        "model.path=" + str(TINY),
        "rollout.max_tokens=192",
        "data.max_prompt_tokens=64",
        "rollout.max_model_len=256",
        "train.packing=true",
        "train.micro_batch_tokens=8192",
    ],
    "mid-0.2B": [
        "model.path=" + str(MID),
        "rollout.max_tokens=256",
        "data.max_prompt_tokens=64",
        "rollout.max_model_len=384",
        "train.micro_batch_size=16",
    ],
    "mid-0.2B-ckpt-kl": [
        "model.path=" + str(MID),
        "rollout.max_tokens=256",
        "data.max_prompt_tokens=64",
        "rollout.max_model_len=384",
        "train.micro_batch_size=32",
        "train.activation_checkpointing=true",
        "algo.beta=0.01",
    ],
}


def make_mid():
    if (MID / "config.json").exists():
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(TINY)
    cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 1024, 2816, 16
    cfg.num_attention_heads, cfg.num_key_value_heads = 16, 4
    cfg.layer_types = ["full_attention"] * 16
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    MID.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(MID)
    for f in TINY.iterdir():
        if f.name.startswith(("tokenizer", "chat_template", "generation")):
            shutil.copy(f, MID / f.name)


def one(case, run_dir):
    import torch

    from grouprl.config import derive, load_config
    from grouprl.driver.run import train
    from grouprl.plan.gpu_memory import plan_for_run

    total = torch.cuda.get_device_properties(0).total_memory
    cfg = load_config(
        "tiny-arith",
        BASE + CASES[case] + [f"cluster.gpu={total // 2**20}MiB", f"trainer.run_dir={run_dir}"],
    )
    plan = plan_for_run(cfg, derive(cfg))
    torch.cuda.reset_peak_memory_stats()
    t = time.time()
    s = train(cfg)
    MiB = 2**20
    out = dict(
        case=case,
        finished=s["finished"],
        s=round(time.time() - t, 1),
        measured_reserved=round(torch.cuda.max_memory_reserved() / MiB),
        measured_allocated=round(torch.cuda.max_memory_allocated() / MiB),
        planned_reserved=round(plan.reserved / MiB),
        planned_peak=round(plan.peak / MiB),
        rows={r.what: round(r.bytes / MiB) for r in plan.training_gpu},
    )
    out["reserved/planned_reserved"] = round(
        out["measured_reserved"] / max(out["planned_reserved"], 1), 3
    )
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        one(sys.argv[1], sys.argv[2])
    else:
        make_mid()
        for c in os.environ.get("CASES", ",".join(CASES)).split(","):
            try:
                r = subprocess.run(
                    [sys.executable, __file__, c, f"/tmp/runs/{c}"],
                    capture_output=True,
                    text=True,
                    timeout=int(os.environ.get("CASE_TIMEOUT", "75")),
                )
            except subprocess.TimeoutExpired as e:
                err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
                print(f"TIMEOUT {c}\n{err[-1500:]}", flush=True)
                continue
            lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT")]
            print(
                lines[-1] if lines else f"FAIL {c} rc={r.returncode}\n{r.stderr[-3000:]}",
                flush=True,
            )
