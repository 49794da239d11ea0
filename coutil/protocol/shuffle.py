"""Group shuffle helpers shared by the collector and the subjects.

Associated data binds every encryption layer to its round, group, run and mixing step, so a
ciphertext cannot be replayed into another group or run. The blame procedure re-executes a failed
run from the revealed outer secrets and permutations (inner secrets stay hidden, so nothing a
member submitted can be opened) and names who deviated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coutil.errors import RemoteProtocolError
from coutil.protocol import crypto
from coutil.protocol.codec import MAX_MESSAGE_BYTES


def collector_aad(round_id: bytes) -> bytes:
    return b"coutil/v2 record " + round_id


def inner_aad(round_id: bytes, group: int, run: int) -> bytes:
    return b"coutil/v2 inner " + round_id + group.to_bytes(8, "big") + run.to_bytes(8, "big")


def outer_aad(round_id: bytes, group: int, run: int, step: int) -> bytes:
    return (
        b"coutil/v2 outer " + round_id + group.to_bytes(8, "big") + run.to_bytes(8, "big") + step.to_bytes(8, "big")
    )


#: The digest a member states for a batch she does not have: a blame's ``batch_digest`` when she never mixed
#: in the run, a no-go vote's ``final_digest`` when she halted the run at her step (an item she cannot peel).
NO_BATCH = bytes(32)


def batch_digest(items: Sequence[bytes]) -> bytes:
    """Digest of a batch: SHA-256 over the length-prefixed items in order."""
    h = hashlib.sha256(b"coutil/v2 batch")
    for item in items:
        h.update(len(item).to_bytes(4, "big"))
        h.update(item)
    return h.digest()


def members_digest(announce_digest: bytes, group: int, run: int, members: Sequence[bytes]) -> bytes:
    """A run's membership as a member was told it (SPEC §8.4): carried in `run_keys` and `vote`, so
    that members shown different memberships (a split view) notice. It starts from the payload digest
    of the announce the member took part on (which names the round): members shown different
    announces (another k, to one of them alone: a split announce) state different digests too."""
    h = hashlib.sha256(b"coutil/v2 members" + announce_digest + group.to_bytes(8, "big") + run.to_bytes(8, "big"))
    for member in members:
        h.update(member)
    return h.digest()


def keys_digest(round_id: bytes, group: int, run: int, members: Sequence[bytes],
                keys: Mapping[bytes, tuple[bytes, bytes]]) -> bytes:
    """The run's keys as a member used them (SPEC §8.4): every member's outer and inner X25519 key, in
    member order. Carried in `vote`: a member shown another key of a fellow member than the others
    were (a key split, which would single out her item in the final batch) votes another digest, and
    nobody reveals on votes that disagree."""
    h = hashlib.sha256(b"coutil/v2 keys" + round_id + group.to_bytes(8, "big") + run.to_bytes(8, "big"))
    for member in members:
        outer, inner = keys[member]
        h.update(member + outer + inner)
    return h.digest()


def check_run_keys(outer_kx: bytes, inner_kx: bytes) -> None:
    """REJECT ``bad_key`` (SPEC §8.2) for a run key of small order: nobody could seal to it, so it is
    refused where it arrives, before anything is (subject and collector alike)."""
    if crypto.is_small_order(outer_kx) or crypto.is_small_order(inner_kx):
        raise RemoteProtocolError("bad_key", "run_keys with a key of small order (no key agreement)")


def inner_commitment(inner_sealed: bytes, salt: bytes) -> bytes:
    """Hiding commitment to a member's inner-sealed ciphertext (SPEC §8.2): SHA-256 of a domain,
    a fresh 32-byte salt (revealed only in a blame) and the ciphertext."""
    return hashlib.sha256(b"coutil/v2 commit" + salt + inner_sealed).digest()


def is_permutation(perm: Sequence[int], size: int) -> bool:
    return len(perm) == size and sorted(perm) == list(range(size))


@dataclass(frozen=True)
class BlameResult:
    """Who deviated in a failed run, and how (reason codes from protocol/SPEC.md)."""

    culprits: tuple[tuple[bytes, str], ...]
    detail: str


def assign_blame(
    members: Sequence[bytes],
    outer_publics: Mapping[bytes, bytes],
    submissions: Mapping[bytes, bytes],
    batches: Mapping[int, Sequence[bytes]],
    outer_secrets: Mapping[bytes, bytes],
    permutations: Mapping[bytes, Sequence[int]],
    no_go_voters: Sequence[bytes],
    commitments: Mapping[bytes, bytes] | None = None,
    salts: Mapping[bytes, bytes] | None = None,
    *,
    round_id: bytes,
    group: int,
    run: int,
) -> BlameResult:
    """Re-execute the run from revealed secrets and find the first deviation.

    Order of checks: a revealed secret that does not match its published key; then, mixer by
    mixer, an input item that does not peel (its submitter built a malformed onion), no output batch
    (a false no-go: hers, or one that stopped the run before her), or an output batch that differs
    from peel-and-permute of the input (the mixer tampered). If every step is
    consistent, every member's commitment must open to an item of the final batch, each item
    claimed by one member only: a member whose commitment does not (she copied someone's onion, or
    colluded to share a salt) is ``blamed_copy``. Only then did the no-go voters complain falsely.
    """
    g = len(members)
    keys: dict[bytes, crypto.KxKey] = {}
    bad: list[tuple[bytes, str]] = []
    for member in members:
        secret = outer_secrets.get(member)
        if secret is None:
            bad.append((member, "silent"))
            continue
        try:
            key = crypto.KxKey.from_secret(secret)
        except (ValueError, crypto.CryptoError):
            bad.append((member, "blamed_tamper"))
            continue
        if key.public != outer_publics.get(member):
            bad.append((member, "blamed_tamper"))
            continue
        keys[member] = key
    if bad:
        return BlameResult(tuple(bad), "missing or wrong revealed outer secrets")
    # origin[p] = index (in member order) of the submitter whose item sits at position p.
    items = [submissions[m] for m in members]
    origin = list(range(g))
    for step in range(1, g + 1):
        mixer = members[step - 1]
        perm = list(permutations.get(mixer, ()))
        aad = outer_aad(round_id, group, run, step)
        peeled: list[bytes] = []
        for position, item in enumerate(items):
            try:
                peeled.append(crypto.peel(keys[mixer], item, aad))
            except crypto.CryptoError:
                submitter = members[origin[position]]
                return BlameResult(((submitter, "blamed_malformed"),), f"item undecryptable at step {step}")
        published = batches.get(step)
        if published is None:
            # The run stopped here although every item peels (a blame binds the batch its mixer published, and
            # carries the one its author took, so the evidence lacks none either stated). A mixer who voted no-go
            # on it withheld her batch. A later batch was mixed from nothing: its blame carried no input. Else she
            # blamed on a no-go that came before the run reached her (she never mixed; before, honest mixers were
            # blamed for an early no-go), and that no-go was false.
            if mixer in no_go_voters or not no_go_voters:
                return BlameResult(((mixer, "blamed_false_complaint"),), f"step {step}: batch withheld")
            later = next((s for s in range(step + 1, g + 1) if batches.get(s) is not None), None)
            if later is not None:
                return BlameResult(((members[later - 1], "blamed_tamper"),), f"step {later}: a batch without input")
            return BlameResult(tuple((m, "blamed_false_complaint") for m in no_go_voters),
                               f"step {step}: no-go before the run reached it")
        if not is_permutation(perm, g):
            return BlameResult(((mixer, "blamed_tamper"),), f"step {step}: revealed permutation invalid")
        expected = [peeled[perm[p]] for p in range(g)]
        if list(published) != expected:
            return BlameResult(((mixer, "blamed_tamper"),), f"step {step}: batch is not a permutation of peels")
        items = expected
        origin = [origin[perm[p]] for p in range(g)]
    if commitments is not None and salts is not None:
        copies = _uncommitted(members, items, commitments, salts)
        if copies:
            return BlameResult(tuple((m, "blamed_copy") for m in copies),
                               "a final item without its own author (a copied onion)")
    culprits = tuple((voter, "blamed_false_complaint") for voter in no_go_voters)
    return BlameResult(culprits, "every step consistent: no-go votes were false")


def _uncommitted(members: Sequence[bytes], final: Sequence[bytes], commitments: Mapping[bytes, bytes],
                 salts: Mapping[bytes, bytes]) -> list[bytes]:
    """Members whose commitment opens to no final item, or to an item another member claims too."""
    claims: dict[bytes, list[bytes]] = {}
    bad: list[bytes] = []
    distinct = set(final)
    for member in members:
        salt = salts.get(member, b"")
        commitment = commitments.get(member)
        item = next((x for x in distinct if inner_commitment(x, salt) == commitment), None)
        if item is None:
            bad.append(member)
        else:
            claims.setdefault(item, []).append(member)
    for claimants in claims.values():
        if len(claimants) > 1:
            bad.extend(claimants)
    # Every item claimed once, but the batch holds duplicates: impossible once each member claims a
    # distinct item (g members, g items), so nothing more to check.
    return sorted(bad)


#: Bytes of one signed message beyond its variable parts, with room (SPEC §7.1: tag, round id, sender,
#: group, run, step and digests, the signature, msgpack framing; measured: a vote 267, a blame 229).
_MESSAGE_FRAME = 320
#: msgpack's largest header of one bin entry (bin 32) or of one uint (uint 64).
_BIN_HEADER = 5
_UINT = 9


def onion_bytes(members: int, width: int, peeled: int = 0) -> int:
    """Length of an item of a run of ``members`` members with ``peeled`` layers removed (SPEC §8.2): the record
    (8 bytes per value) sealed to the collector, then to every member's inner key, then one layer per mixer."""
    inner = 8 * width + 2 * crypto.SEAL_OVERHEAD
    return inner + (members - peeled) * crypto.SEAL_OVERHEAD


