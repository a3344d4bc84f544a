"""docs/config.md is the schema's reference, written by scripts/config_reference.py."""

from __future__ import annotations

from pathlib import Path

from grouprl.config.key_hints import all_paths, model_in
from grouprl.config.reference import DOC_PATH, reference_markdown
from grouprl.config.reward import RewardFunction
from grouprl.config.schema import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_config_reference_is_the_schema_written_out():
    doc = (ROOT / DOC_PATH).read_text()
    assert doc == reference_markdown(), (
        "docs/config.md is stale: run python scripts/config_reference.py"
    )


def test_the_reference_has_every_key_with_its_type_default_and_docstring():
    text = reference_markdown()
    for path in all_paths(RunConfig):
        model, field = RunConfig, None
        for part in path.split("."):
            field = model.model_fields[part]
            model = model_in(field.annotation) or model
        if "." not in path and model_in(field.annotation) is not None:
            assert f"\n## `{path}`\n" in text, path  # a top-level section: a heading
            continue
        assert f"| `{path}` |" in text, path
        assert field.description, f"{path} has no docstring for the reference"
        if model_in(field.annotation) is None:
            cell = " ".join(field.description.split()).replace("|", "\\|")
            assert cell in text, path
    for name in RewardFunction.model_fields:  # a list's entries: KEY.N.name
        assert f"| `reward.functions.N.{name}` |" in text
    assert "| `rollout.n` | integer >= 1 | `8` |" in text  # type with bounds, default
    assert "| `rollout.engine` | one of vllm, hf, server | `vllm` |" in text
    assert "| `data.eval.limit` | integer >= 1, or null | `200` |" in text  # the section's own
    assert "| `critic.path` | text | required |" in text


def test_the_readme_and_docs_link_the_reference():
    assert "docs/config.md" in (ROOT / "README.md").read_text()
    for doc in ("data.md", "rewards.md", "python-api.md"):
        assert "config.md" in (ROOT / "docs" / doc).read_text(), doc
