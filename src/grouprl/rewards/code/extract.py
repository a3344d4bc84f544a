"""The program in a completion, by fixed rules (docs/code.md):

1. Reasoning is not code: only the text after the last ``</think>`` is read; a
   ``<think>`` that never closes (the completion was cut off while thinking) has no code.
2. A fenced block is a line starting with three backticks and an optional tag up to the
   next line that is only three backticks. The last block tagged ``python`` (``py``,
   ``python3``, ``py3``; any case) is the program; with none, the last untagged block.
   Blocks tagged with another language are not Python. A fence that never closes (a
   completion cut off mid-block) is not a block.
3. With no fence at all, the whole text is the program when ``bare_code`` is on and it
   parses as Python (a plain-English answer does not).

Empty code counts as none. The outcome without code is ``no_code`` (scored 0).
"""

from __future__ import annotations

import ast
import re

FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.#-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)
PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})


def extract_code(completion: str, *, bare_code: bool = True) -> str | None:
    """The program in ``completion`` (module docstring), or None."""
    text = completion
    if "</think>" in text:
        text = text.rpartition("</think>")[2]
    elif "<think>" in text:
        return None
    blocks = FENCE.findall(text)
    tagged = [body for tag, body in blocks if tag.lower() in PYTHON_TAGS]
    untagged = [body for tag, body in blocks if not tag]
    if tagged or untagged:
        code = (tagged or untagged)[-1]
        return code if code.strip() else None
    if "```" in text or not bare_code or not text.strip():
        return None
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return text
