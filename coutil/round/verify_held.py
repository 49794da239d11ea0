"""The auditor's checks of what it holds besides the transcript's envelopes: the transcript's own signature and
other copies of it (SPEC §8.5), and the subjects' evidence (their proofs of equivocation and receipts, their
acknowledged verdicts, `coutil.round.evidence`).

A transcript is the collector's statement of what happened in a round: the signed envelopes, and beside them its
unsigned word (the exclusions table, the phase, which evidence it holds). Its signature (`transcript_statement`
under `crypto.TRANSCRIPT_DOMAIN`, transcript version 4) makes that statement the collector's: two different final
transcripts of one round that it signed, shown to two auditors (one with a complaint, one without it), together
prove that it showed them two rounds; unsigned, either could be called a forgery. A round whose announce commits to
a signed transcript (`commits_to_signed_transcript`, which every subject of this coutil requires) fails unsigned:
the downgrade that would make two copies prove nothing (`unsigned_transcript`, a deviation of the library).
"""

from __future__ import annotations

from collections.abc import Sequence

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, crypto
from coutil.protocol.config import commits_to_signed_transcript
from coutil.protocol.equivocation import EquivocationEvidence, RosterReceipt, check_equivocation, combine_receipts
from coutil.protocol.states import CollectorState
from coutil.protocol.topics import sid_of
from coutil.round.evidence import EVIDENCE_NAME, Evidence, VerdictEvidence, check_evidence
from coutil.round.transcript import UNSIGNED_KEYS, Transcript, transcript_statement
from coutil.round.verify_roster import Check, VerifiedRound

#: The phases after which a collector's transcript no longer changes: two final copies must be one statement.
FINAL_PHASES = frozenset({str(CollectorState.DONE), str(CollectorState.ABORTED)})
#: Every phase a collector writes (`CollectorState`): a signed transcript stating another (``"done "``, ``"DONE"``,
#: ``"finished"``) is no collector's, and would escape the comparison of final copies (found by an attacker: such a
#: copy with a complaint left out passed alone, and beside the final one proved nothing).
COLLECTOR_PHASES = frozenset(str(state) for state in CollectorState)


def signed_by_collector(transcript: Transcript) -> bool:
    """Whether ``transcript`` carries a valid signature of its statement under the key it names."""
    return bool(transcript.collector_signature) and crypto.verify_transcript(
        transcript.collector_key, transcript_statement(transcript), transcript.collector_signature)


def check_transcript_signature(r: VerifiedRound, check: Check, others: Sequence[tuple[str, Transcript]] = (),
                               require_final: bool = False) -> None:
    """The transcript's signature, then each other copy given (``others``: (source, transcript)) against it.
    ``require_final``: a copy of a round not finished (a phase before done or aborted) fails instead of being
    skipped: an auditor who publishes her conclusion holds the collector to one final statement."""
    t = r.transcript
    committed = r.announce is not None and commits_to_signed_transcript(r.announce.params.manifest)
    signed = signed_by_collector(t)  # hashes the whole file: once
    if t.collector_signature:
        if not signed:
            check.fail("the transcript's collector_signature is not the collector's signature of its content (altered "
                       "after signing, or forged)")
    elif committed:
        check.fail(f"the transcript (version {t.version}) is unsigned, though the signed announce commits to a signed "
                   "one (transcript = 4, SPEC §8.5): two different copies of it would prove nothing (a downgrade)")
    else:
        check.skip(f"an unsigned transcript (version {t.version}) of a round whose announce does not commit to a "
                   "signed one (an older coutil's): another copy of it would prove nothing")
    if (signed or committed) and t.phase not in COLLECTOR_PHASES:
        check.fail(f"phase {t.phase[:64]!r} is no collector phase ({', '.join(sorted(COLLECTOR_PHASES))}): a copy so "
                   "labelled escapes the comparison of final copies (SPEC §8.5)")
    elif require_final and t.phase not in FINAL_PHASES:
        check.fail(f"the round was not finished when this copy was written (phase {t.phase}), and a final one was "
                   "required (--require-final): a collector that never finishes its transcript is compared with "
                   "another copy only in what never changes once signed (SPEC §8.5)")
    elif signed and t.phase not in FINAL_PHASES:
        check.skip(f"the round was not finished when this copy was written (phase {t.phase}): its verdicts may be "
                   "incomplete, and another copy is compared with it only in what never changes once signed (the "
                   "announce, roster, release, each subject's verdict, the shuffle_starts)")
    for source, other in others:
        _compare(t, signed, check, source, other)
    if check.status == "pass" and t.collector_signature:
        check.notes.append("signed by the collector" + (f"; {len(others)} other copy(ies) the same statement"
                                                       if others else ""))


