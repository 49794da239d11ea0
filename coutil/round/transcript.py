"""A round's signed transcript: the file an auditor checks (`coutil verify`), written by a run
(``transcript.json`` in a run directory) and by ``coutil collector export --transcript`` alike.

The transcript holds the exact signed envelopes (hex), never re-encoded: the announce (the round's
parameters and the collector's key), the roster, every subject's latest assign, the release, every
verdict the collector accepted and, when the writer had them, every signed ``shuffle_start`` the
collector published (its signed statements of who was excluded from which run, and why), and for
every run that ended in `blamed_*` exclusions the signed messages that prove them (run evidence:
the run's member messages the collector held, which its members saw between them). The
exclusions table (sid -> reason) is the collector's unsigned summary. Registrations carry each
subject's exact QIs, which only the collector may read: they are in the file only on request
(``registrations_included``), for an auditor entrusted with them (who can then recompute the
grouping). Confidential values appear only inside the release, as in release.csv.

Layout (JSON object):

    transcript_version  1 (as first exported), 2 (adds shuffle_starts), 3 (adds run_evidence) or 4 (adds
                        collector_signature)
    round               hex round id
    phase               the collector's phase when written (done, aborted, ...)
    collector_key       hex Ed25519 key (the announce's sender: an auditor checks they agree)
    announce            hex envelope
    registrations       [hex envelope]  (empty unless registrations_included)
    registrations_included  bool
    roster              hex envelope or null
    assignments         [hex envelope]  (one per subject: her latest assign)
    exclusions          {sid: reason}
    release             hex envelope or null
    verdicts            [hex envelope]
    shuffle_starts      [hex envelope]  (version 2; empty unless shuffle_starts_included)
    shuffle_starts_included  bool (version 2)
    run_evidence        [{"group": int, "run": int, "envelopes": [hex envelope]}]  (version 3; empty unless
                        run_evidence_included)
    run_evidence_included  bool (version 3)
    collector_signature  hex Ed25519 signature or null (version 4): the collector's, under the transcript domain,
                        of `transcript_statement` (SHA-256 of this object in canonical JSON without this key and
                        the registrations), so that two different final transcripts of one round it signed prove it
                        showed two auditors two rounds (SPEC §8.5)

`TranscriptRecorder` wraps a `CollectorNode` in a round driver and records what it published and
accepted (through its public outputs and events only, as the collector service's storage does).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from coutil.errors import InputError, RemoteProtocolError
from coutil.fileio import read_regular_bytes, write_text_atomic
from coutil.protocol import codec, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.events import CollectorEvent, RegistrationAccepted, VerdictAccepted
from coutil.protocol.messages import Assign, ShuffleStart, Verdict
from coutil.protocol.node import Outgoing

#: The layout version this coutil writes; `read_transcript` also reads every older one.
#: 1: as first written by ``collector export``; 2: ``shuffle_starts`` (signed exclusion statements);
#: 3: ``run_evidence`` (the signed messages that prove the `blamed_*` exclusions); 4: ``collector_signature``.
TRANSCRIPT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
#: The keys a transcript's signature does not cover: itself, and the registrations, which an export holds only on
#: request (the same round exported with and without them is one statement).
UNSIGNED_KEYS = frozenset({"collector_signature", "registrations", "registrations_included"})

#: The file name of the transcript in a run directory.
TRANSCRIPT_NAME = "transcript.json"
#: The other transcript a collector playing `two_transcripts` hands a second auditor (a simulation writes it beside).
SECOND_TRANSCRIPT_NAME = "transcript.second.json"


@dataclass(frozen=True)
class Transcript:
    """The signed bytes of one round (see the module docstring for each field)."""

    round_id: bytes
    phase: str
    collector_key: bytes
    announce: bytes
    roster: bytes | None
    assignments: tuple[bytes, ...]
    exclusions: Mapping[str, str]
    release: bytes | None
    verdicts: tuple[bytes, ...]
    registrations: tuple[bytes, ...] = ()
    registrations_included: bool = False
    shuffle_starts: tuple[bytes, ...] = ()
    shuffle_starts_included: bool = False
    #: (group, run) -> the exact envelopes that prove the run's `blamed_*` exclusions (the collector's
    #: `run_evidence`); each run's messages in the order the collector kept them.
    run_evidence: Mapping[tuple[int, int], tuple[bytes, ...]] = field(default_factory=dict)
    run_evidence_included: bool = False
    version: int = TRANSCRIPT_VERSION
    #: The collector's signature of `transcript_statement` (version 4; empty: unsigned).
    collector_signature: bytes = b""

    def document(self) -> dict[str, object]:
        """The JSON object written to the file."""
        doc: dict[str, object] = {
            "transcript_version": self.version,
            "round": self.round_id.hex(),
            "phase": self.phase,
            "collector_key": self.collector_key.hex(),
            "announce": self.announce.hex(),
            "registrations": [r.hex() for r in self.registrations] if self.registrations_included else [],
            "registrations_included": self.registrations_included,
            "roster": self.roster.hex() if self.roster is not None else None,
            "assignments": [p.hex() for p in self.assignments],
            "exclusions": dict(self.exclusions),
            "release": self.release.hex() if self.release is not None else None,
            "verdicts": [v.hex() for v in self.verdicts],
        }
        if self.version >= 2:
            doc["shuffle_starts"] = [s.hex() for s in self.shuffle_starts] if self.shuffle_starts_included else []
            doc["shuffle_starts_included"] = self.shuffle_starts_included
        if self.version >= 3:
            doc["run_evidence"] = [
                {"group": group, "run": run, "envelopes": [e.hex() for e in envelopes]}
                for (group, run), envelopes in sorted(self.run_evidence.items())
            ] if self.run_evidence_included else []
            doc["run_evidence_included"] = self.run_evidence_included
        if self.version >= 4:
            doc["collector_signature"] = self.collector_signature.hex() if self.collector_signature else None
        return doc

    def counts(self) -> dict[str, object]:
        """What the file holds, in counts (``collector export --json``)."""
        return {
            "registrations": len(self.registrations) if self.registrations_included else 0,
            "roster": self.roster is not None,
            "assignments": len(self.assignments),
            "release": self.release is not None,
            "verdicts": len(self.verdicts),
            "shuffle_starts": len(self.shuffle_starts) if self.shuffle_starts_included else 0,
            "run_evidence": len(self.run_evidence) if self.run_evidence_included else 0,
        }


def transcript_statement(transcript: Transcript) -> bytes:
    """What the collector signs of a transcript (SPEC §8.5): SHA-256 of its JSON object without `UNSIGNED_KEYS`,
    keys sorted, no whitespace, ASCII. The JSON, not the envelopes alone: the exclusions table, the phase and the
    flags saying what was withheld are the collector's statement too."""
    doc = {key: value for key, value in transcript.document().items() if key not in UNSIGNED_KEYS}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).digest()


