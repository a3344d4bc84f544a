"""Records that cross a boundary: engine -> episode -> scoring -> training.

Suffixes: B batch (samples), T tokens, P prompts, G group (samples per prompt).

Tokens in these records are the ones the engine produced and saw; nothing is
ever re-tokenised from decoded text.

A single-turn sample is ``prompt_ids + completion_ids``; its loss mask is 0 on
the prompt and 1 on every generated token::

    tokens     <|im_start|>user ... <|im_start|>assistant\\n | 7 + 5 = 12 ... <|im_end|>
    loss_mask  0 ........................................ 0 | 1 .................... 1

A multi-turn sample continues with the environment's reply, rendered by the chat
template, then the model's next turn; only the model's tokens are in the loss::

    prompt | turn 0 (model) | observation 0 (tool reply + assistant header) | turn 1 (model)
    0 .. 0 | 1 ......... 1  | 0 ............................................ 0 | 1 ......... 1
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: data/ (torch-free, grouprl plan) checks rows here
    import torch
    from torch import Tensor


@dataclass
class Completion:
    """One sampled continuation, as the engine produced it."""

    token_ids: list[int]
    logprobs: list[float]  # engine logprob of each sampled token
    finish_reason: str  # "stop" (end-of-sequence token) or "length"
    text: str = ""
    replica: int = field(default=0, compare=False)  # which rollout replica sampled it
    versions: list[int] = field(default_factory=list)
    """The weight version that sampled each token (partial rollouts: a generation continued
    after a weight push spans versions); empty: every token by the episode's
    ``Trajectory.weight_version``."""


@dataclass
class Turn:
    """One model turn of an episode and the environment's reply to it.

    ``observation_ids`` are the reply's tokens as rendered into the context after
    the model's tokens (chat-template markup included), empty after the last turn.
    """

    completion: Completion
    observation_ids: list[int] = field(default_factory=list)
    reward: float = 0.0  # the environment's turn-level reward
    info: dict[str, Any] = field(default_factory=dict)  # e.g. tool calls and errors


def sequence_ids(prompt_ids: list[int], turns: list[Turn]) -> list[int]:
    """The prompt, then each turn's completion and the observation rendered after it."""
    ids = list(prompt_ids)
    for turn in turns:
        ids += turn.completion.token_ids + turn.observation_ids
    return ids


