"""The driver layer: the run of one training job, in the process that owns it. It calls
the worker layer (``grouprl.workers``) and the shared parts below it, never the other way.
"""
