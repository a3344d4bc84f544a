"""verl's and TRL's config keys, and the grouprl key each one becomes. Imports no torch.

One entry per foreign key, as its framework writes it: verl's full dotted path
(``actor_rollout_ref.rollout.n``, the keys of ``verl.trainer.main_ppo``'s config) and
TRL's ``GRPOConfig`` / ``TrainingArguments`` field names (``num_generations``), plus the
few TRL script arguments (``ModelConfig``, ``ScriptArguments``) a GRPO script sets.

The unknown-key error (``config/key_hints.py``) looks a bad key up here before it guesses
by spelling, so it names the grouprl key and any change of unit. ``grouprl convert``
(``config/convert.py``) reads the same table: an entry marked ``same`` is copied to its
grouprl key, the others go through convert's rules. docs/migration.md's tables are this
table (``scripts/migration_tables.py`` writes them; a test checks that they agree).
``grouprl`` is empty where grouprl has no equivalent; the note then says what to do
instead. (grouprl's own renamed keys: ``config/renamed.py``.)
"""

from __future__ import annotations

from grouprl.config.renamed import RENAMED, Alias

AR = "actor_rollout_ref"


def _v(key: str, grouprl: str | tuple[str, ...] = (), note: str = "", *, same=False) -> Alias:
    targets = (grouprl,) if isinstance(grouprl, str) else grouprl
    return Alias(key=key, framework="verl", grouprl=targets, note=note, same=same)


def _t(key: str, grouprl: str | tuple[str, ...] = (), note: str = "") -> Alias:
    targets = (grouprl,) if isinstance(grouprl, str) else grouprl
    return Alias(key=key, framework="TRL", grouprl=targets, note=note)