@dataclass(frozen=True)
class RewardParts:
    """What a sample's reward is made of, by name. ``rollout/reward.sample_reward`` is the
    one place that adds them up; the scorer, the agent gateway, a failed episode and the
    loop's shaping only supply parts::

        reward = (FAILED_OUTCOME if failure else agent if agent is not None else functions)
                 + overlong

    ``scores``, ``turns`` and ``kl`` are shown beside it, not summed into it: the outcome
    estimators read ``functions``; the turn-level ones (mt_grpo, turn_returns) take each
    turn's reward apart; KL in the reward is added per token by the estimator. A failed
    sample (``failure``) is left out of training when ``dropped`` (``on_error=drop``)::

        nothing failed     failure=None          dropped=None   trains on its reward
        on_error=zero      failure="env_error"   dropped=False  trains as FAILED_OUTCOME
        on_error=drop      failure="env_error"   dropped=True   not in the loss or baseline
    """

    scores: dict[str, float | None] = field(default_factory=dict)
    """Each reward function's score of the last turn, unweighted, by name (0 where the
    function failed, and for a failed sample; None (null in samples.jsonl) where a TRL
    function returned None: it did not apply)."""
    functions: float = 0.0
    """The reward functions' weighted sum (``reward.functions[*].weight``): the outcome."""
    agent: float | None = None
    """``env.agent``'s own reward (returned or reported), which replaces ``functions``."""
    overlong: float | None = None
    """DAPO's overlong shaping (``algo.overlong_buffer``), added to the outcome."""
    failure: str | None = None
    """Why the sample failed: ``env_error`` (its environment), ``agent_error`` (its
    agent) or ``reward_error`` (a reward function): its outcome is then
    ``FAILED_OUTCOME`` (``rollout/reward.py``), whatever was scored."""
    dropped: bool | None = None
    """For a failed sample, whether it is left out of training (``on_error=drop``: out of
    the loss and of its group's baseline) rather than trained as ``FAILED_OUTCOME``
    (``on_error=zero``); None for a sample that did not fail."""
    error: str | None = None
    """What failed, as the failure said it (the environment's error, the reward
    function's exception)."""
    turns: tuple[float, ...] = ()
    """The environment's reward for each model turn (``Turn.reward``), where any is
    non-zero."""
    kl: float | None = None
    """KL in the reward (``algo.kl_in=reward``): ``-coef * KL`` summed over the sample's
    tokens, as the policy update saw it."""
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What reward functions returned beside their scores, by function (``{"code_tests":
    {"outcome": "timeout"}}``; str, finite float or bool values: ``rewards/extras.py``)."""


@dataclass
class Trajectory:
    """One episode: a prompt, the model's turns (one for single-turn tasks), its score.

    The context the engine saw for turn k is ``prompt_ids`` followed by every
    earlier turn's completion and observation tokens. ``reward`` is the sample's
    reward, computed from ``reward_parts`` by ``rollout/reward.py`` alone (the
    outcome estimators' score); ``weight_version`` is the policy version that
    sampled it; ``stop_reason`` says why it ended; ``trains`` whether it is in the loss.
    """

    prompt_index: int  # index of the dataset row
    prompt_ids: list[int]
    turns: list[Turn]
    weight_version: int
    reward: float = 0.0
    reward_parts: RewardParts = field(default_factory=RewardParts)
    correct: bool = False
    row: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = ""
    teacher_logprobs: list[float] | None = None
    """On-policy distillation: the teacher's logprob of each of the model's generated
    tokens, turn after turn (``generated_tokens`` of them; tool and environment tokens
    have none); None without a teacher, or where the teacher failed on the sample."""
    teacher_top_ids: list[list[int]] | None = None
    """With ``algo.teacher_top_k`` > 0: at each of those tokens, the ids of the teacher's
    k most likely tokens there (the sampled one need not be among them)."""
    teacher_top_logprobs: list[list[float]] | None = None
    """Their logprobs under the teacher, aligned with ``teacher_top_ids``."""

    @property
    def trains(self) -> bool:
        """Whether the sample is in the loss: False for a failed sample dropped by
        ``on_error=drop`` (``rollout/reward.fail``)."""
        return not self.reward_parts.dropped

    @property
    def completion(self) -> Completion:
        """The last model turn: what outcome rewards score."""
        return self.turns[-1].completion

    @property
    def generated_tokens(self) -> int:
        return sum(len(turn.completion.token_ids) for turn in self.turns)

    def sequence_ids(self) -> list[int]:
        """The sample's tokens exactly as the engine saw and produced them."""
        return sequence_ids(self.prompt_ids, self.turns)


@dataclass
class TrainingBatch:
    """Right-padded tensors for a forward/backward pass over B samples.

    Logprob tensors are aligned to ``input_ids``: entry ``[b, t]`` is the
    logprob of token ``input_ids[b, t]`` given the tokens before it.
    """

    input_ids_BT: Tensor
    attention_mask_BT: Tensor
    loss_mask_BT: Tensor  # 1 on tokens the policy generated (and that count in the loss)
    turn_index_BT: Tensor  # long: model turn (0, 1, ...) of each generated token, -1 elsewhere
    advantages_BT: Tensor  # filled in by the advantage estimator
    engine_logprobs_BT: Tensor  # the engine's sampled-token logprobs, aligned to input_ids
    old_logprobs_BT: Tensor | None = None  # trainer logprobs of the sampling policy
    ref_logprobs_BT: Tensor | None = None  # frozen reference, when algo.beta > 0
    teacher_logprobs_BT: Tensor | None = None  # the teacher's, when algo.teacher_coef > 0
    # long (B, T, K) and float (B, T, K): the teacher's top k ids and logprobs at each
    # generated token, when algo.teacher_top_k > 0 (padding: algo/distill.TOP_PAD_LOGPROB)
    teacher_top_ids_BTK: Tensor | None = None
    teacher_top_logprobs_BTK: Tensor | None = None
    old_values_BT: Tensor | None = None  # critic values the advantages were computed with
    returns_BT: Tensor | None = None  # the critic's regression targets
    replica_BT: Tensor | None = None  # long: the replica that sampled each generated token
    version_BT: Tensor | None = None  # long: the weight version of each generated token, else -1

    def __len__(self) -> int:
        return self.input_ids_BT.shape[0]

    @property
    def teacher_top(self) -> tuple[Tensor, Tensor] | None:
        """The teacher's top-k ids and logprobs, when the batch has them."""
        if self.teacher_top_ids_BTK is None or self.teacher_top_logprobs_BTK is None:
            return None
        return self.teacher_top_ids_BTK, self.teacher_top_logprobs_BTK

    def select(self, index: slice | Tensor | tuple[slice, ...]) -> TrainingBatch:
        """Rows (a slice or index tensor), or rows and columns (a tuple of slices)."""
        return self._map(lambda t: t[index])

    def to(self, device: torch.device) -> TrainingBatch:
        return self._map(lambda t: t.to(device))

    def _map(self, fn: Callable[[Tensor], Tensor]) -> TrainingBatch:
        """``fn`` of every tensor; the optional ones that are None stay None."""
        tensors = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{name: fn(t) for name, t in tensors.items() if t is not None})


