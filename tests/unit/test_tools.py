"""Tool schemas from functions, parsing the model's calls, argument checks, and the runner."""

from __future__ import annotations

import random
import time
from typing import Literal, Optional

import pytest

from grouprl.tools.arguments import ToolArgumentError, argument_problems, check_arguments
from grouprl.tools.calls import CALL_FORMATS, ParsedCall, ToolCall, parse_tool_calls
from grouprl.tools.runner import ToolResult, ToolRunner, tool_message
from grouprl.tools.spec import Tool, ToolSet, tool_schema


def search(
    query: str,
    k: int = 3,
    min_score: float | None = None,
    exact: bool = False,
    sources: list[str] | None = None,
    lang: Optional[Literal["en", "fr"]] = None,  # noqa: UP045 (Optional is supported too)
) -> str:
    """Search the corpus
    for passages.

    The index is BM25 over the shipped documents.

    Args:
        query: What to look for.
        k (int): How many passages to return,
            best first.
        min_score: Drop passages scoring below this.
        sources: Only these documents.

    Returns:
        The passages, one per line.
    """
    return f"{k} results for {query}"


def add(a: int, b: float) -> float:
    """Add two numbers."""
    return a + b


def now() -> str:
    """The current time."""
    return "noon"


TOOLS = ToolSet([search, add, now])

# --- schemas --------------------------------------------------------------------------------


def test_schema_of_a_documented_function():
    assert tool_schema(search) == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the corpus for passages.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "k": {
                        "type": "integer",
                        "description": "How many passages to return, best first.",
                    },
                    "min_score": {
                        "type": "number",
                        "nullable": True,
                        "description": "Drop passages scoring below this.",
                    },
                    "exact": {"type": "boolean"},
                    "sources": {
                        "type": "array",
                        "items": {"type": "string"},
                        "nullable": True,
                        "description": "Only these documents.",
                    },
                    "lang": {"type": "string", "enum": ["en", "fr"], "nullable": True},
                },
                "required": ["query"],
            },
        },
    }


def test_schema_matches_transformers_get_json_schema():
    from transformers.utils import get_json_schema

    def lookup(title: str, year: int, tags: list[str], mode: Literal["a", "b"] = "a") -> str:
        """Look a title up.

        Args:
            title: The title.
            year: Year of publication.
            tags: Tags to match.
            mode: Match mode.
        """
        return title

    theirs = get_json_schema(lookup)
    theirs["function"].pop("return", None)
    assert tool_schema(lookup) == theirs


def test_schema_without_docstring_or_arguments():
    def ping(host: str, *, port: int = 80):
        pass

    schema = tool_schema(ping)["function"]
    assert schema["description"] == ""
    assert schema["parameters"]["properties"] == {
        "host": {"type": "string"},
        "port": {"type": "integer"},
    }
    assert schema["parameters"]["required"] == ["host"]
    assert tool_schema(now)["function"]["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
    }


def test_missing_annotation_names_function_and_argument():
    def lookup(title: str, year) -> str:
        return title

    with pytest.raises(
        TypeError, match=r"'lookup' argument 'year' has no type annotation.*list\[X\]"
    ):
        tool_schema(lookup)


@pytest.mark.parametrize("annotation", [dict, "dict[str, int]", "int | str", "Literal[1, 'a']"])
def test_unsupported_annotation_names_function_argument_and_supported_types(annotation):
    def lookup(title: str, extra: int) -> str:
        return title

    lookup.__annotations__["extra"] = annotation
    with pytest.raises(TypeError, match=r"'lookup' argument 'extra': unsupported type") as err:
        tool_schema(lookup)
    assert "str, int, float, bool, list[X], Literal[...]" in str(err.value)


def test_varargs_and_lambdas_are_refused():
    def many(*queries: str) -> str:
        return ""

    with pytest.raises(TypeError, match=r"'many' argument 'queries'.*keyword arguments"):
        tool_schema(many)
    with pytest.raises(TypeError, match="identifier"):
        tool_schema(lambda query: query)


def test_toolset_refuses_duplicate_names_and_gives_schemas():
    with pytest.raises(ValueError, match="two tools are named 'search'"):
        ToolSet([search, Tool.from_function(search)])
    assert list(TOOLS) == ["search", "add", "now"]
    assert [s["function"]["name"] for s in TOOLS.schemas()] == ["search", "add", "now"]
    TOOLS.schemas()[0]["function"]["name"] = "edited"  # copies: the tool set is unchanged
    assert TOOLS["search"].schema["function"]["name"] == "search"


