"""Search strategies behind the runner's trial source: which config to try next on a host type.

``grid`` is the plan in order (:class:`orchestrator.trialsource.PlanTrialSource`); ``random``
and ``adaptive`` propose one trial at a time from the results stored so far
(:mod:`orchestrator.search.source`). Every part rebuilds its state from the store, so a fresh
strategy over the same store proposes what a killed one would have (docs/search.md).

This package's ``__init__`` imports nothing: the runner imports :mod:`.budget` and
:mod:`.deadline` from here, and :mod:`.source` imports the runner's trial-source seam.
"""