class RecordError(ValueError):
    """A trajectory that cannot be written as a JSON record (a checkpoint's rollout buffer),
    or a record that is not one; the message names the field and the fix."""

    user_error = True


_FLOAT_TAG = "$float"
"""A non-finite float in a record: ``{"$float": "nan" | "inf" | "-inf"}`` (strict JSON
has no NaN or Infinity, and a failed reward function scores NaN)."""


def trajectory_to_dict(t: Trajectory) -> dict[str, Any]:
    """``t`` as a JSON-able dict (strict JSON: ``json.dumps(..., allow_nan=False)`` works)
    that ``trajectory_from_dict`` turns back into an equal Trajectory: every field of the
    trajectory, its turns, completions (per-token ``versions`` included) and reward parts.

    Floats survive exactly (Python writes the shortest repr that reads back to the same
    double); NaN and infinities are tagged, not lost. ``row`` and ``Turn.info`` hold any
    JSON value (None, bool, int, float, str, lists, dicts with str keys); any other value
    (a date, bytes, a tuple, a numpy scalar) is refused with a RecordError naming its
    place, because turning it into text would not give the same row back on resume.
    """
    parts = t.reward_parts
    return {
        "prompt_index": t.prompt_index,
        "prompt_ids": list(t.prompt_ids),
        "turns": [_turn_to_dict(turn, where=f"turns[{k}]") for k, turn in enumerate(t.turns)],
        "weight_version": t.weight_version,
        "reward": _float(t.reward),
        "reward_parts": {
            **asdict(parts),
            "scores": {name: _float(v) for name, v in parts.scores.items()},
            "functions": _float(parts.functions),
            "agent": _float(parts.agent),
            "overlong": _float(parts.overlong),
            "turns": [_float(v) for v in parts.turns],
            "kl": _float(parts.kl),
        },
        "correct": t.correct,
        "row": _json_value(t.row, where="row"),
        "stop_reason": t.stop_reason,
    } | _teacher_to_dict(t)


def trajectory_from_dict(d: dict[str, Any]) -> Trajectory:
    """The Trajectory ``trajectory_to_dict`` wrote. A record missing a required key (or not
    a record) raises RecordError; optional fields missing take their defaults, so records
    written before a field was added still load."""
    try:
        parts = d.get("reward_parts", {})
        return Trajectory(
            prompt_index=int(d["prompt_index"]),
            prompt_ids=list(d["prompt_ids"]),
            turns=[_turn_from_dict(turn) for turn in d["turns"]],
            weight_version=int(d["weight_version"]),
            reward=_unfloat(d.get("reward", 0.0)),
            reward_parts=RewardParts(
                scores={name: _unfloat(v) for name, v in parts.get("scores", {}).items()},
                functions=_unfloat(parts.get("functions", 0.0)),
                agent=_unfloat(parts.get("agent")),
                overlong=_unfloat(parts.get("overlong")),
                failure=parts.get("failure"),
                dropped=parts.get("dropped"),
                error=parts.get("error"),
                turns=tuple(_unfloat(v) for v in parts.get("turns", ())),
                kl=_unfloat(parts.get("kl")),
                extras={name: dict(found) for name, found in parts.get("extras", {}).items()},
            ),
            correct=bool(d.get("correct", False)),
            row=_json_unvalue(d.get("row", {})),
            stop_reason=d.get("stop_reason", ""),
            teacher_logprobs=_teacher_from_dict(d.get("teacher_logprobs")),
            teacher_top_ids=d.get("teacher_top_ids"),
            teacher_top_logprobs=_teacher_top_from_dict(d.get("teacher_top_logprobs")),
        )
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        head = f"prompt_index={d.get('prompt_index')!r}" if isinstance(d, dict) else repr(d)
        raise RecordError(
            f"not a trajectory record ({head}): {type(err).__name__}: {err}; records are "
            "written by grouprl.types.trajectory_to_dict: the checkpoint's rollout state is "
            "damaged or from another program (resume from an earlier checkpoint)"
        ) from err


def _teacher_to_dict(t: Trajectory) -> dict[str, Any]:
    """The teacher's logprobs (and top k) as a record's keys, none when there are none (a
    record without a teacher is written as before the keys existed)."""
    out: dict[str, Any] = {}
    if t.teacher_logprobs is not None:
        out["teacher_logprobs"] = [_float(v) for v in t.teacher_logprobs]
    if t.teacher_top_ids is not None and t.teacher_top_logprobs is not None:
        out["teacher_top_ids"] = [list(ids) for ids in t.teacher_top_ids]
        out["teacher_top_logprobs"] = [[_float(v) for v in lps] for lps in t.teacher_top_logprobs]
    return out


