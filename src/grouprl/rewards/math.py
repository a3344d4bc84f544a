"""Math answer checking: pull the final answer out of text and compare numerically.

Answer extraction, in priority order:

1. the last ``#### X`` (GSM8K's answer line): ``X`` is the rest of that line;
2. else the last ``\\boxed{X}`` (nested braces handled, e.g. ``\\boxed{\\frac{1}{2}}``);
3. else the last number in the text.

Numbers are compared as floats with a relative tolerance of 1e-6, so ``1,234.50``,
``$1234.5`` and ``\\frac{2469}{2}`` are the same answer. An answer that is not a
number is compared as text after collapsing whitespace.
"""

from __future__ import annotations

import re

_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?|(?<![\w.])-?\.\d+")
_PLAIN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}")
_MIXED = re.compile(r"([+-]?\d+)\s+(\d+)\s*/\s*(\d+)")
_LATEX_NOISE = ("\\$", "$", "\\%", "%", "\\!", "\\,", "{,}")
REL_TOL = 1e-6


def extract_answer(text: str) -> str | None:
    """The final answer in ``text`` (see the module docstring), or None if there is none."""
    marked = _marked_answer(text)
    if marked is not None:
        return marked
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def normalize_number(s: str) -> float | None:
    """The value of a written number (``$1,234.50``, ``-3``, ``45%``, ``3/4``, ``\\frac{1}{2}``).

    Returns None for anything else, including ``nan`` and ``inf``.
    """
    text = s.strip()
    for noise in _LATEX_NOISE:
        text = text.replace(noise, "")
    text = text.strip().rstrip(".").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    frac = _FRAC.fullmatch(text)
    if frac:
        sign, num, den = frac.groups()
        return _ratio(sign + num, den)
    mixed = _MIXED.fullmatch(text)
    if mixed:
        whole, num, den = mixed.groups()
        part = _ratio(num, den)
        if part is None:
            return None
        return float(whole) - part if whole.startswith("-") else float(whole) + part
    text = re.sub(r"\s+", "", text)
    if "/" in text:
        num, _, den = text.partition("/")
        return _ratio(num, den)
    return _plain(text)


def math_answer(completion: str, *, reference: object, **_: object) -> float:
    """1.0 if the completion's final answer equals the reference's, else 0.0.

    ``reference`` is a bare answer (``"18"``, ``18``) or a worked solution whose
    answer is marked with ``#### N`` or ``\\boxed{N}`` (GSM8K and MATH style).
    """
    ref_text = str(reference)
    expected = _marked_answer(ref_text)
    if expected is None:
        expected = ref_text.strip()
    got = extract_answer(completion)
    if got is None:
        return 0.0
    want_value, got_value = normalize_number(expected), normalize_number(got)
    if want_value is not None and got_value is not None:
        scale = max(1.0, abs(want_value), abs(got_value))
        return float(abs(want_value - got_value) <= REL_TOL * scale)
    return float(" ".join(expected.split()) == " ".join(got.split()))


def _marked_answer(text: str) -> str | None:
    """The ``####`` or ``\\boxed{}`` answer only: a reference's other numbers are working."""
    hashes = _HASHES.findall(text)
    if hashes:
        return hashes[-1].strip()
    boxed = _last_boxed(text)
    return boxed.strip() if boxed is not None else None


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    begin = start + len("\\boxed{")
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[begin:i]
            depth -= 1
    return None  # unbalanced: no usable answer


def _plain(text: str) -> float | None:
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    if not _PLAIN.fullmatch(text):
        return None
    return float(text)


def _ratio(num: str, den: str) -> float | None:
    top, bottom = _plain(num.strip()), _plain(den.strip())
    if top is None or bottom is None or bottom == 0:
        return None
    return top / bottom