def _compare(t: Transcript, signed: bool, check: Check, source: str, other: Transcript) -> None:
    """``other`` against ``t`` (``signed``: whether ``t``'s signature is the collector's)."""
    if other.round_id != t.round_id or other.collector_key != t.collector_key:
        check.notes.append(f"{source}: another round or collector, not a copy of this transcript (not compared)")
        return
    if not signed_by_collector(other):
        check.notes.append(f"{source}: not signed by the collector (or altered): proves nothing (not compared)")
        return
    if not signed:
        check.notes.append(f"{source}: signed, but this transcript is not: nothing to compare it with")
        return
    if other.phase not in COLLECTOR_PHASES:
        check.fail(f"{source}: the collector signed a transcript of this round with phase {other.phase[:64]!r}, no "
                   "collector phase: a copy so labelled escapes the comparison of final copies (SPEC §8.5)")
        return
    if t.phase not in FINAL_PHASES or other.phase not in FINAL_PHASES:
        check.notes.append(f"{source}: phase {other.phase!r} against {t.phase!r}: copies are compared in full only "
                           "once both are final (done or aborted); before, in what never changes once signed")
        _compare_unfinished(t, check, source, other)
        return
    if transcript_statement(other) == transcript_statement(t):
        return
    mine, theirs = _signed_part(t), _signed_part(other)
    differ = sorted(key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key))
    check.fail(f"{source}: the collector signed two different final transcripts of this round (they differ in "
               f"{', '.join(differ)}): it showed two auditors two rounds, proven by its two signatures")


def _verdicts_by_sender(t: Transcript) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for envelope in t.verdicts:
        try:
            message = codec.decode(envelope, codec.Limits()).message
        except RemoteProtocolError:
            continue  # `signatures` names it in the transcript checked; in another copy it proves nothing
        out.setdefault(message.sender, envelope)
    return out


def _compare_unfinished(t: Transcript, check: Check, source: str, other: Transcript) -> None:
    """Two signed copies of one round, one of them (or both) not final: what the collector signs once and never
    changes must be the same in both (SPEC §8.5): the announce, the roster and the release once there, a subject's
    verdict (a second, different one is refused, `conflicting_verdict`); what it only adds to (verdicts,
    shuffle_starts) must be in the final copy when one is. Found by an attacker: a copy labelled not final escaped
    every comparison, whatever release it held."""
    once = (("announce", t.announce, other.announce), ("roster", t.roster, other.roster),
            ("release", t.release, other.release))
    differ = [what for what, mine, theirs in once if mine is not None and theirs is not None and mine != theirs]
    mine_v, theirs_v = _verdicts_by_sender(t), _verdicts_by_sender(other)
    if any(mine_v[key] != theirs_v[key] for key in mine_v.keys() & theirs_v.keys()):
        differ.append("a subject's verdict")
    final, unfinished = (t, other) if t.phase in FINAL_PHASES else (other, t) if other.phase in FINAL_PHASES else \
        (None, None)
    if final is not None and unfinished is not None:
        if not set(unfinished.verdicts) <= set(final.verdicts):
            differ.append("verdicts (the unfinished copy holds one the final copy does not)")
        if final.shuffle_starts_included and not set(unfinished.shuffle_starts) <= set(final.shuffle_starts):
            differ.append("shuffle_starts (the unfinished copy holds one the final copy does not)")
    if differ:
        check.fail(f"{source}: the collector signed two transcripts of this round that no one round explains, one "
                   f"not final (phase {other.phase!r} against {t.phase!r}; they differ in {', '.join(differ)}): it "
                   "showed two auditors two rounds, proven by its two signatures")


