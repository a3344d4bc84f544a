"""Guess the number, with feedback each turn: the secret is the answer to a word problem.

    grouprl train tiny-arith env.name=examples/envs/guess_number.py:GuessTheNumber \
        env.max_turns=3 rollout.engine=hf

The model reads the problem and guesses (its ``#### N`` line). A right guess ends the
episode (turn reward 1); a wrong one gets "too high" or "too low" and another turn, up
to ``env.max_turns``. The reward functions (``math_answer`` in tiny-arith) score the
last guess, so the held-out accuracy is the share of games won (docs/environments.md).
"""

from __future__ import annotations

from grouprl.envs import EnvContext, Step
from grouprl.rewards.math import extract_answer, math_answer


class GuessTheNumber:
    def __init__(self, *, feedback: bool = True, ctx: EnvContext) -> None:
        self.feedback, self.ctx = feedback, ctx

    def episode(self, row: dict) -> Game:
        return Game(self, row)


class Game:
    def __init__(self, env: GuessTheNumber, row: dict) -> None:
        self.env, self.row = env, row
        self.secret = row[env.ctx.answer_key]  # a worked solution ending in "#### N"

    def start(self) -> list[dict]:
        return self.env.ctx.prompt_messages(self.row)  # the problem, as single-turn runs ask it

    def step(self, model_text: str) -> Step:
        if math_answer(model_text, reference=self.secret) == 1.0:
            return Step(reward=1.0, done=True, stop_reason="answered")
        guess = _number(extract_answer(model_text))
        target = _number(extract_answer(self.secret))
        if guess is None or target is None or not self.env.feedback:
            hint = "That is not it. Try again."
        else:
            hint = f"{guess:g} is too {'high' if guess > target else 'low'}. Try again."
        return Step(messages=[{"role": "user", "content": hint}])


def _number(text: str | None) -> float | None:
    try:
        return float(text.replace(",", "")) if text else None
    except ValueError:
        return None
