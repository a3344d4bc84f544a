"""Raises: exit code 1, a traceback on stderr."""

raise ValueError("boom")
