"""The learning runs share the session's rollout engines (tests/shared_engines.py): the
first run of a model starts its engine, each later run gets it back serving the model's
initial weights."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grouprl.rollout import builder
from shared_engines import SharedEngines


@pytest.fixture(scope="module", autouse=True)
def engines_of_the_session(shared_engines: SharedEngines) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builder, "start_engine", shared_engines.start_engine)
        yield
