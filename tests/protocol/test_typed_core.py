"""The typed core: transition tables keyed by typed states and message classes, typed events.

- the dispatch tables (`TRANSITIONS`, `STATE_EDGES`) cover every state and are exactly what the
  spec's generated section draws (parsed back from protocol/SPEC.md);
- every event class renders a JSON-serializable trace line, and the unions name every class;
- a whole in-memory round (with a false complainer, so blame and exclusions happen) emits only events
  of its node's declared union, with the kinds the trace always had.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import re
import typing
from pathlib import Path

import pytest

from coutil.net.memory import MemoryBus
from coutil.protocol import collector, crypto, dispatch, events, subject
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import CollectorEvent, Event, SubjectEvent
from coutil.protocol.messages import MESSAGE_TYPES, Message, Vote
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.protocol.states import CollectorState, SubjectState
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.round.simulation import synthetic_dataset

SPEC = Path(__file__).parents[2] / "protocol" / "SPEC.md"
CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50,
                     step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)

MACHINES = [("Subject", subject.TRANSITIONS, subject.STATE_EDGES, SubjectState),
            ("Collector", collector.TRANSITIONS, collector.STATE_EDGES, CollectorState)]


def _spec_section(title: str) -> tuple[set[tuple[str, str]], dict[str, list[str]]]:
    """(edges, state -> accepted tags) as protocol/SPEC.md §11 draws them for one machine."""
    text = SPEC.read_text(encoding="utf-8")
    generated = text[text.index("<!-- BEGIN GENERATED: states -->"):text.index("<!-- END GENERATED: states -->")]
    section = generated.split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]
    edges = set(re.findall(r"^    (\w+) --> (\w+)$", section, flags=re.MULTILINE))
    rows: dict[str, list[str]] = {}
    for state, accepted in re.findall(r"^\| (\w+) \| (.+) \|$", section, flags=re.MULTILINE):
        if state != "state":  # the header row
            rows[state] = re.findall(r"`(\w+)`", accepted)
    return edges, rows


@pytest.mark.parametrize(("title", "transitions", "edges", "states"), MACHINES)
def test_dispatch_table_and_generated_diagram_agree(
    title: str, transitions: dict[enum.StrEnum, dict[type[Message], object]],
    edges: dict[enum.StrEnum, tuple[enum.StrEnum, ...]], states: type[enum.StrEnum],
) -> None:
    # Total over the typed states, keyed by the enums themselves (not by look-alike strings).
    assert list(transitions) == list(states) and set(edges) == set(states)
    assert all(type(state) is states for state in [*transitions, *edges])
    assert all(type(target) is states for targets in edges.values() for target in targets)
    # Keys are message classes of the closed union; values are callables.
    for row in transitions.values():
        assert set(row) <= set(MESSAGE_TYPES.values())
        assert all(callable(handler) for handler in row.values())
    spec_edges, spec_rows = _spec_section(title)
    assert spec_edges == {(str(a), str(b)) for a, targets in edges.items() for b in targets}
    assert spec_rows == {str(state): [cls.TAG for cls in row] for state, row in transitions.items()}


def test_the_agreement_check_can_fail() -> None:
    edges, rows = _spec_section("Subject")
    assert ("await_announce", "registering") in edges and rows["await_announce"] == ["announce"]
    tampered = dict(subject.TRANSITIONS)
    tampered[SubjectState.DONE] = {Vote: tampered[SubjectState.SHARING][Vote]}
    with pytest.raises(AssertionError):
        test_dispatch_table_and_generated_diagram_agree("Subject", tampered, subject.STATE_EDGES, SubjectState)


def test_handlers_are_typed_per_message_class() -> None:
    # The constrained type variable of `dispatch.on` names every message class, and only those.
    assert set(dispatch.M.__constraints__) == set(MESSAGE_TYPES.values())
    # A handler listed under a class takes exactly that class (or a union containing it).
    hints = typing.get_type_hints(SubjectNode._on_release_excluded)
    assert hints["message"].__name__ == "Release"
    with pytest.raises(TypeError):
        handler = subject.TRANSITIONS[SubjectState.SHARING][Vote]
        handler(None, MESSAGE_TYPES["announce"].__new__(MESSAGE_TYPES["announce"]), b"", 0.0)


def _event_classes() -> list[type[Event]]:
    return [cls for _, cls in inspect.getmembers(events, inspect.isclass)
            if issubclass(cls, Event) and cls is not Event]


def _sample_value(annotation: object) -> object:
    samples: dict[object, object] = {int: 3, float: 1.5, str: "ok", bool: True, bytes: bytes(range(32)),
                                     SubjectState: SubjectState.SHARING, CollectorState: CollectorState.AUDITING}
    return samples[annotation]


def _sample(cls: type[Event]) -> Event:
    hints = typing.get_type_hints(cls)
    values = {f.name: _sample_value(hints[f.name]) for f in dataclasses.fields(cls)}
    return cls(**values)


def test_every_event_class_renders_a_json_trace_line() -> None:
    classes = _event_classes()
    assert set(typing.get_args(SubjectEvent)) | set(typing.get_args(CollectorEvent)) == set(classes)
    kinds = {}
    for cls in classes:
        event = _sample(cls)
        line = event.as_dict()
        assert list(line)[:2] == ["at", "event"] and line["event"] == cls.KIND == event.kind
        decoded = json.loads(json.dumps(line))  # plain JSON: no bytes, no enums left
        assert decoded == line
        assert all(type(v) in (int, float, str, bool) for v in line.values()), line
        kinds.setdefault(cls in typing.get_args(SubjectEvent), set()).add(cls.KIND)
    # One class per kind within each node's union.
    assert len(kinds[True]) == len(typing.get_args(SubjectEvent))
    assert len(kinds[False]) == len(typing.get_args(CollectorEvent))
    assert _sample(events.RegistrationAccepted).as_dict()["digest"] == bytes(range(32)).hex()
    assert _sample(events.SubjectStateChanged).as_dict()["state"] == "sharing"


class FalseComplainer(SubjectNode):
    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Vote) and message.run == 0 and message.go:
            message = dataclasses.replace(message, go=False)
            assert self._run is not None
            self._run.votes[self.public_key] = message  # she acts on the vote she published (and blames)
        return super()._emit(topic, message)


def test_a_whole_round_emits_only_its_declared_events() -> None:
    n, seed = 12, 5
    data = synthetic_dataset(n, CONFIG, seed)
    qi = data.select(list(CONFIG.qi)).values
    conf = data.select(list(CONFIG.confidential)).values
    root = SeededRandom(seed)
    rng = root.fork("collector")
    node = CollectorNode(CONFIG, identity=crypto.SigningKey.generate(rng.fork("identity")), rng=rng,
                         round_id=root.fork("round").bytes(16))
    caches = SharedCaches()
    subjects = [(FalseComplainer if i == 0 else SubjectNode)(
        collector_key=node.public_key, qi=qi[i], confidential=conf[i], rng=root.fork(f"s{i}"), caches=caches,
        retry_interval=1.0) for i in range(n)]
    bus = MemoryBus(seed=seed, record_events=True, record_publications=True)
    bus.add_node("collector", node)
    for s in subjects:
        bus.add_node(s.sid, s)
    bus.run_until(until=1000.0, predicate=lambda: node.finished and all(s.finished for s in subjects))
    assert node.outcome().completed
    recorded = bus.events or []
    collector_events = [e for who, e in recorded if who == "collector"]
    subject_events = [e for who, e in recorded if who != "collector"]
    assert all(isinstance(e, CollectorEvent) for e in collector_events)
    assert all(isinstance(e, SubjectEvent) for e in subject_events)
    kinds = {e.kind for e in collector_events}
    assert {"phase", "registration_accepted", "grouped", "run_started", "blame", "excluded", "reveal_open",
            "group_opened", "released", "verdict_accepted", "round_done"} <= kinds
    assert {"state", "grouped", "run_started", "blame_sent", "excluded", "verdict"} <= {
        e.kind for e in subject_events}
    accepted = [e for e in collector_events if isinstance(e, events.RegistrationAccepted)]
    assert sorted(e.subject for e in accepted) == sorted(s.public_key for s in subjects)  # each once
    verdicts = [e for e in collector_events if isinstance(e, events.VerdictAccepted)]
    assert len(verdicts) == n - 1 and all(e.accept and e.reason == "ok" for e in verdicts)
    phases = [e.phase for e in collector_events if isinstance(e, events.PhaseChanged)]
    assert phases == [CollectorState.REGISTRATION, CollectorState.SHARING, CollectorState.AUDITING,
                      CollectorState.DONE]
    states = [e.state for e in subject_events if isinstance(e, events.SubjectStateChanged)
              and e.sid == subjects[0].sid]
    assert states[-2:] == [SubjectState.EXCLUDED, SubjectState.DONE]
    # Typed states still compare and serialize as their names.
    assert subjects[1].state == "done" and json.dumps(subjects[1].state) == '"done"'
    for event in recorded:
        json.dumps(event[1].as_dict())
    # A rejection of a message that decoded records its sender.
    someone = subjects[1]
    publications = [p for p in bus.publications or () if p.sender == "collector" and p.payload]
    assert publications
    before = len(someone.rejections)
    someone.receive(publications[0].topic, publications[0].payload, bus.now)
    new = someone.rejections[before:]
    assert new and new[0].sender == node.public_key


def test_a_rejection_of_undecodable_bytes_has_no_sender() -> None:
    someone = SubjectNode(collector_key=bytes(32), qi=(1.0, 2.0), confidential=(3.0,), rng=SeededRandom(1))
    someone.receive("coutil/v2/announce", b"\x93garbage", 0.0)
    assert someone.rejections[-1].sender is None and not someone.rejections[-1].ignored
