"""Training-step invariants on a small random Qwen2 model."""

import copy
from contextlib import nullcontext

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grouprl.config.algo_section import AlgoConfig
from grouprl.config.train import CriticConfig, TrainConfig
from grouprl.device import autocast_for
from grouprl.driver.batch import build_batch
from grouprl.types import Completion, Trajectory, Turn
from grouprl.workers.common import checkpoint_activations
from grouprl.workers.logprobs import TokenScorer, token_logprobs
from grouprl.workers.optim import make_optimizer, states_on_host
from grouprl.workers.rank import Rank
from grouprl.workers.update import MicroBatching, no_grad_scores, policy_update
from grouprl.workers.value_model import ValueScorer, critic_update, token_values


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg).float()


def _trajectories(n: int, seed: int = 0) -> list[Trajectory]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = int(torch.randint(3, 8, (1,), generator=g))
        c = int(torch.randint(1, 9, (1,), generator=g))
        ids = torch.randint(1, 97, (p + c,), generator=g).tolist()
        comp = Completion(token_ids=ids[p:], logprobs=[-1.0] * c, finish_reason="stop")
        out.append(
            Trajectory(prompt_index=i, prompt_ids=ids[:p], turns=[Turn(comp)], weight_version=0)
        )
    return out


def _with_advantages(batch, advantages_B):
    batch.advantages_BT = advantages_B[:, None] * batch.loss_mask_BT
    return batch


def test_chunked_logprobs_match_full_softmax(model):
    batch = build_batch(_trajectories(4), pad_id=0)
    lp_chunked, _, _ = token_logprobs(
        model,
        input_ids_BT=batch.input_ids_BT,
        attention_mask_BT=batch.attention_mask_BT,
        chunk_tokens=5,
    )
    logits = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
    full = (
        torch.log_softmax(logits.float(), -1)[:, :-1]
        .gather(-1, batch.input_ids_BT[:, 1:, None])
        .squeeze(-1)
    )
    mask = batch.attention_mask_BT[:, 1:].bool()
    torch.testing.assert_close(lp_chunked[:, 1:][mask], full[mask], rtol=1e-5, atol=1e-5)

    # and the gradient through the checkpointed chunks equals the plain one
    g1 = torch.autograd.grad(lp_chunked[:, 1:][mask].sum(), model.lm_head.weight)[0]
    lp2, _, _ = token_logprobs(
        model,
        input_ids_BT=batch.input_ids_BT,
        attention_mask_BT=batch.attention_mask_BT,
        chunk_tokens=5,
    )
    g2 = torch.autograd.grad(full[mask].sum(), model.lm_head.weight)[0]
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-6)
    del lp2


def test_tokens_are_scored_at_the_sampling_temperature(model):
    """log_softmax(logits / T) and the entropy of softmax(logits / T), gradients
    included (the chunk divides in place); T = 1 is the raw distribution."""
    batch = build_batch(_trajectories(4), pad_id=0)
    ids_BT, mask_BT = batch.input_ids_BT, batch.attention_mask_BT
    mask = mask_BT[:, 1:].bool()
    for temperature in (0.7, 1.0):
        scorer = TokenScorer(model, chunk_tokens=5, temperature=temperature)
        lp_BT, entropy_BT, _ = scorer(ids_BT, mask_BT)
        logits = model(input_ids=ids_BT, attention_mask=mask_BT).logits.float()[:, :-1]
        logp = (logits / temperature).log_softmax(-1)
        expected = logp.gather(-1, ids_BT[:, 1:, None]).squeeze(-1)
        torch.testing.assert_close(lp_BT[:, 1:][mask], expected[mask], rtol=1e-5, atol=1e-5)
        expected_entropy = -(logp.exp() * logp).sum(-1)
        torch.testing.assert_close(
            entropy_BT[:, 1:][mask], expected_entropy[mask].detach(), rtol=1e-5, atol=1e-5
        )
        got = torch.autograd.grad(lp_BT[:, 1:][mask].sum(), model.lm_head.weight)[0]
        want = torch.autograd.grad(expected[mask].sum(), model.lm_head.weight)[0]
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="temperature > 0"):
        token_logprobs(
            model, input_ids_BT=ids_BT, attention_mask_BT=mask_BT, chunk_tokens=5, temperature=0.0
        )


