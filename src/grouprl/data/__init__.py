"""Datasets, prompt rendering and the resumable row sampler (no torch imports)."""

from grouprl.data.prompts import render_prompt, render_prompts, render_questions
from grouprl.data.sampler import PromptSampler
from grouprl.data.sources import DataError, LoadReport, get_field, load_rows, read_rows

__all__ = [
    "DataError",
    "LoadReport",
    "PromptSampler",
    "get_field",
    "load_rows",
    "read_rows",
    "render_prompt",
    "render_questions",
    "render_prompts",
]
