"""trajectory_to_dict / trajectory_from_dict: the JSON records a checkpoint keeps of the
rollout buffer's finished groups (issue 28, exact resume). Pins: an exact round trip
through strict JSON text (every float bit for bit, NaN and infinities kept, per-token
versions kept), and a clear refusal of row values JSON cannot hold exactly."""

import datetime
import json
import math
import struct

import pytest

from grouprl.types import (
    Completion,
    RecordError,
    RewardParts,
    Trajectory,
    Turn,
    trajectory_from_dict,
    trajectory_to_dict,
)


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _trajectory() -> Trajectory:
    """Two turns, awkward floats everywhere a float goes, versions spanning a push."""
    first = Completion(
        token_ids=[5, 6, 7],
        logprobs=[-0.1, -1e-300, float("-inf")],
        finish_reason="stop",
        text="7 + 5",
        replica=1,
        versions=[3, 3, 4],
    )
    last = Completion(token_ids=[9], logprobs=[-2.220446049250313e-16], finish_reason="length")
    return Trajectory(
        prompt_index=17,
        prompt_ids=[1, 2, 3],
        turns=[
            Turn(first, observation_ids=[11, 12], reward=0.1 + 0.2, info={"tool_calls": 1}),
            Turn(last, info={"gateway": {"failure": None, "t": float("nan"), "x": [1.5]}}),
        ],
        weight_version=3,
        reward=float("nan"),
        reward_parts=RewardParts(
            scores={"math_answer": 1 / 3, "format": float("nan")},
            functions=2 / 3,
            agent=None,
            overlong=-0.15,
            failure="reward_error",
            dropped=False,
            error="ZeroDivisionError",
            turns=(0.0, float("inf")),
            kl=-1e-9,
        ),
        correct=True,
        row={"_index": 17, "question": "7+5?", "answer": 12, "meta": {"w": 0.7, "tags": []}},
        stop_reason="max_tokens",
    )


def _same(a: object, b: object) -> bool:
    """Equal, with floats compared by their bits (NaN equals NaN; -0.0 is not 0.0)."""
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and _bits(a) == _bits(b)
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(
            _same(getattr(a, name), getattr(b, name)) for name in a.__dataclass_fields__
        )
    return type(a) is type(b) and a == b


def test_round_trip_through_strict_json_is_exact() -> None:
    t = _trajectory()
    text = json.dumps(trajectory_to_dict(t), allow_nan=False)  # strict JSON: no NaN literal
    back = trajectory_from_dict(json.loads(text))
    assert _same(back, t)
    assert back.completion.finish_reason == "length"
    assert back.turns[0].completion.versions == [3, 3, 4]
    assert back.turns[0].completion.replica == 1  # compare=False in Completion: checked here
    assert back.reward_parts.turns == (0.0, math.inf)
    assert math.isnan(back.reward) and math.isnan(back.turns[1].info["gateway"]["t"])


def test_every_float_bit_pattern_survives() -> None:
    """Floats that repr writes with 17 digits, subnormals and -0.0 come back bit for bit."""
    values = [0.1 + 0.2, 1 / 3, 5e-324, -0.0, 1.7976931348623157e308, -1.0000000000000002]
    t = _trajectory()
    t.turns[0].completion.logprobs = values
    t.turns[0].completion.token_ids = [1] * len(values)
    back = trajectory_from_dict(json.loads(json.dumps(trajectory_to_dict(t))))
    assert [_bits(v) for v in back.turns[0].completion.logprobs] == [_bits(v) for v in values]


def test_defaults_round_trip_and_missing_optional_keys_take_defaults() -> None:
    bare = Trajectory(0, [1], [Turn(Completion([2], [-0.5], "stop"))], weight_version=0)
    assert trajectory_from_dict(trajectory_to_dict(bare)) == bare
    record = trajectory_to_dict(bare)
    for key in ("reward", "reward_parts", "correct", "row", "stop_reason"):
        del record[key]
    assert trajectory_from_dict(record) == bare


@pytest.mark.parametrize(
    ("row", "named"),
    [
        ({"date": datetime.date(2024, 1, 2)}, "row['date']"),
        ({"blob": b"\x00"}, "row['blob']"),
        ({"pair": (1, 2)}, "row['pair']"),
        ({"nested": {"ok": [1, {"when": datetime.time(1)}]}}, "row['nested']['ok'][1]['when']"),
        ({"by_id": {3: "x"}}, "row['by_id']"),
    ],
)
def test_a_row_value_json_cannot_hold_is_refused_by_name(row: dict, named: str) -> None:
    t = _trajectory()
    t.row = row
    with pytest.raises(RecordError) as err:
        trajectory_to_dict(t)
    assert named in str(err.value)
    assert "dataset" in str(err.value)  # says where to fix it


def test_a_damaged_record_names_what_is_missing() -> None:
    record = trajectory_to_dict(_trajectory())
    del record["turns"][0]["completion"]["logprobs"]
    with pytest.raises(RecordError, match=r"prompt_index=17.*logprobs"):
        trajectory_from_dict(record)