# fmt: off
VERL: tuple[Alias, ...] = (
    # data
    _v("data.train_batch_size", "data.batch_size", "prompts per step in both", same=True),
    _v("data.train_files", "data.train",
       "data.train=FILE (the same as {source: FILE}); a verl parquet loads as-is; a list of "
       "files, data.train=[a.parquet,b.parquet], is read in order as one table"),
    _v("data.val_files", "data.eval", "data.eval=FILE, or a list of files"),
    _v("data.max_prompt_length", "data.max_prompt_tokens",
       "tokens in both; a longer prompt is skipped and reported, never truncated", same=True),
    _v("data.max_response_length", "rollout.max_tokens",
       "tokens per completion; rollout.max_model_len must hold prompt + completion", same=True),
    _v("data.filter_overlong_prompts", (),
       "always on: prompts longer than data.max_prompt_tokens are skipped and reported"),
    _v("data.truncation", (),
       "prompts are never truncated; longer ones are skipped (data.max_prompt_tokens)"),
    _v("data.val_batch_size", (),
       "validation generates for the whole data.eval split (data.eval.limit rows) at once"),
    _v("data.return_raw_chat", (),
       "not needed: prompts are rendered with the model's chat template"),
    _v("data.gen_batch_size", (),
       "each dynamic-sampling round draws data.batch_size prompts; algo.max_sampling_rounds caps "
       "the rounds"),
    _v("data.reward_fn_key", (),
       "reward.functions score every row; route by a column inside your own function (it gets "
       "the row)"),
    # the policy model
    _v(f"{AR}.model.path", "model.path", same=True),
    _v(f"{AR}.model.trust_remote_code", "model.trust_remote_code", same=True),
    _v(f"{AR}.model.enable_gradient_checkpointing", "train.activation_checkpointing",
       "verl's default true, grouprl's false", same=True),
    _v(f"{AR}.model.use_remove_padding", "train.packing",
       "padding-free micro-batches; the update is the same either way", same=True),
    _v(f"{AR}.model.lora_rank", "train.lora.rank", "0 trains every weight in both", same=True),
    _v(f"{AR}.model.lora_alpha", "train.lora.alpha", "verl's default 16, grouprl's 32", same=True),
    _v(f"{AR}.model.target_modules", "train.lora.target_modules", same=True),
    # the actor: batches
    _v(f"{AR}.actor.strategy", (),
       "training is always FSDP2 (in one process, without Ray, for a single rank)"),
    _v(f"{AR}.actor.ppo_mini_batch_size", "train.mini_batch_size",
       "verl counts prompts, grouprl counts samples: set train.mini_batch_size = "
       "ppo_mini_batch_size x rollout.n (e.g. 32 prompts x n=8 -> 256)"),
    _v(f"{AR}.actor.ppo_micro_batch_size_per_gpu", "train.micro_batch_size",
       "samples per forward/backward pass on each rank in both", same=True),
    _v(f"{AR}.actor.ppo_micro_batch_size", "train.micro_batch_size",
       "verl's deprecated global count; grouprl's is per rank: divide it by the number of "
       "training GPUs"),
    _v(f"{AR}.actor.use_dynamic_bsz", "train.micro_batch_tokens",
       "set the token budget itself (null: micro-batches by rows)"),
    _v(f"{AR}.actor.ppo_max_token_len_per_gpu", "train.micro_batch_tokens",
       "tokens per forward/backward pass on each rank"),
    _v(f"{AR}.actor.ppo_epochs", "algo.num_iterations", "passes over each batch (mu)", same=True),
    _v(f"{AR}.actor.shuffle", (), "mini-batches are taken in order"),
    # the actor: the loss
    _v(f"{AR}.actor.clip_ratio", ("algo.clip_eps_low", "algo.clip_eps_high"), "set both"),
    _v(f"{AR}.actor.clip_ratio_low", "algo.clip_eps_low", same=True),
    _v(f"{AR}.actor.clip_ratio_high", "algo.clip_eps_high", same=True),
    _v(f"{AR}.actor.clip_ratio_c", "algo.dual_clip_c",
       "verl applies dual clip with c=3 by default; grouprl's default null turns it off",
       same=True),
    _v(f"{AR}.actor.loss_agg_mode", "algo.loss_agg",
       "token-mean -> token_mean, seq-mean-token-mean -> seq_mean_token_mean, "
       "seq-mean-token-sum-norm -> seq_mean_token_sum_norm (its constant: algo.norm_tokens, "
       "default rollout.max_tokens); seq-mean-token-sum has none"),
    _v(f"{AR}.actor.policy_loss.loss_mode", "algo.policy_loss",
       "vanilla -> ppo_clip, gspo -> gspo (or algo.name=gspo), clip_cov -> clip_cov, "
       "kl_cov -> kl_cov; the others have none"),
    _v(f"{AR}.actor.policy_loss.clip_cov_ratio", "algo.cov_ratio", same=True),
    _v(f"{AR}.actor.policy_loss.clip_cov_lb", "algo.clip_cov_bounds", "its first entry"),
    _v(f"{AR}.actor.policy_loss.clip_cov_ub", "algo.clip_cov_bounds", "its second entry"),
    _v(f"{AR}.actor.policy_loss.kl_cov_ratio", "algo.cov_ratio", same=True),
    _v(f"{AR}.actor.policy_loss.ppo_kl_coef", "algo.kl_cov_coef", same=True),
    _v(f"{AR}.actor.entropy_coeff", "algo.entropy_coef",
       "0 in both; the policy's entropy is logged every step (`entropy`)", same=True),
    _v(f"{AR}.actor.use_kl_loss", ("algo.beta", "algo.kl_in"),
       "KL in the loss is algo.kl_in=loss (the default) with algo.beta > 0; algo.beta=0 turns it "
       "off and loads no reference model"),
    _v(f"{AR}.actor.kl_loss_coef", "algo.beta", "with algo.kl_in=loss"),
    _v(f"{AR}.actor.kl_loss_type", "algo.kl_estimator",
       "low_var_kl -> k3, kl -> k1, mse -> k2; abs and full have none"),
    _v(f"{AR}.actor.tis_imp_ratio_cap", "algo.tis_cap",
       "token-level truncated importance weights min(pi_trainer / pi_engine, cap); set alone it "
       "chooses algo.correction=tis", same=True),
    # the actor: optimizer and memory
    _v(f"{AR}.actor.optim.lr", "train.lr", same=True),
    _v(f"{AR}.actor.optim.lr_warmup_steps", "train.warmup_steps",
       "verl's -1 (use the ratio) has none: give steps"),
    _v(f"{AR}.actor.optim.lr_warmup_steps_ratio", "train.warmup_steps",
       "a fraction there, steps here: ratio x train.steps"),
    _v(f"{AR}.actor.optim.warmup_style", "train.lr_schedule", "constant or cosine"),
    _v(f"{AR}.actor.optim.lr_scheduler_type", "train.lr_schedule", "constant or cosine"),
    _v(f"{AR}.actor.optim.min_lr_ratio", "train.min_lr_ratio", same=True),
    _v(f"{AR}.actor.optim.weight_decay", "train.weight_decay", "verl's default 0.01, grouprl's 0",
       same=True),
    _v(f"{AR}.actor.optim.betas", "train.betas",
       "verl's default [0.9, 0.999], grouprl's [0.9, 0.99]", same=True),
    _v(f"{AR}.actor.optim.clip_grad", "train.max_grad_norm", same=True),
    _v(f"{AR}.actor.grad_clip", "train.max_grad_norm", same=True),
    _v(f"{AR}.actor.fsdp_config.param_offload", "cluster.offload",
       "weights, gradients and optimizer states together", same=True),
    _v(f"{AR}.actor.fsdp_config.optimizer_offload", "cluster.offload_optimizer", same=True),
    _v(f"{AR}.actor.ulysses_sequence_parallel_size", (),
       "no sequence parallelism: bound activations with train.micro_batch_tokens or "
       "train.activation_checkpointing"),
    # the reference model
    _v(f"{AR}.ref.log_prob_micro_batch_size_per_gpu", "train.micro_batch_size",
       "reference passes use the training micro-batches"),
    _v(f"{AR}.ref.fsdp_config.param_offload", "cluster.offload",
       "the reference is sharded and offloaded like the policy"),
    # the rollout
    _v(f"{AR}.rollout.name", "rollout.engine",
       "vllm -> vllm, hf -> hf, an external vLLM server -> server; sglang has none"),
    _v(f"{AR}.rollout.mode", "rollout.max_staleness",
       "verl's async agent loop has no equivalent; rollout.max_staleness=k streams rollouts "
       "up to k weight versions ahead of training (docs/async.md)"),
    _v(f"{AR}.rollout.n", "rollout.n", "samples per prompt (the group size)", same=True),
    _v(f"{AR}.rollout.temperature", "rollout.temperature", same=True),
    _v(f"{AR}.rollout.top_p", "rollout.top_p", same=True),
    _v(f"{AR}.rollout.top_k", "rollout.top_k", "-1 disables it in both", same=True),
    _v(f"{AR}.rollout.prompt_length", "data.max_prompt_tokens", same=True),
    _v(f"{AR}.rollout.response_length", "rollout.max_tokens", same=True),
    _v(f"{AR}.rollout.max_model_len", "rollout.max_model_len", same=True),
    _v(f"{AR}.rollout.gpu_memory_utilization", "rollout.gpu_memory_utilization",
       "vLLM's share of GPU memory in both: verl's default 0.5, grouprl's 0.4", same=True),
    _v(f"{AR}.rollout.tensor_model_parallel_size", "rollout.tensor_parallel_size",
       "GPUs per engine: verl's default 2, grouprl's 1", same=True),
    _v(f"{AR}.rollout.dtype", "model.dtype", "one dtype for training passes and engine"),
    _v(f"{AR}.rollout.ignore_eos", "rollout.ignore_eos", same=True),
    _v(f"{AR}.rollout.log_prob_micro_batch_size_per_gpu", "train.micro_batch_size",
       "logprob passes use the training micro-batches"),
    _v(f"{AR}.rollout.enforce_eager", (), "vLLM's defaults are kept"),
    _v(f"{AR}.rollout.free_cache_engine", (),
       "a colocated engine always sleeps (frees its memory) while its GPU trains"),
    _v(f"{AR}.rollout.calculate_log_probs", (),
       "the engine's logprobs are always kept (engine_logprob_gap, algo.tis_cap, "
       "algo.old_logprobs=engine use them)"),
    _v(f"{AR}.rollout.val_kwargs.temperature", "rollout.eval_temperature",
       "0 (greedy) by default in both", same=True),
    _v(f"{AR}.rollout.val_kwargs.n", (), "validation samples one completion per prompt"),
    _v(f"{AR}.rollout.multi_turn.enable", "env.name",
       "multi-turn tool use is an environment: env.name=search_qa"),
    _v(f"{AR}.rollout.multi_turn.max_assistant_turns", "env.max_turns", same=True),
    # the critic
    _v("critic.model.path", "critic.path", same=True),
    _v("critic.optim.lr", "critic.lr", same=True),
    _v("critic.optim.weight_decay", "critic.weight_decay", same=True),
    _v("critic.cliprange_value", "critic.value_clip", "verl's default 0.5, grouprl's 0.2",
       same=True),
    _v("critic.grad_clip", "critic.max_grad_norm", same=True),
    _v("critic.ppo_micro_batch_size_per_gpu", "train.micro_batch_size",
       "the critic trains on the policy's micro-batches"),
    _v("critic.ppo_mini_batch_size", "train.mini_batch_size",
       "the critic's mini-batches are the policy's, in samples (verl: prompts)"),
    _v("critic.ppo_epochs", "algo.num_iterations", "the critic follows the policy's"),
    _v("trainer.critic_warmup", "critic.warmup_steps", same=True),
    # the algorithm
    _v("algorithm.adv_estimator", ("algo.name", "algo.advantage"),
       "algo.name picks a preset (estimator and loss); algo.advantage the estimator alone: gae "
       "-> algo.name=ppo (with a critic), grpo -> grpo, rloo -> rloo, reinforce_plus_plus -> "
       "reinforce_pp, reinforce_plus_plus_baseline -> algo.advantage=reinforce_pp_baseline; "
       "remax, opo and gpg have none"),
    _v("algorithm.norm_adv_by_std_in_grpo", "algo.scale_by_std", same=True),
    _v("algorithm.gamma", "algo.gamma", same=True),
    _v("algorithm.lam", "algo.gae_lambda", same=True),
    _v("algorithm.use_kl_in_reward", "algo.kl_in", "true -> algo.kl_in=reward"),
    _v("algorithm.kl_penalty", "algo.kl_estimator", "kl -> k1, mse -> k2, low_var_kl -> k3"),
    _v("algorithm.kl_ctrl.kl_coef", "algo.beta",
       "one coefficient for the loss or the reward (algo.kl_in); verl keeps one per place"),
    _v("algorithm.kl_ctrl.type", "algo.kl_target",
       "adaptive: set algo.kl_target; fixed: leave it null"),
    _v("algorithm.kl_ctrl.target_kl", "algo.kl_target"),
    _v("algorithm.kl_ctrl.horizon", "algo.kl_horizon", same=True),
    _v("algorithm.filter_groups.enable", "algo.dynamic_sampling", same=True),
    _v("algorithm.filter_groups.max_num_gen_batches", "algo.max_sampling_rounds",
       "generation rounds per step; verl's 0 (unlimited) has none"),
    _v("algorithm.rollout_correction.rollout_is_threshold", ("algo.tis_cap", "algo.correction"),
       "the cap of algo.correction=tis (rollout_is=token) or seq_tis (rollout_is=sequence); "
       "Seq-MIS (rollout_rs=seq_sum_k1, band 0.5_2.0) is algo.correction=seq_mask with "
       "algo.is_band, token_k1 rejection is token_mask"),
    _v("algorithm.rollout_correction.bypass_old_logprob_for_rollout", "algo.old_logprobs",
       "true -> algo.old_logprobs=engine"),
    # rewards
    _v("custom_reward_function.path", "reward.functions",
       "reward.functions=[{name: FILE.py:FUNCTION}]"),
    _v("custom_reward_function.name", "reward.functions",
       "reward.functions=[{name: FILE.py:FUNCTION}]"),
    _v("reward_model.enable", (),
       "no learned reward model: rewards are functions (reward.functions)"),
    _v("reward_model.reward_manager", (), "reward.functions score each sample"),
    _v("reward_model.overlong_buffer.enable", "algo.overlong_buffer",
       "set the buffer's length; null turns it off"),
    _v("reward_model.overlong_buffer.len", "algo.overlong_buffer", "tokens in both"),
    _v("reward_model.overlong_buffer.penalty_factor", "algo.overlong_penalty"),
    # the trainer
    _v("trainer.total_epochs", "train.epochs", "or train.steps: exactly one is set"),
    _v("trainer.total_training_steps", "train.steps", "steps (batches) in both", same=True),
    _v("trainer.save_freq", "checkpoint.disk.every",
       "steps in both; verl's -1 is null (save at the end and on preemption)"),
    _v("trainer.test_freq", "trainer.eval_every",
       "steps in both; verl's -1 is null (validate before and after training)"),
    _v("trainer.val_before_train", "trainer.eval_before_train", same=True),
    _v("trainer.n_gpus_per_node", "cluster.gpus_per_node",
       "all of a node's GPUs in both; rollout.gpus of them may go to the engine", same=True),
    _v("trainer.nnodes", "cluster.nodes", same=True),
    _v("trainer.device", "train.device"),
    _v("trainer.default_local_dir", "trainer.run_dir",
       "checkpoints go to RUN_DIR/checkpoints (checkpoint.disk.dir)"),
    _v("trainer.resume_mode", "trainer.resume",
       "auto -> auto, disable -> never, resume_path -> the checkpoint's path; verl's default "
       "auto, grouprl's never"),
    _v("trainer.resume_from_path", "trainer.resume"),
    _v("trainer.max_actor_ckpt_to_keep", "checkpoint.disk.keep", same=True),
    _v("trainer.project_name", "metrics.wandb.project"),
    _v("trainer.experiment_name", "name", "the run's name (and its run directory's)", same=True),
    _v("trainer.logger", ("metrics.tensorboard", "metrics.wandb.project", "metrics.mlflow.enabled"),
       "console and metrics.jsonl always; wandb: set metrics.wandb.project; mlflow: "
       "metrics.mlflow.enabled=true"),
    _v("trainer.log_val_generations", "trainer.log_samples",
       "completions written per training step (samples.jsonl)", same=True),
    _v("trainer.balance_batch", (),
       "micro-batches split by rows, or by tokens with train.micro_batch_tokens"),
)