def _signed_part(t: Transcript) -> dict[str, object]:
    return {key: value for key, value in t.document().items() if key not in UNSIGNED_KEYS}


def check_equivocation_evidence(check: Check, evidence: Sequence[Evidence] | None, round_id: bytes | None,
                                collector_key: bytes | None, published: RosterReceipt | None = None) -> set[bytes]:
    """No subject shows two different roster roots the collector signed for the round: her proof, or receipts
    (hers, other subjects', and ``published``, the transcript's announce and roster) stating different roots.
    Returns the rounds proven to be equivocated."""
    if evidence is None:
        check.skip(f"no subject's evidence given ({EVIDENCE_NAME} in a run directory, or --evidence FILE): a "
                   "subject shown two roster roots keeps both signed messages, and every subject her receipt")
        return set()
    receipts = [item for item in evidence if isinstance(item, RosterReceipt)]
    combined, problems = combine_receipts([*([published] if published is not None else []), *receipts])
    check.notes.extend(f"evidence not taken: {problem}" for problem in dict.fromkeys(problems))
    proofs = list(dict.fromkeys([*(item for item in evidence if isinstance(item, EquivocationEvidence)), *combined]))
    proven: set[bytes] = set()
    for item in proofs:
        checked = check_equivocation(item, round_id, collector_key)
        if checked.problem:
            check.notes.append(f"evidence not taken: {checked.problem}")
            continue
        proven.add(checked.round_id)
        check.fail(f"the collector key {checked.collector_key.hex()} equivocated in round "
                   f"{checked.round_id.hex()}: {checked.statement} (the subjects' evidence)")
    if check.status == "pass":
        # Counted as taken: those that decode as an announce and a roster of its round (the transcript's own
        # receipt included), not those given.
        taken = len(receipts) + (published is not None) - len(problems)
        check.notes.append(f"{len(proofs)} proof(s) of equivocation from {taken} receipt(s) taken and the "
                           "subjects' proofs, none valid" if proofs else
                           f"no subject shows two roster roots ({taken} receipt(s) taken, one root per round)")
    return proven


def check_acknowledged_verdicts(r: VerifiedRound, check: Check, evidence: Sequence[Evidence] | None) -> None:
    """Every verdict a subject shows the collector acknowledged (her evidence) is in the transcript."""
    if evidence is None:
        check.skip(f"no subject's evidence given ({EVIDENCE_NAME} in a run directory, or --evidence FILE): each "
                   "subject can check that her acknowledged verdict is in the transcript and bring it")
        return
    published = {v.sender: v for v in r.verdicts}
    valid = 0
    for item in evidence:
        if not isinstance(item, VerdictEvidence):
            continue
        checked = check_evidence(item, r.transcript.round_id, r.transcript.collector_key)
        verdict = checked.verdict
        if verdict is None:
            check.notes.append(f"evidence not taken: {checked.problem}")
            continue
        valid += 1
        sid = sid_of(verdict.sender)
        if published.get(verdict.sender) != verdict:
            what = "an accept" if verdict.accept else f"a complaint ({verdict.reason})"
            bound = "" if verdict.release_digest == r.release_digest else ", bound to another release"
            check.fail(f"{sid}'s verdict, {what}{bound}, acknowledged by the collector, is not in the transcript "
                       "(hide_complaints)")
    if check.status == "pass":
        check.notes.append(f"{valid} acknowledged verdict(s) shown by subjects, each in the transcript")
