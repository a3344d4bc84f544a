"""The driver layer: the run of one training job, in the process that owns it.

``run`` builds the parts and runs sessions (restarts, preemption, the report);
``loop`` is one step, read top to bottom; ``checkpointing`` decides what a checkpoint
holds and puts it back; ``stream`` generates rounds while the policy trains
(rollout.max_staleness >= 1) under admission control;
``evaluate`` scores held-out prompts. The driver calls the worker layer
(``grouprl.workers``) and the shared parts below it, never the other way.
"""