def signed_transcript(transcript: Transcript, sign: Callable[[bytes], bytes]) -> Transcript:
    """``transcript`` in this coutil's version, with the collector's signature (``sign``: its `sign_transcript`)."""
    current = replace(transcript, version=TRANSCRIPT_VERSION, collector_signature=b"")
    return replace(current, collector_signature=sign(transcript_statement(current)))


def write_transcript(path: Path, transcript: Transcript) -> None:
    """Write ``transcript`` as JSON, whole or not at all (`InputError` when the file cannot be written)."""
    try:
        write_text_atomic(path, json.dumps(transcript.document(), indent=1) + "\n")
    except OSError as exc:
        raise InputError(f"{path}: cannot write the transcript: {exc.strerror}") from None


def _hex(value: object, where: str, source: str) -> bytes:
    if not isinstance(value, str):
        raise InputError(f"{source}: {where} is not a hex string")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise InputError(f"{source}: {where} is not valid hex") from None


def _hex_list(doc: Mapping[str, Any], key: str, source: str, within: str = "") -> tuple[bytes, ...]:
    value = doc.get(key, [])
    where = f"{within}.{key}" if within else key
    if not isinstance(value, list):
        raise InputError(f"{source}: {where} is not a list")
    return tuple(_hex(item, f"{where}[{i}]", source) for i, item in enumerate(value))


