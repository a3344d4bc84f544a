"""The training roles, one class each: ``PolicyWorker``, ``ReferenceWorker``,
``CriticWorker``. A worker group builds one instance per rank (``dist.group``); the
driver calls them through ``dist.group.Role``.
"""
