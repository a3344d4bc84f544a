"""Algorithm math: pure functions of tensors, registered by name.

Suffixes: B batch (samples), T tokens, P prompts, G group (samples per prompt), V vocab.
"""
