"""Observability for training runs: metrics sinks, progress display, samples, report.

Importing this package loads neither torch, tensorboard, wandb nor matplotlib;
each backend imports its library when it is built.
"""
