"""A calculator tool environment: the model may call tools before it answers.

    grouprl train tiny-arith env.name=examples/envs/calculator.py:Calculator \
        "env.args={max_value: 1000000}" data.max_prompt_tokens=256 rollout.max_model_len=512 \
        rollout.engine=hf

Each turn either answers (a ``#### N`` line ends the episode, which the reward
functions score), calls tools (``<add><a>2</a><b>3</b></add>``; their results come back
as tool messages), or does neither (``parse_error``). Malformed, unknown, mistyped and
hanging calls come back as ``Error: ...`` tool messages (docs/environments.md).
"""

from __future__ import annotations

from grouprl.envs import EnvContext, Step, Toolbox

SYSTEM = "Tools: <add><a>X</a><b>Y</b></add>, subtract, multiply. Answer: #### N"


class Calculator:
    def __init__(self, *, max_value: float = 1e6, timeout_s: float = 5.0, ctx: EnvContext):
        def add(a: float, b: float) -> float:
            """Add two numbers."""
            return check(a + b)

        def subtract(a: float, b: float) -> float:
            """Subtract b from a."""
            return check(a - b)

        def multiply(a: float, b: float) -> float:
            """Multiply two numbers."""
            return check(a * b)

        def check(value: float) -> float:
            if abs(value) > max_value:
                raise ValueError(f"{value:g} is beyond the calculator's range ({max_value:g})")
            return value

        self.ctx = ctx
        self.toolbox = Toolbox([add, subtract, multiply], fmt=ctx.tool_format, timeout_s=timeout_s)
        self.template_kwargs = self.toolbox.template_kwargs  # the schemas, for fmt=qwen

    def episode(self, row: dict) -> CalculatorEpisode:
        return CalculatorEpisode(self, row)


class CalculatorEpisode:
    def __init__(self, env: Calculator, row: dict) -> None:
        self.env, self.row = env, row

    def start(self) -> list[dict]:
        return self.env.ctx.prompt_messages(self.row, system_prompt=SYSTEM)

    def step(self, model_text: str) -> Step:
        if "####" in model_text:
            return Step(done=True, stop_reason="answered")
        turn = self.env.toolbox.run(model_text)
        if not turn:
            return Step(done=True, stop_reason="parse_error")
        return Step(messages=turn.messages, info=turn.info)
