"""The ``grouprl`` command line, a thin layer over the Python API (``grouprl/api.py``):
``recipes`` (recipes, tasks, init, convert, plan), ``run`` (train, eval, index build),
``ckpt`` (ckpt ..., export), ``jobs`` (submit, jobs ...); ``app`` holds what they share.

Every command validates the whole config before anything heavy is imported, so a mistake
fails in well under a second; ``--help``, ``recipes`` and ``plan`` never import torch.
"""

# importing registers the commands, in the order --help lists them: not sorted
from grouprl.cli import recipes, run, ckpt, jobs  # noqa: F401, I001
from grouprl.cli.app import app as app  # the Typer app, for tests and embedding


def main() -> None:
    """Console entry point (``grouprl``)."""
    app()