TRL: tuple[Alias, ...] = (
    # script arguments (trl's ModelConfig and ScriptArguments)
    _t("model_name_or_path", "model.path"),
    _t("dataset_name", "data.train", "data.train={source: NAME, split: train}"),
    _t("dataset_config", "data.train.subset"),
    _t("dataset_train_split", "data.train.split"),
    _t("dataset_test_split", "data.eval.split"),
    _t("use_peft", "train.lora.rank", "LoRA is on when train.lora.rank > 0"),
    _t("lora_r", "train.lora.rank"),
    _t("lora_alpha", "train.lora.alpha"),
    _t("lora_dropout", "train.lora.dropout"),
    _t("lora_target_modules", "train.lora.target_modules"),
    _t("model_init_kwargs", ("model.dtype", "model.trust_remote_code", "model.revision"),
       "torch_dtype/dtype -> model.dtype; trust_remote_code and revision keep their names"),
    # batches
    _t("num_generations", "rollout.n", "samples per prompt (the group size)"),
    _t("per_device_train_batch_size", "train.micro_batch_size",
       "samples per forward/backward pass on each rank in both"),
    _t("gradient_accumulation_steps", "train.mini_batch_size",
       "derived, not set: train.mini_batch_size = per_device_train_batch_size x processes x "
       "gradient_accumulation_steps (samples per optimizer step)"),
    _t("generation_batch_size", "data.batch_size",
       "TRL counts completions, grouprl prompts: data.batch_size = generation_batch_size / "
       "num_generations"),
    _t("steps_per_generation", "data.batch_size",
       "derived, not set: data.batch_size = per_device_train_batch_size x processes x "
       "steps_per_generation / num_generations (prompts)"),
    _t("num_iterations", "algo.num_iterations", "passes over each batch (mu)"),
    _t("shuffle_dataset", "data.shuffle"),
    _t("max_prompt_length", "data.max_prompt_tokens",
       "older TRL truncated prompts from the left; grouprl skips and reports them"),
    _t("max_completion_length", "rollout.max_tokens"),
    # the loss
    _t("beta", "algo.beta", "KL in the loss (algo.kl_in=loss) with k3, as TRL"),
    _t("epsilon", ("algo.clip_eps_low", "algo.clip_eps_high"),
       "TRL's epsilon sets both unless epsilon_high is set"),
    _t("epsilon_high", "algo.clip_eps_high"),
    _t("delta", "algo.dual_clip_c",
       "TRL caps the ratio at delta; for negative advantages that is dual clip with c = delta, "
       "and it changes nothing otherwise"),
    _t("loss_type", "algo.loss_agg",
       "dapo (TRL's default) -> token_mean (over the whole mini-batch), bnpo -> token_mean, grpo "
       "-> seq_mean_token_mean, dr_grpo -> seq_mean_token_sum_norm (algo.norm_tokens, default "
       "rollout.max_tokens); cispo, sapo and luspo have none"),
    _t("scale_rewards", ("algo.scale_by_std", "algo.adv_std", "algo.adv_eps"),
       "group/true -> true, none/false -> false; batch has none (nearest: "
       "algo.advantage=reinforce_pp_baseline, whitened over the batch's tokens); the std "
       "itself: TRL divides by the sample std (n - 1) + 1e-4, grouprl by default by the "
       "population std + 1e-6: algo.adv_std=sample algo.adv_eps=1e-4 gives TRL's"),
    _t("importance_sampling_level", "algo.policy_loss",
       "token -> ppo_clip, sequence -> gspo (or algo.name=gspo)"),
    _t("mask_truncated_completions", "algo.mask_truncated"),
    _t("use_bias_correction_kl", "algo.kl_bias_correction",
       "TRL 1.16 defaults it to on, grouprl's algo.kl_bias_correction to off: set "
       "algo.kl_bias_correction=true for TRL's KL gradient"),
    _t("top_entropy_quantile", "algo.top_entropy_quantile",
       "the same share, of each micro-batch's tokens (TRL: of each forward pass's)"),
    _t("sync_ref_model", (), "the reference model stays frozen"),
    _t("disable_dropout", (), "the model's own dropout settings are kept (0 in Qwen2.5)"),
    _t("reward_weights", "reward.functions",
       "a weight per function: reward.functions=[{name: F, weight: W}, ...]"),
    # generation
    _t("use_vllm", "rollout.engine", "true -> vllm, false -> hf (transformers generate)"),
    _t("vllm_mode", ("rollout.gpus", "rollout.engine"),
       "colocate -> rollout.gpus=0 (the default); server -> rollout.gpus=N (engines on GPUs of "
       "their own, started by grouprl) or rollout.engine=server"),
    _t("vllm_server_base_url", "rollout.server_url"),
    _t("vllm_server_host", "rollout.server_url", "one URL: http://HOST:PORT"),
    _t("vllm_server_port", "rollout.server_url", "one URL: http://HOST:PORT"),
    _t("vllm_gpu_memory_utilization", "rollout.gpu_memory_utilization",
       "TRL's default 0.3, grouprl's 0.4"),
    _t("vllm_tensor_parallel_size", "rollout.tensor_parallel_size"),
    _t("vllm_max_model_length", "rollout.max_model_len"),
    _t("vllm_enable_sleep_mode", (), "a colocated engine always sleeps while its GPU trains"),
    _t("vllm_importance_sampling_correction", "algo.correction",
       "on in TRL by default (sequence_mask, cap 3); grouprl's algo.correction=auto is none "
       "for a synchronous run (decoupled PPO with rollout.max_staleness > 0): set "
       "algo.correction to turn it on"),
    _t("vllm_importance_sampling_cap", ("algo.tis_cap", "algo.is_band"),
       "the cap of the token_truncate and sequence_truncate modes (algo.tis_cap), the band's "
       "top for token_mask and sequence_mask (algo.is_band=[low, high])"),
    _t("vllm_importance_sampling_mode", "algo.correction",
       "token_truncate -> tis, sequence_truncate -> seq_tis, token_mask -> token_mask, "
       "sequence_mask -> seq_mask (TRL's default; a sequence's ratio is the product of its "
       "tokens' in both)"),
    _t("temperature", "rollout.temperature"),
    _t("top_p", "rollout.top_p"),
    _t("top_k", "rollout.top_k", "TRL's 0 disables it; grouprl's -1 does"),
    _t("min_p", (), "not supported"),
    _t("repetition_penalty", (), "not supported"),
    _t("num_generations_eval", (), "validation samples one completion per prompt"),
    # optimizer and schedule (TrainingArguments)
    _t("learning_rate", "train.lr"),
    _t("lr_scheduler_type", "train.lr_schedule",
       "constant or cosine; TrainingArguments' default, linear, has none"),
    _t("warmup_steps", "train.warmup_steps",
       "optimizer steps there, training steps here (verl's: a step's mini-batches share a rate)"),
    _t("warmup_ratio", "train.warmup_steps", "a fraction of optimizer steps there, steps here"),
    _t("weight_decay", "train.weight_decay"),
    _t("adam_beta1", "train.betas", "train.betas=[beta1, beta2]"),
    _t("adam_beta2", "train.betas", "train.betas=[beta1, beta2]"),
    _t("max_grad_norm", "train.max_grad_norm"),
    _t("gradient_checkpointing", "train.activation_checkpointing",
       "GRPOConfig's default true, grouprl's false"),
    _t("bf16", "model.dtype", "true -> bfloat16 (model.dtype=auto picks it on GPUs)"),
    _t("seed", "train.seed"),
    # length, checkpoints, logging
    _t("num_train_epochs", "train.epochs"),
    _t("max_steps", "train.steps",
       "TRL counts optimizer steps, grouprl batches (one generation each): equal at TRL's "
       "default of one optimizer step per generation"),
    _t("save_steps", "checkpoint.disk.every", "steps; see max_steps for the unit"),
    _t("save_total_limit", "checkpoint.disk.keep"),
    _t("eval_steps", "trainer.eval_every"),
    _t("eval_strategy", "trainer.eval_every",
       "steps -> trainer.eval_every=N; no -> data.eval=null"),
    _t("output_dir", "trainer.run_dir"),
    _t("resume_from_checkpoint", "trainer.resume", "a checkpoint's path, or auto"),
    _t("report_to", ("metrics.tensorboard", "metrics.wandb.project", "metrics.mlflow.enabled"),
       "tensorboard -> metrics.tensorboard=true; wandb -> set metrics.wandb.project; mlflow -> "
       "metrics.mlflow.enabled=true"),
    _t("logging_steps", (), "every step is logged"),
    _t("log_completions", "trainer.log_samples", "completions per step in samples.jsonl"),
    _t("num_completions_to_print", "trainer.log_samples"),
)
# fmt: on


ALIASES: tuple[Alias, ...] = VERL + TRL


def markdown_table(framework: str) -> str:
    """docs/migration.md's table of ``framework``'s keys (`verl`, `TRL`, or `grouprl`: its
    renamed keys), one row each."""
    rows = [f"| {framework} key | grouprl key | notes |", "| --- | --- | --- |"]
    if framework == "grouprl":
        rows[0] = "| old key | new key | notes |"
    for alias in (*ALIASES, *RENAMED):
        if alias.framework == framework:
            keys = ", ".join(f"`{key}`" for key in alias.grouprl) or "none"
            rows.append(f"| `{alias.key}` | {keys} | {alias.note} |")
    return "\n".join(rows) + "\n"