def test_tiny_model_chat_template_accepts_the_schemas():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained("src/grouprl/assets/tiny-arith")
    messages = [{"role": "user", "content": "hi"}]
    text = tokenizer.apply_chat_template(messages, tools=TOOLS.schemas(), tokenize=False)
    assert "hi" in text


# --- parsing: qwen --------------------------------------------------------------------------


def qwen(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def test_qwen_one_call():
    block = qwen('{"name": "search", "arguments": {"query": "capital of France", "k": 2}}')
    text = f"Let me look that up.\n{block}"
    assert parse_tool_calls(text, tools=TOOLS, fmt="qwen") == [
        ParsedCall(raw=block, call=ToolCall("search", {"query": "capital of France", "k": 2}))
    ]


def test_qwen_two_calls_in_order_and_missing_arguments_mean_none():
    text = (
        qwen('{"name": "add", "arguments": {"a": 1, "b": 2}}') + " and " + qwen('{"name": "now"}')
    )
    calls = parse_tool_calls(text, tools=TOOLS, fmt="qwen")
    assert [c.call for c in calls] == [ToolCall("add", {"a": 1, "b": 2}), ToolCall("now", {})]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ('{"name": "search", "arguments": {"query": }', "not valid JSON"),
        ('["search"]', "must be a JSON object, got array"),
        ('{"arguments": {"query": "x"}}', 'no "name" string'),
        ('{"name": 3, "arguments": {}}', 'no "name" string'),
        ('{"name": "serch", "arguments": {}}', "unknown tool 'serch'; available: search, add, now"),
        ('{"name": "search", "arguments": "query=x"}', "must be a JSON object, got string"),
        ('{"name": "search", "arguments": ["x"]}', "must be a JSON object, got array"),
        ("[" * 100_000, "not valid JSON"),
    ],
)
def test_qwen_malformed_calls_are_errors(body, error):
    (parsed,) = parse_tool_calls("ok " + qwen(body), tools=TOOLS, fmt="qwen")
    assert parsed.call is None and error in parsed.error
    assert parsed.raw == qwen(body)


def test_qwen_unclosed_block_is_an_error_and_text_without_calls_is_empty():
    good = qwen('{"name": "now"}')
    calls = parse_tool_calls(good + ' <tool_call>{"name": "now"}', tools=TOOLS, fmt="qwen")
    assert calls[0].call == ToolCall("now", {})
    assert calls[1].error.startswith("unclosed <tool_call>")
    assert calls[1].raw == '<tool_call>{"name": "now"}'
    assert parse_tool_calls("The answer is 4. </tool_call>", tools=TOOLS, fmt="qwen") == []


# --- parsing: xml ---------------------------------------------------------------------------


def test_xml_argument_tags_read_as_schema_types():
    text = "Adding: <add>\n  <a>2</a>\n  <b>0.5</b>\n</add> done"
    (parsed,) = parse_tool_calls(text, tools=TOOLS, fmt="xml")
    assert parsed == ParsedCall(raw=text[8:-5], call=ToolCall("add", {"a": 2, "b": 0.5}))
    text = '<search><query> cats </query><exact>TRUE</exact><sources>["a"]</sources></search>'
    (parsed,) = parse_tool_calls(text, tools=TOOLS, fmt="xml")
    assert parsed.call.arguments == {"query": "cats", "exact": True, "sources": ["a"]}


def test_xml_text_that_does_not_read_as_the_type_is_left_for_the_check():
    (parsed,) = parse_tool_calls("<add><a>two</a><b>1</b></add>", tools=TOOLS, fmt="xml")
    assert parsed.call.arguments == {"a": "two", "b": 1.0}
    with pytest.raises(ToolArgumentError, match="'a' expects integer, got string 'two'"):
        check_arguments(TOOLS["add"], parsed.call.arguments)


def test_xml_bare_body_fills_the_single_required_string_argument():
    text = "<search>capital of <b>France</b></search>"
    assert parse_tool_calls(text, tools=TOOLS, fmt="xml")[0].call == ToolCall(
        "search", {"query": "capital of <b>France</b>"}
    )
    (parsed,) = parse_tool_calls("<add>1 + 2</add>", tools=TOOLS, fmt="xml")
    assert "takes arguments as tags <arg>value</arg>; found '1 + 2'" in parsed.error


