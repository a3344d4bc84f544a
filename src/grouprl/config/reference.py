"""docs/config.md, the configuration reference, written from the schema: every key with its
type, default and docstring, section by section. Imports no torch.

    RunConfig ──► a table per section ──► docs/config.md
    (config/:      key | type | default | description;
     field docstrings)   nested sections (data.train, train.lora) get their own

``python scripts/config_reference.py`` writes the file; ``tests/unit/test_config_reference.py``
regenerates it in memory and fails when the file differs.
"""

from __future__ import annotations

import re

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from grouprl.config.field_text import allowed_text, yaml_text
from grouprl.config.key_hints import is_list, model_in
from grouprl.config.schema import RunConfig

DOC_PATH = "docs/config.md"
SCRIPT = "scripts/config_reference.py"

HEAD = f"""# Configuration reference

Every key of a run's configuration, section by section, with its type, its default and
what it does. This file is generated from the schema (`RunConfig` in
`src/grouprl/config/schema.py` and its sections' modules beside it, whose field docstrings
are the text below) by `python {SCRIPT}`; edit the schema, not this file
(`tests/unit/test_config_reference.py` fails when the two differ).

A recipe sets keys in YAML (`rollout: {{n: 8}}`); an override sets one on the command line
or in `grouprl.load_config` as `key.sub=value`, the value parsed as YAML (`rollout.n=8`,
`data.eval=null`, `reward.functions=[{{name: format}}]`); a list entry is addressed by its
index (`reward.functions.0.weight=0.5`), a key of `env.args` by its name (`env.args.k=3`).
"null" turns off an optional section or value. A key that was renamed still works, with a
warning naming its new key (docs/migration.md lists them).
Cross-field rules (batch arithmetic, what needs what) are checked by `grouprl plan` before
anything loads.
"""

NOTES = {
    "algo": "The defaults below are `grpo`'s: `algo.name` fills in its preset's values for "
    "the keys a recipe leaves out (`src/grouprl/config/algorithms.py`, docs/algorithms.md).",
}
"""A sentence for a section that its docstrings do not say."""


def reference_markdown() -> str:
    """The whole of docs/config.md."""
    top = [name for name, f in RunConfig.model_fields.items() if model_in(f.annotation) is None]
    sections = [name for name in RunConfig.model_fields if name not in top]
    index = ", ".join(f"[`{name}`](#{name})" for name in sections)
    parts = [HEAD, f"Sections: {index}.\n", "## Top level\n", _table(RunConfig, top, prefix="")]
    for name in sections:
        parts += _section(RunConfig.model_fields[name], path=name, level=2, default=None)
    return "\n".join(parts)


def _section(field: FieldInfo, *, path: str, level: int, default: object) -> list[str]:
    """The heading, text and table of the section at ``path``, then its own sections."""
    model = model_in(field.annotation)
    assert model is not None
    listed = is_list(field.annotation)
    if default is None:
        default = field.get_default(call_default_factory=True)
    if listed:
        path, default = f"{path}.N", None  # the defaults of an entry are the class's
    heading = f"{'#' * level} `{path}`\n"
    own = field.description if level == 2 else None  # deeper: in the parent's table
    text = [_clean(t) for t in (own, model.__doc__, NOTES.get(path)) if t]
    if listed:
        text.append(f"A list; each entry is a mapping of the keys below (`{path}.KEY`).")
    elif default is None:
        text.append(f"Default: null (the section is off); set `{path}` to turn it on.")
    names = list(model.model_fields)
    out = [heading, *(t + "\n" for t in text), _table(model, names, prefix=path, default=default)]
    for name in names:
        sub = model.model_fields[name]
        if model_in(sub.annotation) is not None:
            inner = dict(default).get(name) if isinstance(default, BaseModel) else None
            out += _section(sub, path=f"{path}.{name}", level=level + 1, default=inner)
    return out


def _table(model: type[BaseModel], names: list[str], *, prefix: str, default: object = None) -> str:
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for name in names:
        field = model.model_fields[name]
        key = f"{prefix}.{name}" if prefix else name
        value = _default(field, name=name, instance=default)
        description = _clean(field.description or "")
        rows.append(f"| `{key}` | {_cell(allowed_text(field))} | {value} | {description} |")
    return "\n".join(rows) + "\n"


def _default(field: FieldInfo, *, name: str, instance: object) -> str:
    """The default as a table cell: from the enclosing section's default when it has one
    (``data.eval``'s split is `test`), else the field's; a section's reads "see below"."""
    if model_in(field.annotation) is not None and not is_list(field.annotation):
        value = field.get_default(call_default_factory=True)
        return "null" if value is None else "(below)"
    if field.is_required():
        return "required"
    if isinstance(instance, BaseModel):
        value = dict(instance)[name]
    else:
        value = field.get_default(call_default_factory=True)
    text = yaml_text(value)
    return f"`{_cell(text)}`" if text else '`""`'


def _clean(text: str) -> str:
    """A docstring as one table-safe line."""
    return _cell(re.sub(r"\s+", " ", text).strip())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
