"""What talks to the kernel, below everything that runs processes: which namespaces and
filters this kernel allows (``namespaces``), process sessions and the signals they get
(``sessions``), and process trees (``tree``). Standard library only."""
