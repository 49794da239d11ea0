"""A crash after a group's last members were excluded for lack of a partner keeps their exclusions.

Found by an attacker playing whoever can kill the collector process: the members left in a group fallen below k
with no group to merge into (`below_k_no_partner`; a SafePub class fallen below k, `suppressed_class`) were
excluded by a signed closing shuffle_start, which the service stored, but their exclusion itself reached the
database only when the round finished. Killed in between (the release published, verdicts coming in), the
restarted service aborts the round with those members neither released nor excluded: its own signed, final
transcript failed `coutil verify` (`membership`: "neither released nor excluded (drop-subject)";
`exclusion_evidence`: "excluded ... by group 0 run 1's shuffle_start, not in the summary"), an honest collector
convicted of dropping records, and `collector status` counted them nowhere. Now every exclusion is reported
(`MemberExcluded`) and stored when it is made.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coutil.cli import main
from coutil.collector.service import identity_from_secret, load_or_create_secret, open_round
from coutil.collector.storage import CollectorStore
from coutil.net.memory import MemoryBus
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import SeededRandom
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches

TIMES = {"step_timeout": 10.0, "retry_interval": 1.0, "register_window": 30.0, "audit_window": 20.0,
         "random_records": 50}
#: SafePub: ages 10-30 are one class of exactly k = 3, ages 60-65 another (cut into two groups); one member of
#: the small class vanishes, the other two are `suppressed_class`, the rest released. The crash comes after the
#: release. MDAV: four subjects form one group; two vanish, the other two are `below_k_no_partner` (no group to
#: merge into). The crash comes right after that group is dissolved.
CASES = {
    "suppressed_class": (RoundConfig.from_mapping({
        "qi": ("age", "height"), "confidential": ("income",), "k": 3, "grouping": "safepub",
        "safepub_bins": {"age": [0, 50, 100], "height": [0, 300]}, "expected_subjects": 9, **TIMES}),
        [10, 20, 30, 60, 61, 62, 63, 64, 65], 1, "auditing"),
    "below_k_no_partner": (RoundConfig.from_mapping({
        "qi": ("age", "height"), "confidential": ("income",), "k": 3, "expected_subjects": 4, **TIMES}),
        [10, 20, 30, 40], 2, "dissolved"),
}


@pytest.mark.parametrize("reason", sorted(CASES))
def test_members_excluded_for_lack_of_a_partner_are_stored_before_a_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], reason: str) -> None:
    config, ages, vanishing, crash_at = CASES[reason]
    db = tmp_path / "collector.sqlite"
    secret = load_or_create_secret(db)
    service = open_round(CollectorStore(db), secret, config, 0.0).collector
    key = identity_from_secret(secret).public
    root, caches = SeededRandom(3), SharedCaches()
    subjects = [SubjectNode(collector_key=key, qi=np.array([age, 170.0]), confidential=np.array([1000.0 * i]),
                            rng=root.fork(f"s{i}"), caches=caches, retry_interval=1.0) for i, age in enumerate(ages)]
    bus = MemoryBus(seed=3, record_publications=True)
    bus.add_node("collector", service)
    for subject in subjects:
        bus.add_node(subject.sid, subject)
    assert bus.run_until(until=100.0, predicate=lambda: service.node.state == "sharing") == "predicate"
    for gone in subjects[:vanishing]:
        bus.vanish(gone.sid, bus.now)

    def crash_point() -> bool:
        if crash_at == "auditing":
            return service.node.state == "auditing"
        return any(who == "collector" and e.kind == "dissolved" for who, e in bus.events or ())

    assert bus.run_until(until=400.0, predicate=crash_point) == "predicate"
    assert not service.finished
    excluded = {str(row["sid"]): str(row["reason"]) for row in service.node.outcome().excluded}
    assert list(excluded.values()).count(reason) == 2
    bus.vanish("collector", bus.now)  # kill -9

    store = CollectorStore(db)
    stored = store.load_round(service.round_id)
    assert {s.sid: stored.exclusions.get(s.public_key) for s in subjects if s.public_key in stored.exclusions} \
        == excluded  # every exclusion made before the crash, with its reason (before: the partnerless missing)
    assert open_round(store, secret, config, bus.now + 1.0).how.startswith("new after aborting")
    store.close()
    transcript = tmp_path / "transcript.json"
    assert main(["collector", "export", "--db", str(db), "--round", service.round_id.hex(),
                 "--transcript", str(transcript)]) == 0
    capsys.readouterr()
    assert main(["verify", str(transcript), "--json"]) == 0  # before: 3, the honest collector convicted
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["exclusion_evidence"]["status"] == "pass", checks["exclusion_evidence"]
    if crash_at == "auditing":
        assert checks["membership"]["status"] == "pass", checks["membership"]
