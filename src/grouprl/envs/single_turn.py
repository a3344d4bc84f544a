"""``env.name=single_turn``: one completion per prompt, the episode ends after it.

The opening is the data section's: ``data.system_prompt`` and the question through
``data.prompt_template``, or the row's own chat messages (``data/prompts.py``). Every
turn ends the episode (``answered``; a turn cut off at ``rollout.max_tokens`` ends as
``max_tokens`` before the environment sees it), and the reward functions score it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from grouprl.envs.base import Message, Step, opening

if TYPE_CHECKING:
    from grouprl.config.model_data import DataConfig


class SingleTurnEnv:
    template_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(self, *, prompt_key: str, system_prompt: str | None, prompt_template: str):
        self.prompt_key = prompt_key
        self.system_prompt, self.prompt_template = system_prompt, prompt_template

    @classmethod
    def from_data(cls, data: DataConfig) -> SingleTurnEnv:
        """The data section's prompting (``DataConfig``: prompt key, system prompt, template)."""
        return cls(
            prompt_key=data.prompt_key,
            system_prompt=data.system_prompt,
            prompt_template=data.prompt_template,
        )

    def episode(self, row: dict[str, Any]) -> SingleTurnEpisode:
        return SingleTurnEpisode(self, row)


class SingleTurnEpisode:
    __slots__ = ("env", "row")

    def __init__(self, env: SingleTurnEnv, row: dict[str, Any]) -> None:
        self.env, self.row = env, row

    def start(self) -> list[Message]:
        return opening(self.env, self.row)

    def step(self, model_text: str) -> Step:
        return Step(done=True, stop_reason="answered")
