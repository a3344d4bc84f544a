"""grouprl: reinforcement-learning post-training of LLMs (GRPO and family).

Importing the package is cheap: no torch until a command needs it.
"""

__version__ = "0.1.0"
