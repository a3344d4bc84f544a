"""Config loading, overrides, validation messages, cross-field checks and redaction."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from grouprl.config import (
    ConfigError,
    check_config,
    derive,
    list_recipes,
    load_config,
    steps_for_epochs,
)
from grouprl.config.algo_section import AlgoConfig
from grouprl.config.aliases import ALIASES, AR, VERL, markdown_table
from grouprl.config.convert import RULES, convert_file, convert_verl
from grouprl.config.env import EnvConfig
from grouprl.config.key_hints import all_paths
from grouprl.config.redact import REDACTED, is_secret_key, redacted_dict, save_resolved
from grouprl.config.renamed import RENAMED
from grouprl.config.replica_checks import replica_nodes, replicas_per_node
from grouprl.config.reward import RewardConfig
from grouprl.config.schema import RunConfig


def write_recipe(tmp_path, text: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return str(path)


# --- overrides ----------------------------------------------------------------


def test_overrides_parse_scalars_nested_lists_and_null():
    cfg = load_config(
        "tiny-arith",
        [
            "algo.beta=0.04",
            "rollout.temperature=0.7",
            "reward.functions=[{name: math_answer}, {name: format, weight: 0.5}]",
            "data.eval=null",
            "train.betas=[0.9, 0.95]",
            "train.lr=1e-6",  # YAML 1.1 reads 1e-6 as text; pydantic turns it into a float
        ],
    )
    assert cfg.algo.beta == 0.04
    assert cfg.rollout.temperature == 0.7
    assert [(f.name, f.weight) for f in cfg.reward.functions] == [
        ("math_answer", 1.0),
        ("format", 0.5),
    ]
    assert cfg.data.eval is None
    assert cfg.train.betas == (0.9, 0.95)
    assert cfg.train.lr == 1e-6


def test_override_into_list_entry_and_later_override_wins():
    cfg = load_config(
        "tiny-arith", ["reward.functions.0.weight=0.25", "rollout.n=4", "rollout.n=16"]
    )
    assert cfg.reward.functions[0].weight == 0.25
    assert cfg.rollout.n == 16


def test_override_creates_section_that_recipe_set_to_null(tmp_path):
    recipe = write_recipe(tmp_path, "data:\n  eval: null\ntrain:\n  steps: 3\n")
    cfg = load_config(recipe, ["data.eval.source=builtin:arith", "data.eval.split=test"])
    assert cfg.data.eval is not None and cfg.data.eval.split == "test"


def test_quoted_override_keeps_text_with_yaml_syntax():
    cfg = load_config("tiny-arith", ['data.prompt_template="Q: {question}"'])
    assert cfg.data.prompt_template == "Q: {question}"


def test_malformed_override_names_the_expected_form():
    with pytest.raises(ConfigError, match=r"'rollout\.n' is not of the form key\.sub=value"):
        load_config("tiny-arith", ["rollout.n"])


def test_unknown_key_names_full_path_and_suggests_close_match():
    with pytest.raises(ConfigError) as err:
        load_config("tiny-arith", ["rollout.temprature=0.5"])
    text = str(err.value)
    assert "'rollout.temprature'" in text
    assert "Did you mean rollout.temperature" in text


def test_unknown_key_in_wrong_section_suggests_the_right_section():
    with pytest.raises(ConfigError, match=r"'rollout\.beta'.*Did you mean algo\.beta"):
        load_config("tiny-arith", ["rollout.beta=0.1"])


def test_unknown_key_in_recipe_file_names_file_and_path(tmp_path):
    recipe = write_recipe(tmp_path, "train:\n  steps: 3\n  micro_batch: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(recipe, [])
    assert "'train.micro_batch'" in str(err.value)
    assert recipe in str(err.value)
    assert "train.micro_batch_size" in str(err.value)


def test_key_below_a_value_is_rejected():
    with pytest.raises(ConfigError, match=r"train\.lr is a value, not a section"):
        load_config("tiny-arith", ["train.lr.max=1"])


def test_validation_error_names_key_value_reason_and_source():
    with pytest.raises(ConfigError) as err:
        load_config("tiny-arith", ["rollout.temperature=-1", "rollout.engine=sglang"])
    text = str(err.value)
    assert "2 invalid values" in text
    assert "rollout.temperature = -1: should be greater than or equal to 0" in text
    assert "rollout.engine = 'sglang': should be 'vllm', 'hf' or 'server'" in text
    assert "override 'rollout.engine=sglang'" in text


def test_unknown_recipe_lists_packaged_ones():
    with pytest.raises(ConfigError, match=r"unknown recipe 'tiny-arth'.*tiny-arith"):
        load_config("tiny-arth", [])


def test_packaged_recipes_have_descriptions_and_load_cleanly():
    recipes = dict(list_recipes())
    assert "tiny-arith" in recipes and "qwen2.5-0.5b-gsm8k" in recipes
    for name, description in recipes.items():
        assert description, name
        cfg = load_config(name, [])
        assert cfg.name == name
        check_config(cfg)


def test_recipe_without_name_takes_the_file_stem(tmp_path):
    cfg = load_config(write_recipe(tmp_path, "train: {steps: 2}\n"), [])
    assert cfg.name == "recipe"


# --- cross-field checks -------------------------------------------------------


def test_tiny_arith_derived_numbers():
    d = derive(load_config("tiny-arith", ["train.steps=60"]))
    assert (d.samples_per_step, d.mini_batch_size, d.micro_batch_size) == (128, 64, 32)
    assert (d.mini_batches_per_step, d.grad_accum_per_rank, d.optimizer_steps_per_step) == (2, 2, 2)
    assert (d.world_size, d.samples_per_rank, d.max_tokens_per_pass) == (1, 64, 32 * 192)
    assert (d.total_steps, d.total_optimizer_steps) == (60, 120)
    assert d.max_tokens_per_step == 128 * (128 + 64)
    assert d.reference_model is False
    assert d.run_dir == "runs/tiny-arith"
    assert (d.train_rows, d.eval_rows) == (20_000, 200)


def test_group_size_not_dividing_mini_batch_fails_with_arithmetic_and_choices():
    cfg = load_config("tiny-arith", ["rollout.n=3"])
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    text = str(err.value)
    for key in ("data.batch_size=16", "rollout.n=3", "train.mini_batch_size=64"):
        assert key in text
    assert "= 48" in text
    assert "rollout.n in {4, 8, 12, 16, ...}" in text


def test_micro_batch_must_divide_mini_batch():
    cfg = load_config("tiny-arith", ["train.micro_batch_size=24"])
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert "train.micro_batch_size=24 does not divide train.mini_batch_size=64" in str(err.value)
    assert "{1, 2, 4, 8, 16, 32, 64}" in str(err.value)


def test_null_mini_batch_means_whole_step():
    d = derive(load_config("tiny-arith", ["train.mini_batch_size=null"]))
    assert (d.mini_batch_size, d.mini_batches_per_step, d.grad_accum_per_rank) == (128, 1, 4)


def test_grpo_needs_a_group_of_two():
    with pytest.raises(ConfigError, match=r"rollout\.n=1.*zero advantage"):
        check_config(load_config("tiny-arith", ["rollout.n=1", "train.mini_batch_size=16"]))


def test_greedy_training_is_refused_while_greedy_evaluation_is_the_default():
    with pytest.raises(ConfigError) as err:
        check_config(load_config("tiny-arith", ["rollout.temperature=0"]))
    text = str(err.value)
    assert "rollout.temperature=0.0 decodes greedily" in text
    assert "rollout.temperature=1.0" in text and "rollout.eval_temperature=0" in text
    cfg = load_config("tiny-arith", ["rollout.temperature=0.7"])
    check_config(cfg)
    assert cfg.rollout.eval_temperature == 0.0


def test_run_length_needs_exactly_one_of_steps_and_epochs():
    with pytest.raises(ConfigError, match=r"set train\.steps=N .* or train\.epochs=E"):
        check_config(load_config("tiny-arith", ["train.steps=null"]))
    with pytest.raises(ConfigError, match=r"both set"):
        check_config(load_config("tiny-arith", ["train.epochs=1"]))


def test_epochs_convert_to_steps_on_builtin_data_with_limit():
    d = derive(
        load_config("tiny-arith", ["train.steps=null", "train.epochs=2", "data.train.limit=100"])
    )
    assert (d.train_rows, d.steps_per_epoch, d.total_steps) == (100, 6.25, 13)  # ceil(12.5)


def test_epochs_on_hub_data_are_computed_later():
    d = derive(load_config("qwen2.5-0.5b-gsm8k", []))
    assert d.total_steps is None and d.train_rows is None and d.total_optimizer_steps is None
    assert d.reference_model is True
    assert steps_for_epochs(epochs=1, rows=7473, batch_size=32) == 234  # ceil(233.5)


def test_several_problems_are_reported_together(tmp_path):
    cfg = load_config(
        "tiny-arith", ["data.max_prompt_tokens=512", f"trainer.resume={tmp_path / 'nope'}"]
    )
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    text = str(err.value)
    assert "2 problems" in text
    assert "512 + rollout.max_tokens=64 = 576 exceeds rollout.max_model_len=256" in text
    assert "trainer.resume=" in text


def test_resume_accepts_never_auto_and_existing_path(tmp_path):
    for value in ("never", "auto", str(tmp_path)):
        check_config(load_config("tiny-arith", [f"trainer.resume={value}"]))


def test_eval_split_equal_to_train_split_is_rejected():
    with pytest.raises(ConfigError, match=r"data\.eval reads the same rows as data\.train"):
        check_config(load_config("tiny-arith", ["data.eval.split=train"]))


# --- redaction ----------------------------------------------------------------


def test_secret_keys_are_recognised_by_word():
    for key in ("api_key", "hf_token", "aws_secret_access_key", "password", "accessToken"):
        assert is_secret_key(key), key
    for key in ("max_tokens", "max_prompt_tokens", "logprob_chunk_tokens", "tokenizer"):
        assert not is_secret_key(key), key


def test_wandb_api_key_is_redacted_in_saved_config(tmp_path):
    cfg = load_config(
        "tiny-arith", ["metrics.wandb.api_key=sk-very-secret", "metrics.wandb.project=p"]
    )
    data = redacted_dict(cfg)
    assert data["metrics"]["wandb"]["api_key"] == REDACTED
    assert data["rollout"]["max_tokens"] == 64  # a "tokens" key is not a secret
    path = save_resolved(cfg, tmp_path / "run" / "config.yaml")
    text = path.read_text()
    assert "sk-very-secret" not in text
    assert REDACTED in text
    assert yaml.safe_load(text)["metrics"]["wandb"]["project"] == "p"
    # the saved file is itself a recipe
    assert load_config(str(path), []).rollout.n == 8


def test_unset_secret_stays_null():
    assert redacted_dict(load_config("tiny-arith", []))["metrics"]["wandb"]["api_key"] is None


# --- algorithm presets and mismatched combinations ---------------------------------


def test_algorithm_preset_fills_keys_the_recipe_leaves_out():
    algo = load_config("tiny-arith", ["algo.name=gspo"]).algo
    assert (algo.policy_loss, algo.loss_agg) == ("gspo", "seq_mean_token_mean")
    assert (algo.clip_eps_low, algo.clip_eps_high) == (3e-4, 4e-4)
    # an explicit key wins over the preset
    algo = load_config("tiny-arith", ["algo.name=gspo", "algo.clip_eps_high=0.001"]).algo
    assert (algo.clip_eps_low, algo.clip_eps_high) == (3e-4, 0.001)
    algo = load_config("tiny-arith", ["algo.name=dapo"]).algo
    assert algo.dynamic_sampling and algo.clip_eps_high == 0.28


def test_dr_grpo_norm_tokens_default_to_max_tokens():
    cfg = load_config("tiny-arith", ["algo.name=dr_grpo", "rollout.max_tokens=48"])
    assert (cfg.algo.loss_agg, cfg.algo.norm_tokens) == ("seq_mean_token_sum_norm", 48)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algo.name=ppo"],
            r"algo\.advantage=gae \(algo\.name=ppo\) needs a value model.*critic\.path=",
        ),
        (
            ["critic.path=builtin:tiny-arith"],
            r"algo\.advantage=grpo does not use values; set critic=null",
        ),
        (
            ["algo.name=ppo", "algo.policy_loss=gspo", "critic.path=builtin:tiny-arith"],
            r"gae gives each token its own advantage.*algo\.policy_loss=gspo_token",
        ),
        (
            [
                "algo.advantage=reinforce_pp",
                "algo.policy_loss=gspo",
                "algo.beta=0.1",
                "algo.kl_in=reward",
            ],
            r"kl_in=reward makes reinforce_pp's returns differ per token",
        ),
        (
            [
                "algo.dynamic_sampling=true",
                "algo.advantage=reinforce_pp",
                "rollout.n=1",
                "train.mini_batch_size=16",
            ],
            r"rollout\.n=1: it drops groups whose rewards are all equal",
        ),
        (
            ["algo.policy_loss=gspo", "algo.dual_clip_c=3"],
            r"algo\.dual_clip_c=3.0 applies to token ratios",
        ),
        (["algo.kl_target=0.05"], r"starting value algo\.beta, which is 0"),
        (["algo.name=mt_grpo"], r"env\.name=single_turn has one turn.*env\.name=search_qa"),
        (
            ["algo.overlong_buffer=64"],
            r"algo\.overlong_buffer=64 must be smaller than rollout\.max_tokens=64.*=12",
        ),
        (
            ["algo.name=ppo", "critic.path=builtin:tiny-arith", "critic.warmup_steps=40"],
            r"critic\.warmup_steps=40 leaves no step of train\.steps=40",
        ),
        (
            ["cluster.offload_optimizer=true", "train.device=cpu"],
            r"train\.device=cpu trains on the CPU, where they already are",
        ),
        (
            ["cluster.offload_optimizer=true", "cluster.offload=true"],
            r"Set one of them: cluster\.offload_optimizer to keep parameters on the GPUs",
        ),
    ],
)
def test_mismatched_algorithm_settings_fail_at_config_time(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(load_config("tiny-arith", overrides))


def test_batch_and_critic_baselines_work_with_groups_of_one():
    for extra in (
        ["algo.advantage=reinforce_pp"],
        ["algo.name=ppo", "critic.path=builtin:tiny-arith"],
    ):
        d = derive(
            load_config(
                "tiny-arith",
                ["rollout.n=1", "train.mini_batch_size=16", "train.micro_batch_size=8", *extra],
            )
        )
        assert d.samples_per_step == 16


def test_recipe_extends_another_and_overrides_only_what_it_sets(tmp_path):
    child = write_recipe(tmp_path, "extends: tiny-arith\nalgo: {name: rloo}\nrollout: {n: 4}\n")
    cfg = load_config(child, [])
    base = load_config("tiny-arith", [])
    assert cfg.name == "recipe" and cfg.description == ""  # never inherited
    assert (cfg.algo.name, cfg.algo.advantage, cfg.rollout.n) == ("rloo", "rloo", 4)
    assert cfg.rollout.max_tokens == base.rollout.max_tokens  # merged key by key
    assert cfg.train == base.train


def test_extending_recipe_replaces_a_data_source_whole(tmp_path):
    child = write_recipe(
        tmp_path,
        "extends: tiny-arith\ndata: {eval: {source: builtin:arith, split: test}}\n"
        "rollout: {n: 4}\n",
    )
    cfg, base = load_config(child, []), load_config("tiny-arith", [])
    assert base.data.eval.limit == 200
    assert cfg.data.eval.limit is None  # not the parent's limit: the source is replaced whole
    assert cfg.data.batch_size == base.data.batch_size  # the rest of data: merged
    assert cfg.rollout.max_tokens == base.rollout.max_tokens


def test_recipe_extends_cycle_is_named(tmp_path):
    (tmp_path / "a.yaml").write_text(f"extends: {tmp_path / 'b.yaml'}\n")
    (tmp_path / "b.yaml").write_text(f"extends: {tmp_path / 'a.yaml'}\n")
    with pytest.raises(ConfigError, match="extends makes a cycle"):
        load_config(str(tmp_path / "a.yaml"), [])


def test_ranks_must_split_the_mini_batch_and_the_fix_lists_rank_counts_that_do():
    cfg = load_config("tiny-arith", ["cluster.nodes=3"])  # 64-sample mini-batches
    with pytest.raises(ConfigError, match=r"3 training ranks .* \{1, 2, 4, 8\}"):
        derive(cfg)
    assert derive(load_config("tiny-arith", ["cluster.nodes=2"])).world_size == 2


def test_gpu_ranks_per_node_leave_the_rollout_gpus():
    cfg = load_config(
        "tiny-arith", ["cluster.gpus_per_node=8", "rollout.gpus=1", "data.batch_size=28"]
    )
    assert (cfg.ranks_per_node, cfg.world_size) == (7, 7)


# --- per-rank batch arithmetic and rollout replicas ----------------------------------

# tiny-arith on 2 nodes x 8 GPUs: 64-sample mini-batches over 16 ranks, 4 samples each
GPU16 = ["cluster.nodes=2", "cluster.gpus_per_node=8", "train.device=cuda"]
# 7B-style: 1,024 samples per step, 256-sample mini-batches over 16 ranks, 16 samples each
STEP1024 = [*GPU16, "data.batch_size=128", "train.mini_batch_size=256"]
# one node of 8 GPUs, 1 kept for generation: 7 ranks; 224 samples, 32 per rank
DEDICATED = [
    "cluster.gpus_per_node=8",
    "rollout.gpus=1",
    "train.device=cuda",
    "data.batch_size=28",
    "train.mini_batch_size=null",
    "train.micro_batch_size=8",
]


def test_gradient_accumulation_counts_one_ranks_share():
    """Rank.block gives each of 16 ranks 256 / 16 = 16 samples of every mini-batch, so
    micro-batches of 4 accumulate 4 times per rank, not 256 / 4 = 64 times."""
    d = derive(load_config("tiny-arith", [*STEP1024, "train.micro_batch_size=4"]))
    assert (d.world_size, d.samples_per_rank, d.grad_accum_per_rank) == (16, 16, 4)
    assert d.max_tokens_per_pass == 4 * 192  # one rank's pass
    # a token budget splits by length instead: no fixed count
    budget = derive(load_config("tiny-arith", [*STEP1024, "train.micro_batch_tokens=2048"]))
    assert budget.grad_accum_per_rank is None and budget.max_tokens_per_pass == 2048


def test_micro_batch_larger_than_a_ranks_share_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as err:
        check_config(load_config("tiny-arith", [*STEP1024, "train.micro_batch_size=32"]))
    message = str(err.value)
    assert "train.micro_batch_size=32" in message
    assert "train.mini_batch_size=256 / world size 16 (16 training ranks) = 16 samples" in message
    assert "Lower train.micro_batch_size to 16 or fewer" in message
    assert "raise train.mini_batch_size to one of {512, 1024}" in message  # 32 x 16 ranks
    for fix in ("train.micro_batch_size=16", "train.mini_batch_size=512"):
        check_config(load_config("tiny-arith", [*STEP1024, "train.micro_batch_size=32", fix]))
    # mini-batches of the whole step cannot grow: the step itself must
    with pytest.raises(ConfigError, match=r"raise data\.batch_size x rollout\.n \(now 128\)"):
        check_config(load_config("tiny-arith", [*GPU16, "train.mini_batch_size=null"]))
    # train.micro_batch_tokens replaces it, so it is not checked then
    check_config(load_config("tiny-arith", [*GPU16, "train.micro_batch_tokens=4096"]))


def test_micro_batch_must_divide_a_ranks_share():
    with pytest.raises(ConfigError) as err:
        check_config(load_config("tiny-arith", [*STEP1024, "train.micro_batch_size=6"]))
    message = str(err.value)
    assert "train.micro_batch_size=6 does not divide a rank's share of" in message
    assert "= 16 samples" in message and "{1, 2, 4, 8, 16}" in message


def test_mini_batch_not_splitting_over_the_ranks_shows_the_division():
    with pytest.raises(ConfigError) as err:
        check_config(load_config("tiny-arith", ["cluster.nodes=3"]))
    assert "equal contiguous block" in str(err.value) and "64 / 3 = 21.3" in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["rollout.engine=server", "rollout.server_url=http://gen:8000", "rollout.replicas=2"],
            r"rollout\.replicas=2 with rollout\.engine=server.*allows 1 replica.*"
            r"rollout\.replicas=1",
        ),
        (
            ["rollout.placement=driver", "cluster.nodes=2"],
            r"rollout\.placement=driver .* allows 1 training rank and 1 replica, but the run "
            r"has 2 training ranks .* Set rollout\.placement=auto or actor",
        ),
        (
            ["rollout.placement=driver", "rollout.replicas=2"],
            r"has 2 replicas \(rollout\.replicas=2\)\. Set rollout\.placement=auto or actor .* "
            r"or rollout\.replicas=1",
        ),
        (
            [*GPU16, "train.micro_batch_size=4", "rollout.tensor_parallel_size=3"],
            r"rollout\.tensor_parallel_size=3 must divide the 8 training ranks per node.*"
            r"\{1, 2, 4, 8\}",
        ),
        (
            [
                *GPU16,
                "train.micro_batch_size=4",
                "rollout.tensor_parallel_size=4",
                "rollout.replicas=5",
            ],
            r"rollout\.replicas=5 x rollout\.tensor_parallel_size=4 = 20 GPUs.* there are 16 "
            r".* Set rollout\.replicas to 4 or fewer",
        ),
        (
            [
                *GPU16,
                "train.micro_batch_size=4",
                "rollout.tensor_parallel_size=4",
                "rollout.replicas=3",
            ],
            r"replica 1 the GPUs of training ranks 5-8 .* on two nodes .* rollout\.replicas "
            r"in \{1, 2, 4\}",
        ),
        (
            [*DEDICATED, "rollout.gpus=8"],
            r"rollout\.gpus=8 keeps 8 of a node's 8 GPUs .* Set rollout\.gpus to 7 or fewer",
        ),
        (
            [*DEDICATED, "rollout.tensor_parallel_size=2"],
            r"rollout\.tensor_parallel_size=2 spreads a replica over 2 GPUs .* more than the "
            r"rollout\.gpus=1 .* Raise rollout\.gpus to 2",
        ),
        (
            [*DEDICATED, "rollout.replicas=2"],
            r"rollout\.replicas=2 puts 2 replicas on a node .* more than the rollout\.gpus=1 "
            r"per node\. Set rollout\.replicas to 1 or fewer",
        ),
    ],
)
def test_replicas_that_do_not_fit_their_placement_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(load_config("tiny-arith", overrides))


def test_replicas_by_default_fit_and_spread_over_the_nodes():
    colocated = load_config("tiny-arith", [*GPU16, "train.micro_batch_size=4"])
    check_config(colocated)
    assert (colocated.rollout_replicas, replicas_per_node(colocated)) == (16, 8)
    tp4 = load_config(
        "tiny-arith", [*GPU16, "train.micro_batch_size=4", "rollout.tensor_parallel_size=4"]
    )
    check_config(tp4)
    assert replica_nodes(tp4) == [0, 0, 1, 1]
    two = tp4.model_copy(update={"rollout": tp4.rollout.model_copy(update={"replicas": 2})})
    check_config(two)  # ranks 0-3 and 8-11: one replica per node
    assert replica_nodes(two) == [0, 1]
    overrides = [*DEDICATED, "cluster.nodes=2", "rollout.gpus=2", "data.batch_size=24"]
    dedicated = load_config("tiny-arith", overrides)  # 12 ranks, 16 samples each
    check_config(dedicated)
    assert (dedicated.rollout_replicas, replica_nodes(dedicated)) == (4, [0, 0, 1, 1])


def test_node_memory_checkpoints_are_allowed_across_nodes():
    cfg = load_config("tiny-arith", ["cluster.nodes=2", "checkpoint.memory.every=5"])
    assert derive(cfg).world_size == 2  # each node keeps its part and its peer's copy


def test_staleness_takes_decoupled_ppo_unless_told_and_refuses_no_correction():
    assert load_config("tiny-arith", ["rollout.max_staleness=3"]).algo.correction == "decoupled"
    assert load_config("tiny-arith", []).algo.correction == "none"
    tis = load_config("tiny-arith", ["rollout.max_staleness=1", "algo.tis_cap=2.0"])
    assert tis.algo.correction == "tis"
    cfg = load_config("tiny-arith", ["rollout.max_staleness=1", "algo.correction=none"])
    with pytest.raises(ConfigError, match=r"algo.correction=none") as err:
        derive(cfg)
    assert "algo.old_logprobs=engine" in str(err.value)
    fixed = ["rollout.max_staleness=1", "algo.correction=none", "algo.old_logprobs=engine"]
    derive(load_config("tiny-arith", fixed))
    with pytest.raises(ConfigError, match=r"rollout.max_staleness"):
        load_config("tiny-arith", ["rollout.max_staleness=65"])


def test_stream_keys_without_staleness_are_refused_and_the_band_must_hold_one():
    cfg = load_config("tiny-arith", ["rollout.partial_rollout_tokens=8"])
    with pytest.raises(ConfigError, match=r"rollout.partial_rollout_tokens=8 would be ignored"):
        derive(cfg)
    with pytest.raises(ConfigError, match=r"algo.is_band"):
        derive(load_config("tiny-arith", ["algo.is_band=[1.5, 2.0]"]))
    with pytest.raises(ConfigError, match=r"algo.is_band=.* would be ignored"):
        derive(load_config("tiny-arith", ["algo.is_band=[0.2, 5.0]"]))  # correction none
    with pytest.raises(ConfigError, match=r"algo.tis_cap=3.0 would be ignored"):
        derive(load_config("tiny-arith", ["algo.tis_cap=3", "algo.correction=m2po"]))
    derive(load_config("tiny-arith", ["algo.is_band=[0.2, 5.0]", "algo.correction=token_mask"]))


# --- keys from verl and TRL, and every bad key at once ----------------------------


def _error(overrides: list[str], recipe: str | dict = "tiny-arith") -> str:
    with pytest.raises(ConfigError) as err:
        load_config(recipe, overrides)
    return str(err.value)


def test_every_verl_and_trl_key_given_as_an_override_names_its_grouprl_key():
    for alias in ALIASES:
        text = _error([f"{alias.key}=1"], recipe={})  # a mapping: no YAML to read
        assert f"'{alias.key}' in override" in text and f"{alias.framework}'s key" in text, text
        assert _names_grouprl_keys(alias, text), text


def _names_grouprl_keys(alias, text: str) -> bool:
    if not alias.grouprl:
        return "grouprl has no equivalent" in text
    *first, last = alias.grouprl
    listed = f"keys are {', '.join(first)} and {last}" if first else f"key is {last}"
    return f"grouprl's {listed}" in text


def test_verl_keys_given_bare_name_the_same_grouprl_key():
    leaves = Counter(alias.leaf for alias in ALIASES)
    for alias in ALIASES:
        if alias.framework != "verl" or leaves[alias.leaf] > 1 or "." not in alias.key:
            continue
        text = _error([f"{alias.leaf}=1"], recipe={})
        assert f"it is verl's {alias.key}" in text and _names_grouprl_keys(alias, text), text


def test_alias_targets_are_grouprl_keys():
    paths = set(all_paths(RunConfig))
    assert [(a.key, t) for a in ALIASES for t in a.grouprl if t not in paths] == []
    assert [a.key for a in ALIASES if a.key in paths] == []  # a grouprl key is no alias
    assert len({a.key for a in ALIASES}) == len(ALIASES)  # one entry per key


def test_foreign_keys_get_the_grouprl_key_not_a_lookalike():
    text = _error(["algo.adv_estimator=grpo"])
    assert "algo.name" in text and "algo.advantage" in text and "kl_estimator" not in text
    text = _error(["num_generations=8"])
    assert "rollout.n" in text and "num_iterations" not in text
    text = _error(["ppo_mini_batch_size=32"])
    assert "train.mini_batch_size" in text
    assert "verl counts prompts, grouprl counts samples" in text and "x rollout.n" in text


def test_every_bad_key_of_recipes_and_overrides_comes_in_one_error(tmp_path):
    (tmp_path / "base.yaml").write_text("extends: tiny-arith\ntrainer: {save_freq: 5}\n")
    recipe = write_recipe(
        tmp_path,
        f"extends: {tmp_path / 'base.yaml'}\n"
        "actor_rollout_ref:\n  rollout: {n: 8}\n  actor: {use_torch_compile: true}\n"
        "train: {micro_batch: 4}\n",
    )
    text = _error(["num_generations=8", "rollout.temprature=1", "rollout.n"], recipe=recipe)
    assert text.startswith("7 problems in the recipe and overrides:"), text
    assert "'trainer.save_freq' in recipe" in text and "checkpoint.disk.every" in text
    assert "'actor_rollout_ref.rollout.n' in recipe" in text and "rollout.n" in text
    assert "It holds actor_rollout_ref.actor.use_torch_compile" in text
    assert "'train.micro_batch'" in text and "train.micro_batch_size" in text
    assert "'num_generations' in override" in text
    assert "Did you mean rollout.temperature" in text
    assert "'rollout.n' is not of the form key.sub=value" in text


# --- keys grouprl renamed: they still work, with a hint naming the new key -------------


def test_every_renamed_key_still_works_as_an_override_with_a_hint(caplog):
    values = {"corpus": "idx", "turn_reward": "none", "memory_mb": 512}
    for alias in RENAMED:
        value = values.get(alias.key.rpartition(".")[2], 3)
        overrides = [f"{alias.key}={value}"]
        if alias.key.startswith("env.agent_"):
            overrides.insert(0, "env.agent=agent.py:solve")  # its block needs the agent
        caplog.clear()
        cfg = load_config("tiny-arith", overrides)
        (new,) = alias.grouprl
        section, _, leaf = new.rpartition(".")
        node = cfg
        for part in section.split("."):
            node = getattr(node, part)
        assert (node[leaf] if isinstance(node, dict) else getattr(node, leaf)) == value, new
        assert f"{alias.key} (in override '{alias.key}={value}') is now {new}" in caplog.text


def test_renamed_keys_in_a_recipe_and_from_python_move_to_their_blocks(tmp_path, caplog):
    recipe = write_recipe(
        tmp_path,
        "extends: tiny-arith\nreward: {timeout_s: 3, workers: 1}\n"
        "env: {agent: agent.py:solve, agent_timeout_s: 9, workers: 0, memory_mb: null}\n",
    )
    cfg = load_config(recipe, [])
    assert (cfg.reward.sandbox.timeout_s, cfg.reward.sandbox.workers) == (3.0, 1)
    assert cfg.reward.sandbox.memory_mb == 4096  # unset keys keep the reward's defaults
    assert (cfg.env.agent.name, cfg.env.agent.timeout_s) == ("agent.py:solve", 9.0)
    assert (cfg.env.sandbox.workers, cfg.env.sandbox.memory_mb) == (0, None)
    assert cfg.env.sandbox.timeout_s == 30.0  # the environment's own default
    assert f"reward.timeout_s (in recipe {recipe}) is now reward.sandbox.timeout_s" in caplog.text
    env = EnvConfig(name="search_qa", workers=3, search_k=2, tool_max_chars=100)
    assert (env.sandbox.workers, env.args) == (3, {"k": 2, "max_chars": 100})
    assert "env.search_k (in a section given from Python) is now env.args.k" in caplog.text
    assert RewardConfig(memory_mb=512).sandbox.model_dump() == {
        "workers": 2,
        "memory_mb": 512,
        "memory_limit": "rss",
        "timeout_s": 10.0,
        "require_isolation": False,
    }


def test_a_key_set_under_its_old_and_new_name_is_refused(tmp_path):
    recipe = write_recipe(tmp_path, "env: {workers: 1, sandbox: {workers: 2}}\n")
    text = _error([], recipe=recipe)
    assert "env.workers and env.sandbox.workers" in text and "remove env.workers" in text
    with pytest.raises(ValueError, match="the same key"):
        RewardConfig(timeout_s=1, sandbox={"timeout_s": 2})


def test_renamed_keys_name_grouprl_keys_and_are_no_longer_keys():
    paths = set(all_paths(RunConfig))
    for alias in RENAMED:
        (new,) = alias.grouprl
        assert new in paths or new.startswith("env.args."), new
        assert alias.key not in paths, alias.key
    assert not {a.key for a in RENAMED} & {a.key for a in ALIASES}


def test_env_agent_is_short_for_its_block_and_env_args_take_single_keys():
    cfg = load_config(
        "tiny-arith", ["env.agent=a.py:solve", "env.agent.concurrency=4", "env.args.k=3"]
    )
    assert cfg.env.agent.model_dump() == {
        "name": "a.py:solve",
        "timeout_s": 600.0,
        "concurrency": 4,
    }
    assert cfg.env.args == {"k": 3}
    assert "no agent is named (env.agent.name)" in _error(["env.agent.timeout_s=5"])


def test_reward_functions_always_run_in_workers():
    text = _error(["reward.sandbox.workers=0"])
    assert "reward functions always run in worker processes" in text
    assert load_config("tiny-arith", ["env.sandbox.workers=0"]).env.sandbox.workers == 0


def test_convert_reads_the_alias_table_for_every_verl_key():
    by_key = {alias.key: alias for alias in VERL}
    assert set(RULES) <= set(by_key)  # a rule translates a key of the table
    assert [k for k in RULES if by_key[k].same] == []  # copied or translated, not both
    assert all(len(a.grouprl) == 1 for a in VERL if a.same)  # copied to one key


def test_the_algo_section_has_every_key_the_algo_protocols_read():
    from grouprl.algo.advantages import EstimatorParams
    from grouprl.algo.objective import ObjectiveParams

    for protocol in (EstimatorParams, ObjectiveParams):
        keys = {k for k in dir(protocol) if isinstance(getattr(protocol, k), property)}
        assert keys and keys <= set(AlgoConfig.model_fields), protocol


def test_migration_doc_holds_the_alias_table_and_links_the_departures():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "migration.md").read_text()
    for framework in ("verl", "TRL", "grouprl"):  # grouprl: its renamed keys
        block = f"<!-- aliases:{framework} -->\n{markdown_table(framework)}<!-- /aliases:"
        assert block in doc, f"run python scripts/migration_tables.py ({framework})"
    assert "(algorithms.md#departures-from-trl-and-verl-and-the-switch-for-each)" in doc


VERL_GRPO = """
algorithm: {adv_estimator: grpo, use_kl_in_reward: false}
data: {train_files: train.parquet, val_files: test.parquet, train_batch_size: 1024,
       max_prompt_length: 512, max_response_length: 1024, truncation: error}
