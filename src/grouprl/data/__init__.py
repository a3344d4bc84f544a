"""Datasets, prompt rendering and the resumable row sampler (no torch imports)."""
