"""A serving engine that exists only in the tests: proof that the engine seam is real.

``server.py`` is a tiny standalone HTTP server (``python -m tests.toyengine.server``) with its
own flags, its own log lines, its own readiness endpoint and its own ``/metrics`` names;
``engine.py`` is :class:`~tests.toyengine.engine.ToyEngine`, which fills
:class:`orchestrator.engines.base.Engine` for it. A test registers it with
``orchestrator.engines.register`` and runs a whole sweep through the orchestrator on a
simulated host; nothing outside this package names it.
"""