def _update(
    model,
    batch,
    *,
    micro: int,
    mini: int,
    iterations: int = 1,
    lr: float = 1.0,
    ckpt=False,
    packing: bool = False,
    tokens: int | None = None,
    autocast=nullcontext,
):
    # plain SGD: the parameter change is the (clipped) gradient itself, so the
    # comparison is not blurred by Adam's division by tiny second moments
    m = copy.deepcopy(model)
    if ckpt:
        checkpoint_activations(m)
        m.train()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    train = TrainConfig(
        micro_batch_size=micro,
        micro_batch_tokens=tokens,
        packing=packing,
        logprob_chunk_tokens=16,
    )
    metrics = policy_update(
        scorer=TokenScorer(m, chunk_tokens=16, packed=packing),
        optimizer=opt,
        batch=batch,
        algo=AlgoConfig(num_iterations=iterations),
        train=train,
        mini_batch_size=mini,
        autocast=autocast,
    )
    return m, metrics


def test_each_replicas_logprob_gap_is_its_own_and_an_odd_one_is_named(model, caplog):
    """Replica 1 samples with other weights (its logprobs are off by 0.5): its gap says
    so, replica 0's stays at the numerics', over mini-batches that hold one replica each."""
    from grouprl.driver.loop import _warn_of_odd_replicas

    trajectories = _trajectories(8, seed=3)
    for b, t in enumerate(trajectories):
        t.completion.replica = b // 4
    batch = build_batch(trajectories, pad_id=0)
    with torch.no_grad():
        true_BT, _, _ = token_logprobs(
            model,
            input_ids_BT=batch.input_ids_BT,
            attention_mask_BT=batch.attention_mask_BT,
            chunk_tokens=16,
        )
    mask_BT = batch.loss_mask_BT
    batch.engine_logprobs_BT = (true_BT + 0.5 * (batch.replica_BT == 1)) * mask_BT
    batch = _with_advantages(batch, torch.linspace(-1, 1, 8))
    _, metrics = _update(model, batch, micro=2, mini=4)
    assert metrics["replica/0/engine_logprob_gap"] < 1e-5
    assert metrics["replica/1/engine_logprob_gap"] == pytest.approx(0.5, abs=1e-5)
    replica_keys = [key for key in metrics if key.startswith("replica/")]
    assert not [key for key in replica_keys if key.endswith(("gap_part", "token_share"))]
    with caplog.at_level("WARNING"):
        _warn_of_odd_replicas(metrics, step=7)
    [warning] = caplog.messages
    assert warning.startswith("step 7: rollout replica 1's engine/trainer logprob gap is 0.5")


