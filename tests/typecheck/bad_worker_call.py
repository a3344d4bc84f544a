"""Calls the type checker must reject. ``make typecheck`` checks this file with
``expect_errors.py``: each ``# expect-error: TEXT`` comment needs an error containing
TEXT on the line below it, and no other line may have one.

Not part of the suite: it proves that ``Role.call``'s ParamSpec typing reaches the
worker method's own parameters, so a misspelt keyword fails before any rank runs.
"""

from grouprl.types import TrainingBatch
from grouprl.workers.critic import CriticWorker
from grouprl.workers.group import Role
from grouprl.workers.policy import PolicyWorker


def misspelt_keyword(policy: Role[PolicyWorker], batch: TrainingBatch) -> None:
    # expect-error: No parameter named "kl_coeff_typo"
    policy.call(PolicyWorker.update, batch, kl_coeff_typo=0.1, mini_batch_size=8)


def missing_argument(policy: Role[PolicyWorker]) -> None:
    # expect-error: Arguments missing for parameters "batch"
    policy.call(PolicyWorker.update)


def wrong_argument_type(policy: Role[PolicyWorker]) -> None:
    # expect-error: "Literal['not a batch']" is not assignable to "TrainingBatch"
    policy.gather(PolicyWorker.logprobs, "not a batch")


def method_of_another_role(policy: Role[PolicyWorker], batch: TrainingBatch) -> None:
    # expect-error: "PolicyWorker" is not assignable to "CriticWorker"
    policy.gather(CriticWorker.values, batch)