def _json_type(value: object) -> str:
    """``value``'s JSON type, as the file says it (``[1]`` is an array, ``null`` null), not Python's name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {"str": "string", "list": "array", "dict": "object"}.get(type(value).__name__, type(value).__name__)


def transcript_from_document(doc: object, source: str = "transcript") -> Transcript:
    """Parse a transcript's JSON object; `InputError` naming the problem for anything malformed."""
    if not isinstance(doc, dict):
        raise InputError(f"{source}: not a transcript (expected a JSON object)")
    version = doc.get("transcript_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise InputError(f"{source}: transcript_version {version!r}, this coutil reads "
                         f"{', '.join(map(str, READABLE_VERSIONS))}")
    for key in ("round", "collector_key", "announce"):
        if key not in doc:
            raise InputError(f"{source}: no {key!r}")
    exclusions = doc.get("exclusions", {})
    if not isinstance(exclusions, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in exclusions.items()):
        raise InputError(f"{source}: exclusions is not an object of sid -> reason")
    phase = doc.get("phase", "")
    if not isinstance(phase, str):
        # Unsigned, but the checks read it (whether the round went past its release): a string or nothing.
        raise InputError(f"{source}: phase is a JSON {_json_type(phase)}, not a string (the collector's phase: "
                         "done, aborted, ...)")
    flags: dict[str, bool] = {}
    for key in ("registrations_included", "shuffle_starts_included", "run_evidence_included"):
        flag = doc.get(key, False)
        if not isinstance(flag, bool):
            raise InputError(f"{source}: {key} is a JSON {_json_type(flag)}, not a boolean (true or false)")
        flags[key] = flag
    return Transcript(
        round_id=_hex(doc["round"], "round", source),
        phase=phase,
        collector_key=_hex(doc["collector_key"], "collector_key", source),
        announce=_hex(doc["announce"], "announce", source),
        roster=_hex(doc["roster"], "roster", source) if doc.get("roster") is not None else None,
        assignments=_hex_list(doc, "assignments", source),
        exclusions=dict(exclusions),
        release=_hex(doc["release"], "release", source) if doc.get("release") is not None else None,
        verdicts=_hex_list(doc, "verdicts", source),
        # A list whose flag is false is not read: the file holds none (`Transcript.document` writes it empty), and
        # the signature covers what the flags say; read, its unsigned entries would count for the checks (found by
        # an attacker: registrations of identities of the collector's beside registrations_included false, which
        # the roster root does not check, made a verdict or an exclusion of theirs one of a roster member's).
        registrations=_hex_list(doc, "registrations", source) if flags["registrations_included"] else (),
        registrations_included=flags["registrations_included"],
        shuffle_starts=_hex_list(doc, "shuffle_starts", source) if flags["shuffle_starts_included"] else (),
        shuffle_starts_included=flags["shuffle_starts_included"],
        run_evidence=_run_evidence(doc, source) if flags["run_evidence_included"] else {},
        run_evidence_included=flags["run_evidence_included"],
        version=version,
        collector_signature=_signature(doc, source) if version >= 4 else b"",
    )


def _signature(doc: Mapping[str, Any], source: str) -> bytes:
    value = doc.get("collector_signature")
    return b"" if value is None else _hex(value, "collector_signature", source)


def _run_evidence(doc: Mapping[str, Any], source: str) -> dict[tuple[int, int], tuple[bytes, ...]]:
    value = doc.get("run_evidence", [])
    if not isinstance(value, list):
        raise InputError(f"{source}: run_evidence is not a list")
    out: dict[tuple[int, int], tuple[bytes, ...]] = {}
    for i, entry in enumerate(value):
        where = f"run_evidence[{i}]"
        numbers = isinstance(entry, dict) and all(type(entry.get(k)) is int and entry[k] >= 0 for k in ("group", "run"))
        if not numbers:
            raise InputError(f"{source}: {where} is not an object with a group and a run (non-negative integers)")
        key = (entry["group"], entry["run"])
        if key in out:
            raise InputError(f"{source}: {where} repeats group {key[0]} run {key[1]}")
        out[key] = _hex_list(entry, "envelopes", source, where)
    return out


