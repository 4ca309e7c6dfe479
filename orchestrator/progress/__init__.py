"""A running sweep's progress, one reading of it for every reader.

The runner reports each host's trial, step and points (``update(host, **fields)``);
:mod:`~orchestrator.progress.tracker` folds the reports into one state, and
:mod:`~orchestrator.progress.snapshot` is that state at one moment, with its words and its
JSON. Two readers hold a tracker: the live display of a foreground sweep
(:mod:`~orchestrator.progress.live`) and the daemon's per-sweep reports behind ``status`` and
``STATUS=`` (:mod:`~orchestrator.progress.reports`); the ``status`` client reads a snapshot
back from its JSON. This ``__init__`` imports nothing, so the client loads only the snapshot.
"""
