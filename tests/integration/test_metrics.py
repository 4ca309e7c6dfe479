"""``GET /metrics`` of a daemon running a simulated sweep, read with Prometheus's own text
parser (prometheus_client's): each family while the sweep runs with another queued behind it,
its values against the store once the sweep has ended, and the same values from the daemon
started again over the same store (the store is the truth, not the process)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_dashboard_support import HOST_TYPE, Service, service, wait_until

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

STORE_FAMILIES = (
    "orchestrator_sweeps",
    "orchestrator_queue_depth",
    "orchestrator_trials",
    "orchestrator_restarts_total",
)
"""The families read from the store alone: a restarted daemon reports them unchanged."""


def scrape(svc: Service) -> tuple[Samples, dict[str, str]]:
    """The samples by (name, labels), and each family's type."""
    status, body = svc.get("/metrics")
    assert status == 200, body
    samples: Samples = {}
    types = {}
    for family in text_string_to_metric_families(body.decode()):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types


def labelled(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in samples.items() if sample == name}


def store_count(svc: Service, sql: str) -> int:
    with sqlite3.connect(svc.daemon.state_dir / "orchestrator.db") as db:
        (count,) = db.execute(sql).fetchone()
    return int(count)


def trials_by_outcome(svc: Service, sweep: str) -> Counter[tuple[tuple[str, str], ...]]:
    """Each trial's latest attempt by (cause, state), from the results document."""
    status, results = svc.daemon.api(f"/sweeps/{sweep}/results")
    assert status == 200, results
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for trial in results["trials"]:
        latest[(trial["key"], trial["host"])] = trial  # attempts come in number order
    return Counter(
        (("cause", t["cause"] or ""), ("state", t["state"])) for t in latest.values()
    )


def check_while_running(samples: Samples, types: dict[str, str]) -> None:
    assert types["orchestrator_sweeps"] == "gauge"
    assert types["orchestrator_restarts"] == "counter"
    assert types["orchestrator_store_write_seconds"] == "histogram"
    sweeps = labelled(samples, "orchestrator_sweeps")
    assert sweeps[(("state", "running"),)] == 1 and sweeps[(("state", "queued"),)] == 1
    assert samples[("orchestrator_queue_depth", ())] == 1
    assert samples[("orchestrator_hosts_held", ())] == 2
    assert samples[("orchestrator_sweeps_active", ())] == 1
    (age,) = labelled(samples, "orchestrator_sweep_last_point_age_seconds").items()
    assert dict(age[0])["sweep"] == "metrics-first" and age[1] >= 0
    commits = samples[("orchestrator_store_write_seconds_count", (("op", "record_point"),))]
    assert commits >= 1
    assert samples[("process_cpu_seconds_total", ())] > 0


def test_metrics_follow_a_sweep_from_the_store_and_survive_a_restart(tmp_path: Any) -> None:
    with service(tmp_path, "127.0.0.181") as svc:
        assert svc.get("/metrics", token=None)[0] == 401
        svc.submit(svc.sweep_file("metrics-first", configs=1, contexts=[60]))
        svc.submit(svc.sweep_file("metrics-later", configs=1, contexts=[60]))
        points = "SELECT COUNT(*) FROM points"
        wait_until("a committed point", lambda: store_count(svc, points), svc.daemon)
        check_while_running(*scrape(svc))

        assert svc.daemon.api("/sweeps/metrics-later/cancel", method="POST")[0] == 202
        svc.daemon.wait_for("metrics-first", ("done", "failed"), timeout=150)
        ended, _ = scrape(svc)
        expected = trials_by_outcome(svc, "metrics-first")
        assert labelled(ended, "orchestrator_trials") == expected
        assert sum(expected.values()) == 4  # two hosts, the baseline and one config each
        sweeps = labelled(ended, "orchestrator_sweeps")
        assert sweeps[(("state", "cancelled"),)] == 1 and sum(sweeps.values()) == 2
        assert ended[("orchestrator_queue_depth", ())] == 0
        restarts = store_count(svc, "SELECT COUNT(*) FROM events WHERE kind='restart.counted'")
        assert labelled(ended, "orchestrator_restarts_total") == {
            (("host_type", HOST_TYPE),): restarts
        }
        assert restarts >= 4
        commits = ended[("orchestrator_store_write_seconds_count", (("op", "record_point"),))]
        assert commits == store_count(svc, "SELECT COUNT(*) FROM points")
        assert not labelled(ended, "orchestrator_sweep_last_point_age_seconds")
        assert ended[("orchestrator_hosts_held", ())] == 0
        assert ended[("orchestrator_sweeps_active", ())] == 0

        svc.daemon.terminate()
        svc.daemon.start()
        again, _ = scrape(svc)
    for family in STORE_FAMILIES:
        assert labelled(again, family) == labelled(ended, family), family
    writes = labelled(again, "orchestrator_store_write_seconds_count")
    assert (("op", "record_point"),) not in writes  # this process's own: it has written none
    print(json.dumps({"families": sorted({name for name, _ in again})}))