def test_four_micro_batches_of_two_equal_one_batch_of_eight(model):
    torch.manual_seed(1)
    batch = _with_advantages(build_batch(_trajectories(8, seed=3), pad_id=0), torch.randn(8))
    full, m_full = _update(model, copy.deepcopy(batch), micro=8, mini=8)
    split, m_split = _update(model, copy.deepcopy(batch), micro=2, mini=8)
    for (name, a), b in zip(full.named_parameters(), split.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert m_full["loss"] == pytest.approx(m_split["loss"], abs=1e-6)
    moved = max(
        (a - b).abs().max() for a, b in zip(full.parameters(), model.parameters(), strict=True)
    )
    assert moved > 1e-4  # the update did something


def test_activation_checkpointing_leaves_the_update_unchanged(model):
    batch = _with_advantages(build_batch(_trajectories(8, seed=4), pad_id=0), torch.randn(8))
    plain, _ = _update(model, copy.deepcopy(batch), micro=4, mini=8)
    recomputed, _ = _update(model, copy.deepcopy(batch), micro=4, mini=8, ckpt=True)
    assert recomputed.model.gradient_checkpointing  # it was on
    for (name, a), b in zip(plain.named_parameters(), recomputed.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


def test_several_updates_reuse_old_logprobs(model):
    batch = _with_advantages(build_batch(_trajectories(8, seed=5), pad_id=0), torch.randn(8))
    _, metrics = _update(model, batch, micro=4, mini=4, iterations=3, lr=50.0)
    # the old logprobs are those of the sampling policy, computed once up front
    with torch.no_grad():
        expected, _, _ = token_logprobs(
            model,
            input_ids_BT=batch.input_ids_BT,
            attention_mask_BT=batch.attention_mask_BT,
            chunk_tokens=64,
        )
    mask = batch.loss_mask_BT.bool()
    torch.testing.assert_close(batch.old_logprobs_BT[mask], expected[mask], rtol=1e-5, atol=1e-5)
    # later updates see a moved policy against those fixed logprobs, so the clip engages
    assert metrics["clip_frac"] > 0.0


def test_single_update_has_ratio_one(model):
    batch = _with_advantages(build_batch(_trajectories(8, seed=5), pad_id=0), torch.randn(8))
    _, metrics = _update(model, batch, micro=4, mini=8, iterations=1)
    assert batch.old_logprobs_BT is None  # no extra pass when the batch feeds one update
    assert metrics["clip_frac"] == 0.0


def test_scoring_only_masked_positions_gives_the_same_logprobs_and_gradient(model):
    batch = build_batch(_trajectories(4, seed=9), pad_id=0)
    kwargs = dict(input_ids_BT=batch.input_ids_BT, attention_mask_BT=batch.attention_mask_BT)
    full, _, _ = token_logprobs(model, chunk_tokens=7, **kwargs)
    only, _, _ = token_logprobs(model, chunk_tokens=7, score_mask_BT=batch.loss_mask_BT, **kwargs)
    mask = batch.loss_mask_BT.bool()
    torch.testing.assert_close(only[mask], full[mask])
    assert torch.all(only[~mask] == 0)
    g_full = torch.autograd.grad(full[mask].sum(), model.lm_head.weight)[0]
    g_only = torch.autograd.grad(only[mask].sum(), model.lm_head.weight)[0]
    torch.testing.assert_close(g_only, g_full)


@pytest.fixture(scope="module")
def critic(model):
    from transformers import Qwen2ForTokenClassification

    torch.manual_seed(2)
    cfg = copy.deepcopy(model.config)
    cfg.num_labels, cfg.classifier_dropout = 1, 0.0
    return Qwen2ForTokenClassification(cfg).float()


def test_values_are_read_from_the_position_before_each_generated_token(critic):
    batch = build_batch(_trajectories(4, seed=11), pad_id=0)
    values_BT = token_values(critic, batch)
    with torch.no_grad():
        logits_BT = critic(
            input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT
        ).logits.squeeze(-1)
    mask = batch.loss_mask_BT.bool()
    # token t's value is the head's output at t - 1 (the state before choosing t)
    torch.testing.assert_close(values_BT[:, 1:][mask[:, 1:]], logits_BT[:, :-1][mask[:, 1:]])
    assert torch.all(values_BT[~mask] == 0)


def test_critic_update_moves_values_towards_the_returns(critic):
    batch = build_batch(_trajectories(8, seed=13), pad_id=0)
    batch.old_values_BT = no_grad_scores(ValueScorer(critic), batch, micro=MicroBatching(4))
    batch.returns_BT = torch.where(batch.loss_mask_BT.bool(), 1.0, 0.0)
    m = copy.deepcopy(critic)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)

    def error() -> float:
        with torch.no_grad():
            values_BT = no_grad_scores(ValueScorer(m), batch, micro=MicroBatching(4))
        return float(((values_BT - batch.returns_BT) ** 2).sum())

    before = error()
    metrics = critic_update(
        scorer=ValueScorer(m),
        optimizer=opt,
        batch=batch,
        cfg=CriticConfig(path="unused", value_clip=None),
        num_iterations=5,
        mini_batch_size=8,
        micro=MicroBatching(4),
    )
    assert error() < 0.5 * before
    assert {"critic/loss", "critic/grad_norm", "critic/explained_variance"} <= metrics.keys()


# --- padding-free passes and token budgets ------------------------------------------


def test_packed_logprobs_and_gradients_equal_padded_ones(model):
    batch = build_batch(_trajectories(6, seed=21), pad_id=0)
    assert batch.attention_mask_BT.sum() < batch.attention_mask_BT.numel()  # some padding
    padded_model, packed_model = copy.deepcopy(model), copy.deepcopy(model)
    B, T = batch.input_ids_BT.shape
    top = (torch.randint(0, 50, (B, T, 3)), torch.randn(B, T, 3).log_softmax(-1) - 0.5)
    args = (batch.input_ids_BT, batch.attention_mask_BT, batch.loss_mask_BT, top)
    padded, padded_entropy, padded_kl = TokenScorer(padded_model, chunk_tokens=8)(*args)
    packed, packed_entropy, packed_kl = TokenScorer(packed_model, chunk_tokens=8, packed=True)(
        *args
    )
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed_entropy, padded_entropy, rtol=1e-5, atol=1e-5)
    assert padded_kl is not None and packed_kl is not None
    torch.testing.assert_close(packed_kl, padded_kl, rtol=1e-5, atol=1e-5)
    assert torch.all(packed[~batch.loss_mask_BT.bool()] == 0)
    weights = torch.randn(padded.shape)
    (padded * weights + padded_kl).sum().backward()
    (packed * weights + packed_kl).sum().backward()
    for (name, a), b in zip(
        padded_model.named_parameters(), packed_model.parameters(), strict=True
    ):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_packed_values_equal_padded_ones(critic):
    batch = build_batch(_trajectories(5, seed=23), pad_id=0)
    padded = token_values(copy.deepcopy(critic), batch)
    packed = ValueScorer(copy.deepcopy(critic), packed=True)(batch)
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)


