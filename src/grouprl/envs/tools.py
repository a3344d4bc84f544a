"""Tools for multi-turn agents: schemas from functions, parsing calls, running them safely.

::

    def search(query: str, k: int = 3) -> str: ...      plain, typed, documented function
        │ ToolSet([search])                              schema per tool (tool_schema)
        ▼
    tools.schemas() ──► tokenizer.apply_chat_template(messages, tools=...)
    model turn text ──► parse_tool_calls(text, tools=tools, fmt="qwen" | "xml")
        │ [ParsedCall(call=ToolCall(name, arguments) | error="...", raw="<tool_call>...")]
        ▼
    ToolRunner(tools).run(parsed, timeout_s=...)
        │ unknown tool / arguments that do not fit the schema ──► error result, tool not run
        │ fn(**arguments) on a daemon thread, abandoned past timeout_s
        ▼
    ToolResult(name, content, error, seconds) ──► tool_message(result) ──► next turn's prompt

Nothing the model writes raises: malformed calls are ``ParsedCall.error`` entries and
failed calls are ``ToolResult.error``, which ``tool_message`` turns into an ``Error: ...``
observation the model reads on its next turn. User mistakes (a function that cannot be
described by a schema, two tools with one name) raise at startup.

Call formats (``CALL_FORMATS``)::

    qwen  <tool_call>
          {"name": "search", "arguments": {"query": "capital of France", "k": 2}}
          </tool_call>
    xml   <search><query>capital of France</query><k>2</k></search>
          <search>capital of France</search>      (bare body: see _bare_argument)

A block must be closed to count: if generation stops on ``</tool_call>``, keep the stop
string in the output (vLLM ``include_stop_str_in_output=True``). Decode with special tokens
kept when the format's tags are special tokens. XML text is taken verbatim (no ``&lt;``
decoding) and argument values are stripped of surrounding whitespace.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import threading
import time
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

SUPPORTED_TYPES = "str, int, float, bool, list[X], Literal[...], X | None (Optional[X])"
_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}

# --- schemas --------------------------------------------------------------------------------


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema of ``fn`` in the shape chat templates take (``apply_chat_template(tools=)``).

    ``{"type": "function", "function": {"name", "description", "parameters": {"type":
    "object", "properties": {arg: {"type", ["items" | "enum"], ["nullable"], ["description"]}},
    "required": [...]}}}``. The description is the docstring's first paragraph; argument
    descriptions come from a Google-style ``Args:`` section. An argument is required unless it
    has a default or is ``X | None`` (then ``"nullable": true``: the model may pass null).
    Raises ``TypeError`` naming the function and argument for anything else.
    """
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"tool {fn!r} needs an identifier as its name (a def, not a lambda)")
    try:
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters.values()
    except (NameError, TypeError, ValueError) as err:
        raise TypeError(f"tool function {name!r}: cannot read its signature ({err})") from err
    description, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    properties: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    for param in params:
        where = f"tool function {name!r} argument {param.name!r}"
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            kinds = "*args, **kwargs and positional-only arguments are not supported"
            raise TypeError(f"{where}: tools are called with keyword arguments only; {kinds}")
        if param.name not in hints:
            raise TypeError(f"{where} has no type annotation; use one of: {SUPPORTED_TYPES}")
        prop = _annotation_schema(hints[param.name], where)
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        properties[param.name] = prop
        if param.default is param.empty and not prop.get("nullable"):
            required.append(param.name)
    parameters = {"type": "object", "properties": properties, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _annotation_schema(annotation: Any, where: str) -> dict[str, Any]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return {**_plain_schema(rest[0], where), "nullable": True}
    return _plain_schema(annotation, where)


def _plain_schema(annotation: Any, where: str) -> dict[str, Any]:
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _plain_schema(args[0], where)}
    if origin is Literal:
        kinds = {_SCALARS.get(type(value)) for value in args}
        if len(kinds) == 1 and None not in kinds:
            return {"type": kinds.pop(), "enum": list(args)}
    shown = inspect.formatannotation(annotation)
    raise TypeError(f"{where}: unsupported type annotation {shown}; use one of: {SUPPORTED_TYPES}")


_SECTION = re.compile(r"(\s*)(?:Args|Arguments|Parameters):\s*\Z")
_ARG_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)\Z")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph as one line, {argument: description}) of a cleaned docstring."""
    lines = doc.splitlines()
    first: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        first.append(line.strip())
    args: dict[str, list[str]] = {}
    header = next((i for i, line in enumerate(lines) if _SECTION.match(line)), None)
    if header is not None:
        section_indent, entry_indent, current = _indent(lines[header]), None, None
        for line in lines[header + 1 :]:
            if not line.strip():
                continue
            if _indent(line) <= section_indent:  # the next section ("Returns:") or prose
                break
            entry_indent = _indent(line) if entry_indent is None else entry_indent
            entry = _ARG_ENTRY.match(line.strip())
            if entry and _indent(line) == entry_indent:
                current = entry[1]
                args[current] = [entry[2].strip()]
            elif current is not None:
                args[current].append(line.strip())
    return " ".join(first), {k: " ".join(p for p in v if p) for k, v in args.items() if any(v)}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