def read_transcript(path: Path) -> Transcript:
    """Read a transcript file; `InputError` (exit 2) when it is missing or not a transcript."""
    try:
        text = read_regular_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a transcript.json") from None
    except OSError as exc:  # a symbolic link loop, a FIFO (refused, never waited on), permission
        raise InputError(f"{path}: cannot read the transcript ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: cannot read the transcript ({exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError:
        # Python refuses to convert an integer of more than 4,300 digits (CVE-2020-10735): no transcript
        # holds one, so the file is malformed, as for any other JSON it cannot take.
        raise InputError(f"{path}: not a transcript (a JSON number too long to read)") from None
    except RecursionError:
        raise InputError(f"{path}: not a transcript (JSON nested too deep)") from None
    return transcript_from_document(doc, str(path))


@dataclass
class _Recorded:
    announce: bytes | None = None
    roster: bytes | None = None
    release: bytes | None = None
    #: subject key -> her latest assign.
    assignments: dict[bytes, bytes] = field(default_factory=dict)
    registrations: list[bytes] = field(default_factory=list)
    verdicts: list[bytes] = field(default_factory=list)
    shuffle_starts: list[bytes] = field(default_factory=list)
    #: SHA-256 of every collector output already looked at (re-sends repeat the same bytes).
    seen: set[bytes] = field(default_factory=set)


class TranscriptRecorder:
    """A `CollectorNode` seen by the driver through this wrapper (implements `coutil.protocol.node.Node`).

    It records, from the node's public outputs and events only: the published announce, roster,
    release, every assign and shuffle_start, and the exact bytes of every registration and verdict
    the node accepted (reported by a `RegistrationAccepted` / `VerdictAccepted` event while it handled
    them). Nothing private of the node is read; `transcript` adds the node's public `outcome()`
    (phase, exclusions) and `run_evidence()`.
    """

    def __init__(self, node: CollectorNode) -> None:
        self.node = node
        self.client_id = node.client_id
        self.round_id = node.round_id
        self.public_key = node.public_key
        self._limits = codec.Limits(max_message_bytes=node.config.accepted_message_bytes)
        self._recorded = _Recorded()
        self._events: list[CollectorEvent] = []

    # -- Node interface ---------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.node.finished

    @property
    def rejections(self) -> Sequence[object]:
        return self.node.rejections

    def subscriptions(self) -> frozenset[str]:
        return self.node.subscriptions()

    def next_timer(self) -> float | None:
        return self.node.next_timer()

    def start(self, now: float) -> list[Outgoing]:
        return self._step(self.node.start(now), None)

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        return self._step(self.node.receive(topic, payload, now), payload)

    def on_timer(self, now: float) -> list[Outgoing]:
        return self._step(self.node.on_timer(now), None)

    def on_transport(self, up: bool, now: float) -> list[Outgoing]:
        return self._step(self.node.on_transport(up, now), None)

    def drain_events(self) -> list[CollectorEvent]:
        events, self._events = self._events, []
        return events

    # -- recording --------------------------------------------------------------------------------
    def _step(self, out: list[Outgoing], received: bytes | None) -> list[Outgoing]:
        events = self.node.drain_events()
        self._events.extend(events)
        rec = self._recorded
        for event in events:
            # Reported while the node handled ``received``: those are the bytes it accepted.
            if isinstance(event, RegistrationAccepted | VerdictAccepted) and received is not None \
                    and codec.payload_digest_of(received, self._limits) == event.digest:
                (rec.registrations if isinstance(event, RegistrationAccepted) else rec.verdicts).append(received)
        for o in out:
            self._record_output(o)
        return out

    def _record_output(self, o: Outgoing) -> None:
        rec = self._recorded
        if not o.payload:
            return  # the announce withdrawn
        if o.topic == topics.ANNOUNCE:
            rec.announce = rec.announce or o.payload
            return
        if o.topic == topics.roster(self.round_id):
            rec.roster = rec.roster or o.payload
            return
        if o.topic == topics.release(self.round_id):
            rec.release = rec.release or o.payload
            return
        digest = hashlib.sha256(o.payload).digest()
        if digest in rec.seen:
            return
        rec.seen.add(digest)
        try:
            message = codec.decode_own(o.payload, self._limits)
        except RemoteProtocolError:
            return
        if message.sender != self.public_key:
            return  # a member's message relayed by the collector
        if isinstance(message, Assign):
            rec.assignments[message.subject] = o.payload
        elif isinstance(message, ShuffleStart):
            rec.shuffle_starts.append(o.payload)

    def second_transcript(self, *, include_registrations: bool = False) -> Transcript | None:
        """The other transcript a collector playing `two_transcripts` hands a second auditor (None for any other):
        the same round, signed as the first, with every complaint left out."""
        first = self.transcript(include_registrations=include_registrations)
        if first is None or not self.node.shows_two_transcripts():
            return None
        limits = self._limits
        accepts = tuple(v for v in first.verdicts if _is_accept(v, limits))
        return signed_transcript(replace(first, verdicts=accepts), self.node.sign_transcript)

    def transcript(self, *, include_registrations: bool = False) -> Transcript | None:
        """What was recorded so far, as a transcript (registrations only when asked for); None when
        the collector never announced its round (nothing was published: nothing to audit)."""
        rec = self._recorded
        if rec.announce is None:
            return None
        outcome = self.node.outcome()
        evidence = self.node.publishes_evidence()
        return signed_transcript(Transcript(
            round_id=self.round_id,
            phase=str(outcome.phase),
            collector_key=self.public_key,
            announce=rec.announce,
            roster=rec.roster,
            assignments=tuple(rec.assignments[key] for key in sorted(rec.assignments)),
            exclusions={str(e["sid"]): str(e["reason"]) for e in outcome.excluded},
            release=rec.release,
            verdicts=tuple(rec.verdicts),
            registrations=tuple(rec.registrations) if include_registrations else (),
            registrations_included=include_registrations,
            shuffle_starts=tuple(rec.shuffle_starts) if evidence else (),
            shuffle_starts_included=evidence,
            run_evidence=self.node.run_evidence() if evidence else {},
            run_evidence_included=evidence,
        ), self.node.sign_transcript)


def _is_accept(envelope: bytes, limits: codec.Limits) -> bool:
    message = codec.decode(envelope, limits).message
    return isinstance(message, Verdict) and message.accept
