"""Format reward: does the completion end with GSM8K's answer line?

Contract: 1.0 when the last non-blank line of the completion is ``#### N``
(the ``####`` at the start of the line, ``N`` a number as ``normalize_number``
reads it: ``42``, ``-3``, ``1,234.5``, ``$7``, ``1/2``), else 0.0. Trailing
whitespace and end-of-turn markers left in decoded text (``<|im_end|>``,
``<|endoftext|>``, ``<|eot_id|>``, ``</s>``, ``<eos>``) are ignored. Whether the
number is right is ``math_answer``'s job, not this one's::

    "7 + 5 = 12. 12 - 3 = 9.\\n#### 9<|im_end|>"   -> 1.0
    "#### 9\\nI hope that helps!"                  -> 0.0  (not the final line)
    "The answer is #### 9"                        -> 0.0  (not at line start)
    "#### nine"                                   -> 0.0  (not a number)
"""

from __future__ import annotations

import re
from typing import Any

from grouprl.rewards.math import normalize_number

_END_OF_TURN = re.compile(r"(?:\s|<\|[a-z_]+\|>|</s>|<eos>)+\Z")


def format_reward(completion: str, **_: Any) -> float:
    """1.0 if ``completion`` ends with a ``#### <number>`` line, else 0.0 (see module docstring)."""
    text = _END_OF_TURN.sub("", completion)
    last_line = text.rsplit("\n", 1)[-1].strip()
    if not last_line.startswith("####"):
        return 0.0
    return float(normalize_number(last_line[4:]) is not None)