def test_xml_only_known_tool_tags_count_and_unclosed_tags_are_errors():
    text = "<think>use <b>search</b></think> <now></now> <search>cats <add><a>1</a><b>2</b></add>"
    calls = parse_tool_calls(text, tools=TOOLS, fmt="xml")
    assert [(c.call, c.error) for c in calls] == [
        (ToolCall("now", {}), None),
        (None, "unclosed <search>: no </search> after it"),
        (ToolCall("add", {"a": 1, "b": 2.0}), None),
    ]
    assert calls[1].raw == "<search>cats <add><a>1</a><b>2</b></add>"
    (parsed,) = parse_tool_calls("<add><a>1</a><b>2</add>", tools=TOOLS, fmt="xml")
    assert parsed.error == "unclosed <b> inside <add>"
    (parsed,) = parse_tool_calls("<add><a>1</a><a>2</a></add>", tools=TOOLS, fmt="xml")
    assert parsed.error == "argument <a> given twice in <add>"


def test_unknown_format_is_a_config_error():
    with pytest.raises(
        ValueError, match="unknown tool-call format 'json'; choose one of: qwen, xml"
    ):
        parse_tool_calls("", tools=TOOLS, fmt="json")


@pytest.mark.parametrize("fmt", list(CALL_FORMATS))
def test_no_model_text_raises(fmt):
    tags = "<tool_call> </tool_call> <search> </search> <query> </query> <add> </add> <a> </a>"
    json_bits = ['{"name": "search", "arguments": {', '"query": "x"', "}", "[", "null"]
    pieces = tags.split() + json_bits
    pieces += ["<", ">", "/", "\n", "x", "9" * 5000]  # 5000 digits: past int()'s limit
    rng = random.Random(0)
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        for parsed in parse_tool_calls(text, tools=TOOLS, fmt=fmt):
            assert isinstance(parsed, ParsedCall) and parsed.raw in text


# --- argument checks ------------------------------------------------------------------------


def test_arguments_that_fit_pass_and_ints_become_floats():
    assert check_arguments(TOOLS["add"], {"a": 1, "b": 2}) == {"a": 1, "b": 2.0}
    assert type(check_arguments(TOOLS["add"], {"a": 1, "b": 2})["b"]) is float
    args = {"query": "x", "min_score": None, "sources": ["a", "b"], "lang": "fr"}
    assert check_arguments(TOOLS["search"], args) == args


@pytest.mark.parametrize(
    ("tool", "arguments", "error"),
    [
        ("search", {}, "tool 'search': missing required argument 'query' (string)"),
        ("now", {"tz": "UTC"}, "tool 'now': unexpected argument(s) 'tz'; it takes: no arguments"),
        ("search", {"query": "x", "q": 1}, "unexpected argument(s) 'q'; it takes: query, k, "),
        ("add", {"a": "3", "b": 1}, "tool 'add': argument 'a' expects integer, got string '3'"),
        ("add", {"a": 3.0, "b": 1}, "argument 'a' expects integer, got number 3.0"),
        ("add", {"a": 1, "b": True}, "argument 'b' expects number, got boolean True"),
        ("add", {"a": None, "b": 1}, "argument 'a' expects integer, got null"),
        ("search", {"query": "x", "lang": "de"}, 'one of "en", "fr" or null, got \'de\''),
        ("search", {"query": "x", "sources": ["a", 2]}, "'sources' item 1 expects string, got"),
        ("search", {"query": "x", "sources": "a"}, "expects array of string or null, got string"),
    ],
)
def test_argument_errors_name_tool_argument_value_and_type(tool, arguments, error):
    with pytest.raises(ToolArgumentError) as err:
        check_arguments(TOOLS[tool], arguments)
    assert error in str(err.value)


def test_every_argument_problem_is_reported():
    with pytest.raises(ToolArgumentError) as err:
        check_arguments(TOOLS["add"], {"a": "1", "c": 2})
    assert str(err.value) == (
        "tool 'add': missing required argument 'b' (number); "
        "unexpected argument(s) 'c'; it takes: a, b; "
        "argument 'a' expects integer, got string '1'"
    )


def test_one_json_schema_check_serves_both_call_paths():
    """jsonschema checks environments' and agents' calls alike; "integer" reads as Python's
    for an environment's functions (3.0 refused) and as JSON Schema's for an agent's."""
    params = {
        "type": "object",
        "properties": {
            "k": {"type": "integer", "minimum": 1},
            "tag": {"type": "string", "pattern": "^[a-z]+$", "nullable": True},
        },
        "required": ["k"],
    }
    assert argument_problems({"k": 3.0, "tag": None}, params, strict_integers=False) == []
    assert argument_problems({"k": 3.0}, params, strict_integers=True) == [
        "argument 'k' expects integer, got number 3.0"
    ]
    assert argument_problems({"k": 0, "tag": "A"}, params, strict_integers=False) == [
        "argument 'k': 0 is less than the minimum of 1",
        "argument 'tag': 'A' does not match '^[a-z]+$'",
    ]
    deep = {"k": 1}
    for _ in range(100):
        deep = {"k": deep}
    assert argument_problems(deep, params, strict_integers=False) == [
        "arguments are nested more than 64 levels deep"
    ]