def test_a_packed_token_budget_gives_the_fixed_micro_batch_update(model):
    batch = _with_advantages(build_batch(_trajectories(8, seed=25), pad_id=0), torch.randn(8))
    fixed, m_fixed = _update(model, copy.deepcopy(batch), micro=8, mini=8)
    budget, m_budget = _update(
        model, copy.deepcopy(batch), micro=8, mini=8, packing=True, tokens=24
    )
    for (name, a), b in zip(fixed.named_parameters(), budget.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert m_budget["loss"] == pytest.approx(m_fixed["loss"], abs=1e-6)


def test_token_budget_ranges_cover_every_row_within_budget():
    lengths = [5, 9, 3, 12, 4, 4, 20, 2]
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    packed = MicroBatching(size=99, tokens=16, packed=True).ranges(mask)
    assert [list(r) for r in packed] == [[0, 1], [2, 3], [4, 5], [6], [7]]
    # a row longer than the budget goes alone; padded counting is rows x longest row
    padded = MicroBatching(size=99, tokens=16, packed=False).ranges(mask)
    assert [list(r) for r in padded] == [[0], [1], [2], [3], [4, 5], [6], [7]]
    assert [list(r) for r in MicroBatching(size=3).ranges(mask)] == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7],
    ]


def test_every_rank_gets_as_many_passes_as_the_busiest(monkeypatch):
    """FSDP2 pairs collectives pass by pass: a rank needing fewer passes splits its own."""
    monkeypatch.setattr("grouprl.workers.update.all_max", lambda count: 4)
    mask = torch.ones(6, 4, dtype=torch.long)
    ranges = MicroBatching(size=99, tokens=100, packed=True).ranges(mask, Rank(0, 2))
    assert [list(r) for r in ranges] == [[0], [1, 2], [3], [4, 5]]


def test_old_logprobs_from_the_engine_anchor_the_ratio(model):
    """algo.old_logprobs=engine: the PPO ratio is against the engine's sampling logprobs
    (here set one nat below the policy's, so every ratio is e and the clip engages)."""
    batch = _with_advantages(build_batch(_trajectories(8, seed=27), pad_id=0), torch.ones(8))
    with torch.no_grad():
        current, _, _ = TokenScorer(model, chunk_tokens=16)(
            batch.input_ids_BT, batch.attention_mask_BT, batch.loss_mask_BT
        )
    batch.engine_logprobs_BT = (current - 1.0) * batch.loss_mask_BT
    m = copy.deepcopy(model)
    metrics = policy_update(
        scorer=TokenScorer(m, chunk_tokens=16),
        optimizer=torch.optim.SGD(m.parameters(), lr=1e-3),
        batch=copy.deepcopy(batch),
        algo=AlgoConfig(old_logprobs="engine"),
        train=TrainConfig(micro_batch_size=8, logprob_chunk_tokens=16),
        mini_batch_size=8,
    )
    assert metrics["clip_frac"] == pytest.approx(1.0)
    assert metrics["engine_logprob_gap"] == pytest.approx(1.0, abs=1e-4)
    _, trainer = _update(model, copy.deepcopy(batch), micro=8, mini=8)
    assert trainer["clip_frac"] == 0.0  # the trainer's own logprobs: ratio 1


