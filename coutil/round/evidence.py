"""A subject's evidence that the collector received her verdict: her signed verdict and the
collector's signed ``verdict_ack`` of it (SPEC §3, "hide complaints").

A verdict reaches the collector alone (her ``up`` topic), and the transcript an auditor checks is
the collector's (`coutil.round.transcript`): a collector can acknowledge a complaint, or an accept
bound to another release than the published one (a split view), and leave it out of what it
publishes. Each subject keeps the pair on her device; after the round she checks that her verdict
is in the published transcript and, if it is not, hands the pair to any auditor (``coutil verify
--evidence FILE``), who checks both signatures and the binding without trusting her: the collector
signed that it recorded exactly this verdict.

A subject also keeps a proof that the collector equivocated, if it ever signs two different roster roots
to her (two rosters, or a roster and an assign or a release stating another root:
`coutil.protocol.equivocation`): the announce she took part on, which names the collector's
key and the round, and the two messages. An honest collector has one roster per round, so the three
envelopes prove that the key which signed them equivocated, whoever brings them, even when the collector
withholds the round and publishes no transcript (`SubjectNode.equivocation_evidence`); the auditor
compares that key with the collector's published identity (``coutil verify --collector-key``).

Every subject also brings her receipt after any round (`RosterReceipt`: the announce and the first roster
she received): receipts of subjects shown different roots combine into such a proof.

File layout (JSON): a list of ``{"verdict": hex envelope, "verdict_ack": hex envelope}``,
``{"equivocation": [hex announce, hex first, hex second]}`` and ``{"receipt": [hex announce, hex
statement]}`` objects (or one such object). A run directory holds ``evidence.json``: the pairs of the
simulated subjects whose verdict the transcript lacks, every proof of equivocation they hold, and their
receipts, one per distinct roster (an honest round: one), as they would bring them
(every driver writes it: the in-memory bus, and MQTT, where worker processes report their subjects'
evidence).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from coutil.errors import InputError, RemoteProtocolError
from coutil.fileio import read_regular_bytes, write_text_atomic
from coutil.protocol import codec, topics
from coutil.protocol.equivocation import EquivocationEvidence, RosterReceipt
from coutil.protocol.messages import Verdict, VerdictAck

#: The file name of the subjects' evidence in a run directory.
EVIDENCE_NAME = "evidence.json"


@dataclass(frozen=True)
class VerdictEvidence:
    """Her signed verdict and the collector's signed acknowledgement of it (exact envelopes)."""

    verdict: bytes
    verdict_ack: bytes

    def as_dict(self) -> dict[str, str]:
        return {"verdict": self.verdict.hex(), "verdict_ack": self.verdict_ack.hex()}


#: One piece of a subject's evidence.
Evidence = VerdictEvidence | EquivocationEvidence | RosterReceipt


@dataclass(frozen=True)
class CheckedEvidence:
    """One piece of evidence, checked against a round: the verdict it proves, or why it proves nothing."""

    verdict: Verdict | None
    problem: str = ""


def check_evidence(item: VerdictEvidence, round_id: bytes, collector_key: bytes) -> CheckedEvidence:
    """Both envelopes verify under their senders' keys, belong to ``round_id``, the acknowledgement
    is signed by ``collector_key`` and names this verdict (its sender and the digest of its exact bytes)."""
    try:
        verdict = codec.decode(item.verdict).message
        ack = codec.decode(item.verdict_ack).message
    except RemoteProtocolError as exc:
        return CheckedEvidence(None, f"an envelope does not decode or verify ({exc.reason})")
    if not isinstance(verdict, Verdict) or not isinstance(ack, VerdictAck):
        return CheckedEvidence(None, f"not a verdict and its verdict_ack ({verdict.TAG}, {ack.TAG})")
    if verdict.round_id != round_id or ack.round_id != round_id:
        return CheckedEvidence(None, f"{topics.sid_of(verdict.sender)}: of another round")
    if ack.sender != collector_key:
        return CheckedEvidence(None, f"{topics.sid_of(verdict.sender)}: the verdict_ack is not the collector's")
    if ack.subject != verdict.sender or ack.verdict_digest != codec.payload_digest_of(item.verdict):
        return CheckedEvidence(None, f"{topics.sid_of(verdict.sender)}: the verdict_ack names another verdict")
    return CheckedEvidence(verdict)


def write_evidence(path: Path, items: Iterable[Evidence]) -> None:
    write_text_atomic(path, json.dumps([item.as_dict() for item in items], indent=2) + "\n")


def read_evidence(path: Path) -> list[Evidence]:
    """The evidence in ``path`` (`InputError`, one line, when it is not such a file)."""
    try:
        data = read_regular_bytes(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:  # a directory, a symbolic link loop, a FIFO (refused, never waited on), permission
        raise InputError(f"{path}: cannot read the evidence ({exc.strerror or exc})") from None
    try:
        doc = json.loads(data)
    except ValueError as exc:  # bad JSON or UTF-8, or a number of more than 4,300 digits
        raise InputError(f"{path}: not a JSON evidence file ({exc})") from None
    except RecursionError:
        raise InputError(f"{path}: not an evidence file (JSON nested too deep)") from None
    entries = doc if isinstance(doc, list) else [doc]
    items: list[Evidence] = []
    for number, entry in enumerate(entries, 1):
        try:
            if isinstance(entry, dict) and "receipt" in entry:
                items.append(RosterReceipt(*_envelopes(entry["receipt"], 2)))
            elif isinstance(entry, dict) and "equivocation" in entry:
                items.append(EquivocationEvidence(*_envelopes(entry["equivocation"], 3)))
            else:
                items.append(VerdictEvidence(bytes.fromhex(entry["verdict"]), bytes.fromhex(entry["verdict_ack"])))
        except (TypeError, KeyError, ValueError):
            raise InputError(f"{path}: entry {number} is none of {{\"verdict\": hex, \"verdict_ack\": hex}}, "
                             "{\"equivocation\": [hex, hex, hex]}, {\"receipt\": [hex, hex]}") from None
    return items


def _envelopes(value: object, count: int) -> list[bytes]:
    """A JSON list of ``count`` hex envelopes (ValueError or TypeError otherwise)."""
    if not isinstance(value, list) or len(value) != count:
        raise ValueError(f"not {count} envelopes")
    return [bytes.fromhex(e) for e in value]


def missing_from(published: Sequence[bytes], pairs: Iterable[tuple[bytes, bytes] | None]) -> list[VerdictEvidence]:
    """The subjects' pairs (None: a subject without an acknowledged verdict) whose verdict is not among
    the ``published`` envelopes: what each of them would bring to an auditor after checking."""
    have = set(published)
    return [VerdictEvidence(*pair) for pair in pairs if pair is not None and pair[0] not in have]