def _teacher_from_dict(logprobs: list[object] | None) -> list[float] | None:
    return None if logprobs is None else [_unfloat(v) for v in logprobs]


def _teacher_top_from_dict(rows: list[list[object]] | None) -> list[list[float]] | None:
    return None if rows is None else [[_unfloat(v) for v in row] for row in rows]


def _turn_to_dict(turn: Turn, *, where: str) -> dict[str, Any]:
    c = turn.completion
    return {
        "completion": {**asdict(c), "logprobs": [_float(v) for v in c.logprobs]},
        "observation_ids": list(turn.observation_ids),
        "reward": _float(turn.reward),
        "info": _json_value(turn.info, where=f"{where}.info"),
    }


def _turn_from_dict(d: dict[str, Any]) -> Turn:
    c = d["completion"]
    completion = Completion(
        token_ids=list(c["token_ids"]),
        logprobs=[_unfloat(v) for v in c["logprobs"]],
        finish_reason=c["finish_reason"],
        text=c.get("text", ""),
        replica=int(c.get("replica", 0)),
        versions=list(c.get("versions", [])),
    )
    return Turn(
        completion,
        observation_ids=list(d.get("observation_ids", [])),
        reward=_unfloat(d.get("reward", 0.0)),
        info=_json_unvalue(d.get("info", {})),
    )


def _float(value: float | None) -> float | dict[str, str] | None:
    """A float field as JSON: the float itself, or the ``$float`` tag when not finite."""
    if value is None:
        return None
    if math.isfinite(value):
        return float(value)  # a numpy or torch scalar too: the same double
    return {_FLOAT_TAG: repr(float(value))}  # 'nan', 'inf' or '-inf'


def _unfloat(value: object) -> Any:
    if isinstance(value, dict):
        return float(value[_FLOAT_TAG])
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class ValueRefused(ValueError):
    """A value with no exact JSON form: its place ``where`` (``row['meta'][0]``) and ``why``."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where} {why}")
        self.where, self.why = where, why


def json_value(
    value: object,
    *,
    where: str,
    floats: Callable[[float], object] = float,
    convert: Callable[[Any, str], object] | None = None,
) -> Any:
    """``value`` as strict JSON, or ValueRefused naming its place ``where``: None, bool, int,
    str kept, a float as ``floats`` gives it, lists and dicts (text keys) walked, any other
    value as ``convert(value, where)`` gives it (NotImplemented: refused). The one walk of a
    record's row and info (floats tagged) and of a row as it loads (``data/row_values.py``)."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if type(value) is float:
        return floats(value)
    walk = functools.partial(json_value, floats=floats, convert=convert)
    if type(value) is list:
        return [walk(v, where=f"{where}[{k}]") for k, v in enumerate(value)]
    if type(value) is dict:
        bad = [k for k in value if type(k) is not str]
        if bad or list(value) == [_FLOAT_TAG]:
            key = bad[0] if bad else _FLOAT_TAG
            raise ValueRefused(
                where,
                f"has the key {key!r} (keys must be text, and a lone key {_FLOAT_TAG!r} marks "
                "a non-finite float)",
            )
        return {k: walk(v, where=f"{where}[{k!r}]") for k, v in value.items()}
    if convert is not None and (converted := convert(value, where)) is not NotImplemented:
        return walk(converted, where=where)
    raise ValueRefused(where, f"holds a {kind.__module__}.{kind.__qualname__} ({value!r:.60})")


def _json_value(value: object, *, where: str) -> Any:
    """``value`` (a row's or a turn's info's content) as strict JSON, or RecordError."""
    try:
        return json_value(value, where=where, floats=_float)
    except ValueRefused as err:
        raise RecordError(
            f"{err.where} {err.why}, which a checkpoint's JSON rollout state cannot hold "
            "exactly; allowed: None, bool, int, float, str, lists and dicts (text keys) of "
            "them. Convert or rename it in the dataset (or drop the column; an environment's "
            "Step.info likewise), or train with rollout.max_staleness=0, which keeps no "
            "rollout buffer"
        ) from None


def _json_unvalue(value: object) -> Any:
    if isinstance(value, list):
        return [_json_unvalue(v) for v in value]
    if isinstance(value, dict):
        if list(value) == [_FLOAT_TAG]:
            return float(value[_FLOAT_TAG])
        return {k: _json_unvalue(v) for k, v in value.items()}
    return value
