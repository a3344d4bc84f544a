"""The driver layer: the run of one training job, in the process that owns it.

``run`` builds the parts and runs sessions (restarts, preemption, the report);
``loop`` is one step, read top to bottom; ``checkpointing`` decides what a checkpoint
holds and puts it back; ``overlap`` generates the next batch while this one trains;
``evaluate`` scores held-out prompts. The driver calls the worker layer
(``grouprl.workers``) and the shared parts below it, never the other way.
"""
