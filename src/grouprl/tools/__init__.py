"""Tools: what a model calls during an episode, for grouprl's environments (``toolbox``)
and for agents behind the gateway (``agent``, ``wire``) alike; ``spec`` shows the path
of a call through the modules. Imports no torch.
"""
