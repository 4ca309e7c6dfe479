"""Sweep results in formats other tools read (pure conversions; the ``export`` verb writes them).

:mod:`orchestrator.export.benchmark_report`: llm-d's Benchmark Report, one document per measured
throughput point.
"""