def largest_run_message(members: int, width: int) -> int:
    """An upper bound of the bytes of the largest message a run of ``members`` members produces honestly: mixer 1's
    blame (SPEC §8.4), which carries every member's submission (a whole onion each), two final batches and a vote.
    Every other message is smaller: a batch holds ``members`` items of at most one layer fewer than a submission,
    another mixer's blame one batch, two final ones and a vote. It grows with the square of ``members``."""
    submission = _MESSAGE_FRAME + onion_bytes(members, width)
    final_batch = _MESSAGE_FRAME + members * (_BIN_HEADER + onion_bytes(members, width, members))
    carried = members * (_BIN_HEADER + submission) + 2 * (_BIN_HEADER + final_batch) + _BIN_HEADER + _MESSAGE_FRAME
    return _MESSAGE_FRAME + members * _UINT + carried


def largest_group(width: int, max_message_bytes: int) -> int:
    """The most members a run can have for every message of it to fit in ``max_message_bytes`` (`largest_run_message`;
    0 when not even one member's does)."""
    low, high = 0, 1
    while largest_run_message(high, width) <= max_message_bytes:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if largest_run_message(middle, width) <= max_message_bytes else (low, middle)
    return low


def run_message_limit(max_message_bytes: int) -> int:
    """What every message of a run must fit: the collector's ``max_message_bytes`` (announced in its manifest) and
    the `MAX_MESSAGE_BYTES` every subject applies (SPEC §7.1)."""
    return min(max_message_bytes, MAX_MESSAGE_BYTES)


def largest_run_members(confidential: Sequence[str]) -> int:
    """The most members a merged run may have (SPEC §4): its messages must fit the `MAX_MESSAGE_BYTES` every subject
    applies. The protocol's constant, not the collector's announced ``max_message_bytes``: a limit the collector
    chooses would let it choose which groups are too large, and so steer a merge (found by thinking as an attacker
    on the first version of this rule)."""
    return largest_group(len(confidential), MAX_MESSAGE_BYTES)
