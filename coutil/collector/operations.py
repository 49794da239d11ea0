"""What an operator asks of a collector's database: which rounds, how each went, and its exports.

Everything here reads the store (`CollectorStore`, WAL: safe beside a running service) and returns
JSON-ready dicts that never hold a confidential value: counts, phases, times, reasons, public keys'
ids (sids). The transcript is the signed bytes an auditor needs to check a round end to end
(announce, roster, assignments, release, verdicts), each exactly as published or received.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from coutil.collector.storage import CollectorStore, StoredRound
from coutil.errors import InputError, RemoteProtocolError
from coutil.protocol import codec, topics
from coutil.protocol.messages import Verdict
from coutil.round.transcript import Transcript, signed_transcript, write_transcript


def find_round(store: CollectorStore, round_hex: str | None, *, with_release: bool = False) -> StoredRound:
    """The round ``round_hex`` (hex id, a unique prefix is enough), or the newest one (with a release
    when ``with_release``); one-line `InputError`s otherwise."""
    rounds = store.rounds()
    if not rounds:
        raise InputError(f"{store.path}: no round yet")
    if round_hex is not None:
        wanted = round_hex.strip().lower()
        if not wanted or any(c not in "0123456789abcdef" for c in wanted):
            raise InputError(f"bad --round {round_hex!r}: expected the round id in hex")
        chosen = [r for r in rounds if r.round_id.hex().startswith(wanted)]
        if not chosen:
            raise InputError(f"{store.path}: no round {round_hex}")
        if len(chosen) > 1:
            raise InputError(f"{store.path}: {len(chosen)} rounds start with {round_hex}: give more digits")
        return store.load_round(chosen[0].round_id)
    for summary in reversed(rounds):
        stored = store.load_round(summary.round_id)
        if not with_release or stored.release_csv is not None:
            return stored
    raise InputError(f"{store.path}: no round has a release yet")


def _verdict_reasons(stored: StoredRound) -> dict[str, int]:
    """Complaint reasons by count, read from the stored signed verdicts (public)."""
    reasons: Counter[str] = Counter()
    limits = codec.Limits()
    for verdict in stored.verdicts:
        if verdict.accept:
            continue
        try:
            message = codec.decode(verdict.payload, limits).message
        except RemoteProtocolError:
            reasons["undecodable"] += 1
            continue
        reasons[message.reason if isinstance(message, Verdict) else "unknown"] += 1
    return dict(sorted(reasons.items()))


def _release_rows(stored: StoredRound) -> int | None:
    if stored.release_csv is None:
        return None
    return max(stored.release_csv.count("\n") - 1, 0)


def round_summary(stored: StoredRound) -> dict[str, object]:
    """One round in a line's worth of fields (``collector rounds``)."""
    accepted = sum(1 for v in stored.verdicts if v.accept)
    return {
        "round": stored.round_id.hex(),
        "phase": stored.phase,
        "created_at": stored.created_at,
        "updated_at": stored.updated_at,
        "duration_s": round(stored.updated_at - stored.created_at, 3),
        "k": stored.params.get("k"),
        "registered": len(stored.registrations),
        "excluded": len(stored.exclusions),
        "released_rows": _release_rows(stored),
        "verdicts": len(stored.verdicts),
        "accepted": accepted,
        "complaints": len(stored.verdicts) - accepted,
    }


def round_status(stored: StoredRound) -> dict[str, object]:
    """Everything about one round an operator may see (``collector status``)."""
    history: list[tuple[str, float]] = []
    for phase, at in stored.phase_history:
        if not history or history[-1][0] != phase:  # a phase recorded twice (created, then entered) counts once
            history.append((phase, at))
    phases = [{"phase": phase, "at": at} for phase, at in history]
    durations = {phase: round(nxt - at, 3) for (phase, at), (_, nxt) in itertools.pairwise(history)}
    return {
        **round_summary(stored),
        "collector_key": stored.collector_key.hex(),
        "parameters": stored.params,
        "phases": phases,
        "phase_durations_s": durations,
        "groups": len(set(stored.assignments.values())) if stored.assignments else 0,
        "roster_root": stored.roster_root.hex() if stored.roster_root is not None else None,
        "exclusions_by_reason": dict(sorted(Counter(stored.exclusions.values()).items())),
        "complaints_by_reason": _verdict_reasons(stored),
        "messages_rejected_by_reason": dict(stored.rejections),
    }


def verdict_summary(stored: StoredRound) -> dict[str, object]:
    """The verdicts of a round, as counts and reasons (no subject's values: a verdict holds none)."""
    accepted = sum(1 for v in stored.verdicts if v.accept)
    return {
        "round": stored.round_id.hex(),
        "verdicts": len(stored.verdicts),
        "accepted": accepted,
        "complaints": len(stored.verdicts) - accepted,
        "complaints_by_reason": _verdict_reasons(stored),
        "subjects": [{"sid": topics.sid_of(v.subject_key), "accept": v.accept} for v in stored.verdicts],
    }


def stored_transcript(stored: StoredRound, *, include_registrations: bool = False) -> Transcript:
    """The round's signed transcript (`coutil.round.transcript`) from what the store holds.

    The signed shuffle_starts (the exclusion statements) are included when the store holds them for the
    round, or the round excluded nobody; a round stored by a coutil that did not keep them has exclusions
    but no statement (``shuffle_starts_included`` false: the auditor skips that check and says so). The run
    evidence (the signed messages proving `blamed_*` exclusions) likewise."""
    if stored.announce is None:
        raise InputError(f"round {stored.round_id.hex()}: no announce stored, nothing to audit")
    return Transcript(
        round_id=stored.round_id,
        phase=stored.phase,
        collector_key=stored.collector_key,
        announce=stored.announce,
        roster=stored.roster_payload,
        assignments=tuple(stored.assignment_payloads.values()),
        exclusions={topics.sid_of(key): reason for key, reason in stored.exclusions.items()},
        release=stored.release_payload,
        verdicts=tuple(v.payload for v in stored.verdicts),
        registrations=tuple(r.payload for r in stored.registrations) if include_registrations else (),
        registrations_included=include_registrations,
        shuffle_starts=stored.shuffle_starts,
        shuffle_starts_included=bool(stored.shuffle_starts) or not stored.exclusions,
        run_evidence=stored.run_evidence,
        # A round stored by a coutil that did not keep it has blames and no evidence (the auditor says so).
        run_evidence_included=bool(stored.run_evidence)
        or not any(reason.startswith("blamed_") for reason in stored.exclusions.values()),
    )


def export_transcript(stored: StoredRound, path: Path, *, include_registrations: bool = False,
                      sign: Callable[[bytes], bytes] | None = None) -> dict[str, object]:
    """Write the round's signed transcript as one JSON file (payloads in hex); returns its counts and whether it
    is signed (``sign``: the collector's `crypto.sign_transcript` with its identity; None: unsigned, which an auditor
    fails for a round whose announce commits to a signed transcript, SPEC §8.5).

    An auditor (`coutil verify`) re-verifies every signature and digest from these bytes alone: the
    announce (the parameters and the collector's key), the roster, every assignment, the release and
    every verdict. Registrations carry each subject's exact QIs, which only the collector may read:
    they are left out unless ``include_registrations`` (an auditor entrusted with them can then
    recompute the MDAV partition). The format is `coutil.round.transcript`'s, the one a run writes.
    """
    transcript = stored_transcript(stored, include_registrations=include_registrations)
    if sign is not None:
        transcript = signed_transcript(transcript, sign)
    write_transcript(path, transcript)
    return {**transcript.counts(), "signed": sign is not None}