@dataclass(frozen=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]

    @classmethod
    def from_function(cls, fn: Callable[..., Any]) -> Tool:
        schema = tool_schema(fn)
        return cls(name=schema["function"]["name"], fn=fn, schema=schema)

    @property
    def parameters(self) -> dict[str, dict[str, Any]]:
        """Argument name -> its property schema, in signature order."""
        return self.schema["function"]["parameters"]["properties"]

    @property
    def required(self) -> list[str]:
        return self.schema["function"]["parameters"]["required"]


class ToolSet(Mapping[str, Tool]):
    """The tools an environment offers, by name; built from functions (or ``Tool``s)."""

    def __init__(self, tools: Iterable[Callable[..., Any] | Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            tool = item if isinstance(item, Tool) else Tool.from_function(item)
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}; rename one of the functions")
            self._tools[tool.name] = tool

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """One schema per tool, for ``apply_chat_template(tools=...)`` (copies: safe to edit)."""
        return [copy.deepcopy(tool.schema) for tool in self._tools.values()]


# --- parsing the model's calls --------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedCall:
    """One call block found in a model turn: a well-formed ``call`` or an ``error`` for it."""

    raw: str
    """The block as the model wrote it (an unclosed block runs to the end of the text)."""
    call: ToolCall | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        assert (self.call is None) != (self.error is None), "exactly one of call, error"


_QWEN_OPEN, _QWEN_CLOSE = "<tool_call>", "</tool_call>"
_QWEN_SHAPE = '<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>'


def _parse_qwen(text: str, tools: ToolSet) -> list[ParsedCall]:
    found: list[ParsedCall] = []
    pos = 0
    while (start := text.find(_QWEN_OPEN, pos)) != -1:
        end = text.find(_QWEN_CLOSE, start + len(_QWEN_OPEN))
        if end == -1:  # no later block can be closed either
            error = f"unclosed {_QWEN_OPEN}: no {_QWEN_CLOSE} after it"
            found.append(ParsedCall(raw=text[start:], error=error))
            break
        pos = end + len(_QWEN_CLOSE)
        found.append(_qwen_call(text[start + len(_QWEN_OPEN) : end], text[start:pos], tools))
    return found


def _qwen_call(body: str, raw: str, tools: ToolSet) -> ParsedCall:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as err:
        error = f"tool call is not valid JSON ({err}); write {_QWEN_SHAPE}"
        return ParsedCall(raw=raw, error=error)
    if not isinstance(obj, dict):
        error = f"tool call must be a JSON object, got {_json_type(obj)}; write {_QWEN_SHAPE}"
        return ParsedCall(raw=raw, error=error)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParsedCall(raw=raw, error=f'tool call has no "name" string; write {_QWEN_SHAPE}')
    if name not in tools:
        return ParsedCall(raw=raw, error=_unknown_tool(name, tools))
    arguments = obj.get("arguments", {})  # absent: no arguments (the check names missing ones)
    if not isinstance(arguments, dict):
        error = f'"arguments" of tool {name!r} must be a JSON object, got {_json_type(arguments)}'
        return ParsedCall(raw=raw, error=error)
    return ParsedCall(raw=raw, call=ToolCall(name, arguments))


_OPEN_TAG = re.compile(r"<([A-Za-z_][\w.-]*)>")
_SPACE = re.compile(r"\s*")


def _parse_xml(text: str, tools: ToolSet) -> list[ParsedCall]:
    found: list[ParsedCall] = []
    unclosed: set[str] = set()  # tools with no closing tag left in the text: do not search again
    pos = 0
    while tag := _OPEN_TAG.search(text, pos):
        pos = tag.end()
        name = tag[1]
        if name not in tools:  # prose, markup, or another tool's argument tags
            continue
        close = f"</{name}>"
        end = -1 if name in unclosed else text.find(close, tag.end())
        if end == -1:
            unclosed.add(name)
            error = f"unclosed <{name}>: no {close} after it"
            found.append(ParsedCall(raw=text[tag.start() :], error=error))
            continue
        pos = end + len(close)
        found.append(_xml_call(tools[name], text[tag.end() : end], text[tag.start() : pos]))
    return found


def _xml_call(tool: Tool, body: str, raw: str) -> ParsedCall:
    body = body.strip()
    first = _OPEN_TAG.match(body)
    bare = _bare_argument(tool)
    if bare is not None and not (first and first[1] in tool.parameters):
        return ParsedCall(raw=raw, call=ToolCall(tool.name, {bare: body}))
    arguments: dict[str, Any] = {}
    pos = _SPACE.match(body).end()
    while pos < len(body):
        tag = _OPEN_TAG.match(body, pos)
        if tag is None:
            outside = _clip(body[pos:])
            error = f"<{tool.name}> takes arguments as tags <arg>value</arg>; found {outside}"
            return ParsedCall(raw=raw, error=error)
        arg, close = tag[1], f"</{tag[1]}>"
        end = body.find(close, tag.end())
        if end == -1:
            return ParsedCall(raw=raw, error=f"unclosed <{arg}> inside <{tool.name}>")
        if arg in arguments:
            return ParsedCall(raw=raw, error=f"argument <{arg}> given twice in <{tool.name}>")
        arguments[arg] = _from_text(body[tag.end() : end].strip(), tool.parameters.get(arg))
        pos = _SPACE.match(body, end + len(close)).end()
    return ParsedCall(raw=raw, call=ToolCall(tool.name, arguments))


def _bare_argument(tool: Tool) -> str | None:
    """The argument a bare ``<tool>text</tool>`` body fills, if any.

    The tool's one required argument, or its one argument when none is required, provided
    it is a string: ``search(query: str, k: int = 3)`` takes ``<search>cats</search>``. A body
    that opens with one of the tool's argument tags is read as argument tags instead.
    """
    candidates = tool.required or list(tool.parameters)
    if len(candidates) == 1 and tool.parameters[candidates[0]]["type"] == "string":
        return candidates[0]
    return None


_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _from_text(text: str, prop: dict[str, Any] | None) -> Any:
    """An XML argument's text as its schema type where the text reads as one, else the text.

    Text that does not read as the type is passed on, and the argument check names the
    mismatch, so XML and JSON calls get the same errors.
    """
    if prop is None:
        return text
    kind = prop["type"]
    try:
        if prop.get("nullable") and kind != "string" and text in ("", "null"):
            return None
        if kind == "integer" and _INTEGER_TEXT.fullmatch(text):
            return int(text)
        if kind == "number" and _NUMBER_TEXT.fullmatch(text):
            return float(text)
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind == "array" and isinstance(value := json.loads(text), list):
            return value
    except (ValueError, RecursionError, OverflowError):  # e.g. an int past 4300 digits
        pass
    return text


CALL_FORMATS: dict[str, Callable[[str, ToolSet], list[ParsedCall]]] = {
    "qwen": _parse_qwen,
    "xml": _parse_xml,
}


def parse_tool_calls(text: str, *, tools: ToolSet, fmt: str) -> list[ParsedCall]:
    """The tool calls in one model turn, in order; text outside call blocks is ignored.

    Never raises for any ``text``; an unknown ``fmt`` (a configuration error) raises ValueError.
    """
    if fmt not in CALL_FORMATS:
        choices = ", ".join(CALL_FORMATS)
        raise ValueError(f"unknown tool-call format {fmt!r}; choose one of: {choices}")
    return CALL_FORMATS[fmt](text, tools)


# --- checking arguments ---------------------------------------------------------------------


class ToolArgumentError(ValueError):
    """A call's arguments do not fit its tool's schema; the message is shown to the model."""


def check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` checked against ``tool``'s schema, with ints given for numbers as floats.

    No other coercion: ``"3"`` for an integer, ``3.0`` for an integer and ``true`` for a
    number are errors. Raises ``ToolArgumentError`` naming the tool and every problem found.
    """
    params = tool.parameters
    problems = [
        f"missing required argument {name!r} ({_type_label(params[name])})"
        for name in tool.required
        if name not in arguments
    ]
    extra = [name for name in arguments if name not in params]
    if extra:
        takes = ", ".join(params) or "no arguments"
        problems.append(f"unexpected argument(s) {', '.join(map(repr, extra))}; it takes: {takes}")
    checked: dict[str, Any] = {}
    for name, value in arguments.items():
        if name in params:
            checked[name], problem = _check_value(value, params[name], f"argument {name!r}")
            problems += [problem] if problem else []
    if problems:
        raise ToolArgumentError(f"tool {tool.name!r}: " + "; ".join(problems))
    return checked


def _check_value(value: Any, prop: dict[str, Any], where: str) -> tuple[Any, str | None]:
    expected = _type_label(prop)
    if value is None:
        return None, None if prop.get("nullable") else f"{where} expects {expected}, got null"
    kind = prop["type"]
    if kind == "number" and type(value) is int:  # JSON has one number type; 2 means 2.0
        try:
            value = float(value)
        except OverflowError:
            return value, f"{where} expects {expected}, got an integer too large for one"
    if _json_type(value) != kind:
        return value, f"{where} expects {expected}, got {_json_type(value)} {_clip(value)}"
    if "enum" in prop and value not in prop["enum"]:
        return value, f"{where} expects {expected}, got {_clip(value)}"
    if kind == "array":
        items = []
        for i, item in enumerate(value):
            item, problem = _check_value(item, prop["items"], f"{where} item {i}")
            if problem:
                return value, problem
            items.append(item)
        value = items
    return value, None


def _type_label(prop: dict[str, Any]) -> str:
    label = prop["type"]
    if "enum" in prop:
        label = "one of " + ", ".join(json.dumps(v) for v in prop["enum"])
    elif label == "array":
        label = f"array of {_type_label(prop['items'])}"
    return f"{label} or null" if prop.get("nullable") else label


def _json_type(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return "null" if value is None else "boolean"
    for kind, name in ((int, "integer"), (float, "number"), (str, "string"), (list, "array")):
        if isinstance(value, kind):
            return name
    return "object" if isinstance(value, dict) else type(value).__name__


def _clip(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unknown_tool(name: str, tools: ToolSet) -> str:
    return f"unknown tool {name!r}; available: {', '.join(tools) or '(none)'}"


# --- running calls --------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    name: str
    """The tool called; "" for a call that could not be parsed."""
    content: str
    """The tool's return value as text, cut at the runner's ``max_chars``; "" on error."""
    error: str | None
    seconds: float


class _Job:
    def __init__(self, fn: Callable[..., Any], arguments: dict[str, Any]) -> None:
        self.fn, self.arguments = fn, arguments
        self.done = threading.Event()
        self.content = ""
        self.error: str | None = None

    def run(self) -> None:
        try:  # converting on this thread too, so a slow or failing __str__ is the tool's
            self.content = _as_text(self.fn(**self.arguments))
        except BaseException as err:  # SystemExit too: a tool must not end the episode
            self.error = f"ToolError: {type(err).__name__}: {err}".removesuffix(": ")
        finally:
            self.done.set()


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


class ToolRunner:
    """Runs checked calls, one fresh daemon thread per call, each with its own deadline.

    Python cannot stop a thread, so a call past ``timeout_s`` is abandoned: its result is an
    error and its thread runs on until the tool returns. Each timed-out call leaks that one
    thread (forever if the tool never returns); being a daemon it never blocks interpreter
    exit. Tools that may hang on I/O should set their own timeouts too. The runner keeps no
    per-call state, so one runner serves any number of calls, from any number of threads.
    """

    def __init__(self, tools: ToolSet, *, max_chars: int = 4000) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars={max_chars} must be at least 1")
        self.tools, self.max_chars = tools, max_chars

    def run(self, parsed: ParsedCall, *, timeout_s: float) -> ToolResult:
        """``call`` for a parsed call; a parse error becomes an error result (the tool not run)."""
        if parsed.call is None:
            return ToolResult(name="", content="", error=self._cut(parsed.error), seconds=0.0)
        return self.call(parsed.call, timeout_s=timeout_s)

    def call(self, call: ToolCall, *, timeout_s: float) -> ToolResult:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s} must be positive")
        start = time.perf_counter()
        tool = self.tools.get(call.name)
        if tool is None:
            return self._result(call.name, "", _unknown_tool(call.name, self.tools), start)
        try:
            arguments = check_arguments(tool, call.arguments)
        except ToolArgumentError as err:
            return self._result(call.name, "", str(err), start)
        job = _Job(tool.fn, arguments)
        threading.Thread(target=job.run, daemon=True, name=f"grouprl-tool-{tool.name}").start()
        if not job.done.wait(timeout_s):
            return self._result(call.name, "", f"timed out after {timeout_s:g}s", start)
        return self._result(call.name, job.content, job.error, start)

    def _result(self, name: str, content: str, error: str | None, start: float) -> ToolResult:
        seconds = time.perf_counter() - start
        error = None if error is None else self._cut(error)
        return ToolResult(name=name, content=self._cut(content), error=error, seconds=seconds)

    def _cut(self, text: str) -> str:
        cut = len(text) - self.max_chars
        return text if cut <= 0 else f"{text[: self.max_chars]}\n[truncated: {cut} more characters]"


def tool_message(result: ToolResult) -> dict[str, str]:
    """The chat message that feeds ``result`` back to the model; errors read as observations."""
    content = result.content if result.error is None else f"Error: {result.error}"
    return {"role": "tool", "name": result.name, "content": content}