def test_adamw_states_kept_on_the_host_give_the_same_updates(model):
    """cluster.offload_optimizer: the moments move to the parameters' device for each step
    and back after it (copies even on CPU, so the moves happen here too), and a state
    dict loads into such an optimizer; training is bit for bit the same."""
    batch = _with_advantages(build_batch(_trajectories(8, seed=6), pad_id=0), torch.randn(8))
    train = TrainConfig(lr=1e-2, micro_batch_size=4, logprob_chunk_tokens=16)

    def run(m, opt, updates: int) -> None:
        for _ in range(updates):  # 2 mini-batches: 2 optimizer steps per update
            policy_update(
                scorer=TokenScorer(m, chunk_tokens=16),
                optimizer=opt,
                batch=copy.deepcopy(batch),
                algo=AlgoConfig(),
                train=train,
                mini_batch_size=4,
            )

    plain, kept = copy.deepcopy(model), copy.deepcopy(model)
    plain_opt, kept_opt = make_optimizer(plain, train), make_optimizer(kept, train)
    states_on_host(kept_opt)
    storage = []  # exp_avg of one weight: before the step, during it, after it
    weight = kept.lm_head.weight

    def address(opt) -> int | None:
        state = opt.state.get(weight)
        return state["exp_avg"].data_ptr() if state else None

    kept_opt.register_step_pre_hook(lambda opt, a, k: storage.append(address(opt)))
    kept_opt.register_step_post_hook(lambda opt, a, k: storage.append(address(opt)))
    run(plain, plain_opt, 2)
    run(kept, kept_opt, 2)
    assert len(storage) == 8 and storage[0] is None  # 4 steps; no state before the first
    for step in range(1, 4):  # each step brought the moments in and moved them out again
        before, during, after = storage[2 * step - 1], storage[2 * step], storage[2 * step + 1]
        assert before != during != after, storage  # each a copy made while the other lived

    # a checkpoint's optimizer state loads into an optimizer that keeps states on the host
    resumed_opt = make_optimizer(kept, train)
    states_on_host(resumed_opt)
    saved = kept_opt.state_dict()
    resumed_opt.load_state_dict(saved)
    loaded = resumed_opt.state[weight]["exp_avg"]
    assert loaded.data_ptr() != saved["state"][0]["exp_avg"].data_ptr()
    run(plain, plain_opt, 1)
    run(kept, resumed_opt, 1)
    for (name, a), b in zip(plain.named_parameters(), kept.parameters(), strict=True):
        assert torch.equal(a, b), name
    assert not torch.equal(plain.lm_head.weight, model.lm_head.weight)


def test_bfloat16_on_cpu_trains_under_autocast_over_float32_weights(model):
    """model.dtype=bfloat16 on CPU: the passes run in bf16 (fast with AMX), the weights and
    their update stay float32 and close to the float32 update."""
    autocast = autocast_for(torch.device("cpu"), torch.bfloat16)
    with autocast():
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert torch.is_autocast_enabled("cpu")
    batch = _with_advantages(build_batch(_trajectories(8, seed=7), pad_id=0), torch.randn(8))
    full, _ = _update(model, copy.deepcopy(batch), micro=8, mini=8, lr=1e-2)
    half, _ = _update(model, copy.deepcopy(batch), micro=8, mini=8, lr=1e-2, autocast=autocast)
    for (name, a), b, start in zip(
        full.named_parameters(), half.parameters(), model.parameters(), strict=True
    ):
        assert b.dtype == torch.float32, name
        step = (a - start).abs().max()
        assert (b - a).abs().max() <= 0.1 * step + 1e-7, name  # bf16 rounding of the gradient
    assert any(
        not torch.equal(a, b) for a, b in zip(full.parameters(), half.parameters(), strict=True)
    )  # it did run in bf16


def test_an_entropy_bonus_alone_raises_the_policys_entropy(model):
    # zero advantages: the policy loss has no gradient, so only the bonus moves the model
    batch = _with_advantages(build_batch(_trajectories(8, seed=6), pad_id=0), torch.zeros(8))

    def entropy(m):
        with torch.no_grad():
            _, entropy_BT, _ = token_logprobs(
                m,
                input_ids_BT=batch.input_ids_BT,
                attention_mask_BT=batch.attention_mask_BT,
                chunk_tokens=16,
            )
        mask = batch.loss_mask_BT.bool()
        return float(entropy_BT[mask].mean())

    def update(coef):
        m = copy.deepcopy(model)
        metrics = policy_update(
            scorer=TokenScorer(m, chunk_tokens=16, entropy_grad=True),
            optimizer=torch.optim.SGD(m.parameters(), lr=1.0),
            batch=copy.deepcopy(batch),
            algo=AlgoConfig(entropy_coef=coef),
            train=TrainConfig(micro_batch_size=4, logprob_chunk_tokens=16),
            mini_batch_size=8,
            entropy_coef=coef,
        )
        return m, metrics

    still, metrics = update(0.0)
    for a, b in zip(still.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert metrics["entropy"] == pytest.approx(entropy(model), rel=1e-5)
    # a random model over 97 tokens: every token's entropy is near ln 97 = 4.6 > 0.672
    assert metrics["entropy_high_frac"] == pytest.approx(1.0)
    raised, _ = update(1.0)
    assert entropy(raised) > entropy(model) + 5e-4  # near its ceiling ln 97 already