actor_rollout_ref:
  model: {path: Qwen/Qwen2-7B-Instruct, use_remove_padding: true}
  actor: {optim: {lr: 1.0e-6}, ppo_mini_batch_size: 256, ppo_micro_batch_size_per_gpu: 40,
          use_kl_loss: true, kl_loss_coef: 0.001, kl_loss_type: low_var_kl, entropy_coeff: 0}
  rollout: {name: vllm, n: 5, tensor_model_parallel_size: 2, max_model_len: null}
critic: {optim: {lr: 1.0e-5}}
trainer: {critic_warmup: 0, logger: [console, wandb], project_name: p, experiment_name: e,
          n_gpus_per_node: 8, nnodes: 1, save_freq: -1, test_freq: 5, total_epochs: 15}
"""


def test_verl_config_converts_with_its_units_and_lists_what_it_leaves(tmp_path):
    (tmp_path / "verl.yaml").write_text(VERL_GRPO)
    path, converted = convert_file(str(tmp_path / "verl.yaml"), out=str(tmp_path / "r.yaml"))
    cfg = load_config(str(path), [])
    assert (cfg.name, cfg.data.batch_size, cfg.rollout.n) == ("e", 1024, 5)
    assert (cfg.train.mini_batch_size, cfg.train.micro_batch_size) == (1280, 40)  # 256 x n=5
    assert (cfg.algo.name, cfg.algo.beta, cfg.algo.kl_in, cfg.algo.kl_estimator) == (
        "grpo", 0.001, "loss", "k3"
    )  # fmt: skip
    assert cfg.data.train.source == "train.parquet" and cfg.data.eval.limit is None
    assert (cfg.data.prompt_key, cfg.data.answer_key) == ("prompt", "reward_model.ground_truth")
    assert cfg.rollout.max_model_len == 1536 and cfg.rollout.tensor_parallel_size == 2
    assert cfg.checkpoint.disk.every is None and cfg.trainer.eval_every == 5
    assert (cfg.train.epochs, cfg.train.packing, cfg.metrics.wandb.project) == (15, True, "p")
    assert cfg.critic is None  # no critic.model.path: the critic keys are left out
    left = {key for key, _, _ in converted.left}
    assert {"data.truncation", "critic.lr"} <= left
    assert f"{AR}.actor.entropy_coeff" not in left and cfg.algo.entropy_coef == 0  # the same key


def test_verl_ppo_with_adaptive_kl_in_the_reward_converts():
    converted = convert_verl(
        {
            "algorithm": {
                "adv_estimator": "gae",
                "use_kl_in_reward": True,
                "kl_penalty": "kl",
                "kl_ctrl": {"type": "adaptive", "kl_coef": 0.02, "target_kl": 0.05},
            },
            "critic": {"model": {"path": "Qwen/Qwen2.5-0.5B"}, "cliprange_value": 0.5},
            "actor_rollout_ref": {
                "actor": {"clip_ratio": 0.3, "loss_agg_mode": "seq-mean-token-sum"}
            },
        }
    )
    algo, critic = converted.recipe["algo"], converted.recipe["critic"]
    assert algo == {
        "name": "ppo",
        "clip_eps_low": 0.3,
        "clip_eps_high": 0.3,
        "beta": 0.02,
        "kl_in": "reward",
        "kl_estimator": "k1",
        "kl_target": 0.05,
    }
    assert critic == {"path": "Qwen/Qwen2.5-0.5B", "value_clip": 0.5}
    assert [key for key, _, _ in converted.left] == [f"{AR}.actor.loss_agg_mode"]  # sum: none