# --- running --------------------------------------------------------------------------------


def test_runner_returns_text_of_the_result():
    def stats(word: str):
        """Word statistics."""
        return {"word": word, "length": len(word), "café": True}

    def thing(word: str):
        return object.__new__(type("Thing", (), {"__str__": lambda self: "a thing"}))

    runner = ToolRunner(ToolSet([search, add, stats, thing]))
    result = runner.call(ToolCall("search", {"query": "cats"}), timeout_s=5)
    assert (result.name, result.content, result.error) == ("search", "3 results for cats", None)
    assert runner.call(ToolCall("add", {"a": 1, "b": 2}), timeout_s=5).content == "3.0"
    stats_result = runner.call(ToolCall("stats", {"word": "hi"}), timeout_s=5)
    assert stats_result.content == '{"word": "hi", "length": 2, "café": true}'
    assert runner.call(ToolCall("thing", {"word": "hi"}), timeout_s=5).content == "a thing"


def test_runner_reports_raising_tools_bad_arguments_and_unknown_tools():
    def fails(query: str) -> str:
        raise LookupError(f"no index for {query!r}")

    def exits(query: str) -> str:
        raise SystemExit(3)

    runner = ToolRunner(ToolSet([fails, exits, add]))
    result = runner.call(ToolCall("fails", {"query": "x"}), timeout_s=5)
    assert result == ToolResult(
        "fails", "", "ToolError: LookupError: no index for 'x'", result.seconds
    )
    assert (
        runner.call(ToolCall("exits", {"query": "x"}), timeout_s=5).error
        == "ToolError: SystemExit: 3"
    )
    bad = runner.call(ToolCall("add", {"a": 1}), timeout_s=5)
    assert bad.error == "tool 'add': missing required argument 'b' (number)"
    unknown = runner.call(ToolCall("serch", {}), timeout_s=5)
    assert unknown.error == "unknown tool 'serch'; available: fails, exits, add"


def test_hung_tool_times_out_without_holding_the_caller():
    def hang(query: str) -> str:
        time.sleep(3)
        return "late"

    runner = ToolRunner(ToolSet([hang, now]))
    start = time.perf_counter()
    result = runner.call(ToolCall("hang", {"query": "x"}), timeout_s=0.2)
    elapsed = time.perf_counter() - start
    assert result.error == "timed out after 0.2s" and result.content == ""
    assert result.seconds >= 0.2 and elapsed < 1.0
    assert runner.call(ToolCall("now", {}), timeout_s=1).content == "noon"  # the runner goes on


def test_long_results_and_errors_are_truncated_with_a_marker():
    def dump(query: str) -> str:
        return "x" * 30

    runner = ToolRunner(ToolSet([dump]), max_chars=10)
    assert runner.call(ToolCall("dump", {"query": ""}), timeout_s=5).content == (
        "xxxxxxxxxx\n[truncated: 20 more characters]"
    )
    error = runner.call(ToolCall("dump", {}), timeout_s=5).error
    assert error == "tool 'dump\n[truncated: 45 more characters]"


def test_run_turns_parse_errors_into_results():
    runner = ToolRunner(TOOLS)
    parsed = parse_tool_calls(
        qwen('{"name": "serch"}') + qwen('{"name": "now"}'), tools=TOOLS, fmt="qwen"
    )
    results = [runner.run(p, timeout_s=5) for p in parsed]
    assert results[0] == ToolResult(
        "", "", "unknown tool 'serch'; available: search, add, now", 0.0
    )
    assert (results[1].name, results[1].content) == ("now", "noon")


def test_tool_message_for_results_and_errors():
    ok = ToolResult(name="search", content="Paris", error=None, seconds=0.1)
    assert tool_message(ok) == {"role": "tool", "name": "search", "content": "Paris"}
    failed = ToolResult(
        name="serch", content="", error="unknown tool 'serch'; available: search", seconds=0.0
    )
    assert tool_message(failed) == {
        "role": "tool",
        "name": "serch",
        "content": "Error: unknown tool 'serch'; available: search",
    }
