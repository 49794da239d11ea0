"""Wire messages: a closed tagged union of frozen dataclasses.

Every message travels inside a signed envelope (see `coutil.protocol.codec`): the envelope's
payload is the msgpack encoding of ``[tag, round_id, sender, *fields]``, signed with the sender's
Ed25519 key over the exact payload bytes. The tag of each class is its ``TAG``; the fields are
encoded in declaration order. Byte fields are raw bytes, floats are IEEE doubles, lists are lists.

Field conventions: ``round_id`` 16 bytes; public keys 32 bytes; digests 32 bytes (SHA-256);
``group`` is the group number (int >= 0); ``run`` the shuffle run number of that group (int >= 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias


@dataclass(frozen=True)
class RoundParams:
    """Everything a subject must know to take part; part of the signed announce (the manifest)."""

    qi_names: tuple[str, ...]
    confidential_names: tuple[str, ...]
    k: int
    method: str  # "mdav"
    #: Absolute deadlines (seconds on the collector's clock, shared virtual or wall time).
    register_deadline: float
    #: Per-step timeout of the shuffle and audit phases (seconds).
    step_timeout: float
    audit_deadline_after_release: float
    #: Collector's X25519 public key for the innermost encryption layer (round-specific).
    collector_kx: bytes
    #: Audit thresholds the collector promises (a subject may apply stricter ones of her own).
    min_permutation_distance: int
    #: Random records each subject draws for her plausibility test, and its significance level.
    random_records: int
    alpha: float
    #: Transparency manifest (Definition 4 of paper 002): every parameter except random seeds.
    manifest: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Announce:
    """Collector -> all (retained). Opens a round."""

    TAG: ClassVar[str] = "announce"
    round_id: bytes
    sender: bytes  # collector's long-term Ed25519 public key
    params: RoundParams


@dataclass(frozen=True)
class Register:
    """Subject -> collector. Her fresh per-round key (the sender), her QI values, and the salt of her QIs'
    commitment in her roster leaf (SPEC §8.3), so that fellow members can check her leaf without her QIs."""

    TAG: ClassVar[str] = "register"
    round_id: bytes
    sender: bytes
    qi: tuple[float, ...]
    salt: bytes


@dataclass(frozen=True)
class RegisterAck:
    """Collector -> subject inbox. Confirms the registration with the digest of its payload."""

    TAG: ClassVar[str] = "register_ack"
    round_id: bytes
    sender: bytes
    subject: bytes
    register_digest: bytes


@dataclass(frozen=True)
class Roster:
    """Collector -> all (retained). The agreed roster: Merkle root over the sorted leaves."""

    TAG: ClassVar[str] = "roster"
    round_id: bytes
    sender: bytes
    n: int
    merkle_root: bytes
    n_groups: int


@dataclass(frozen=True)
class Assign:
    """Collector -> subject inbox. Her roster leaf with its inclusion proof, and her group."""

    TAG: ClassVar[str] = "assign"
    round_id: bytes
    sender: bytes
    subject: bytes
    leaf_index: int
    proof: tuple[bytes, ...]
    merkle_root: bytes
    group: int
    #: Group members' per-round Ed25519 keys in mixing order (sorted by key).
    members: tuple[bytes, ...]
    centroid: tuple[float, ...]
    #: Each other member's roster entry, in ``members`` order without her: (leaf index, QI commitment,
    #: inclusion proof), so that she checks every fellow is on the roster (SPEC §8.3) without their QIs.
    fellows: tuple[tuple[int, bytes, tuple[bytes, ...]], ...]


@dataclass(frozen=True)
class ShuffleStart:
    """Collector -> group. Starts run ``run`` of the group's shuffle with these members.

    ``excluded`` lists members dropped since the previous run with a reason code each
    (SPEC §7.3: ``silent``, ``blamed_tamper``, ``blamed_equivocation``, ``merged``, ...).
    """

    TAG: ClassVar[str] = "shuffle_start"
    round_id: bytes
    sender: bytes
    group: int
    run: int
    members: tuple[bytes, ...]
    excluded: tuple[tuple[bytes, str], ...]
    deadline: float


@dataclass(frozen=True)
class RunKeys:
    """Member -> group. Fresh X25519 keys for this run: outer (mixing layer) and inner (sealing layer).

    ``roster_root`` and ``members_digest`` (`coutil.protocol.shuffle.members_digest`) state the view
    of the round and of the run she was given: members compare them with their own (split views).
    """

    TAG: ClassVar[str] = "run_keys"
    round_id: bytes
    sender: bytes
    group: int
    run: int
    outer_kx: bytes
    inner_kx: bytes
    roster_root: bytes
    members_digest: bytes


@dataclass(frozen=True)
class Submit:
    """Member -> the first mixer. Her onion: inner sealing of her collector-encrypted record, then
    outer layers; and a hiding commitment to her inner-sealed ciphertext (opened only in a blame,
    where it shows who authored each item of the final batch: a copied onion is attributable)."""

    TAG: ClassVar[str] = "submit"
    round_id: bytes
    sender: bytes
    group: int
    run: int
    onion: bytes
    inner_commitment: bytes


@dataclass(frozen=True)
class Batch:
    """Mixer ``step`` (1-based position in the mixing order) -> group: peeled and permuted items."""

    TAG: ClassVar[str] = "batch"
    round_id: bytes
    sender: bytes
    group: int
    run: int
    step: int
    items: tuple[bytes, ...]


@dataclass(frozen=True)
class Vote:
    """Member -> group. Go when her inner ciphertext is in the final batch, no-go otherwise; with
    her view of the roster and of the run's members (as in `RunKeys`), and of the run's keys."""

    TAG: ClassVar[str] = "vote"
    round_id: bytes
    sender: bytes
    group: int
    run: int
    go: bool
    final_digest: bytes
    roster_root: bytes
    members_digest: bytes
    #: Every member's run keys as she used them (`coutil.protocol.shuffle.keys_digest`).
    keys_digest: bytes


@dataclass(frozen=True)
class RevealOpen:
    """Collector -> group. Every group has voted go: members may now release their inner keys."""

    TAG: ClassVar[str] = "reveal_open"
    round_id: bytes
    sender: bytes
    group: int
    run: int
    final_digest: bytes


@dataclass(frozen=True)
class Reveal:
    """Member -> group. Her inner private key of this run, after all go votes and reveal_open."""

    TAG: ClassVar[str] = "reveal"
    round_id: bytes
    sender: bytes
    group: int
    run: int
    inner_secret: bytes


@dataclass(frozen=True)
class Blame:
    """Member -> group after a no-go: her outer private key and permutation (never the inner key), bound to
    the messages she took, the batch she published and the no-go vote she answers (SPEC §8.4)."""

    TAG: ClassVar[str] = "blame"
    round_id: bytes
    sender: bytes
    group: int
    run: int
    outer_secret: bytes
    #: For a mixer: output position p holds the peel of input position permutation[p]. Empty if not a mixer.
    permutation: tuple[int, ...]
    #: Opens her submit's ``inner_commitment`` (SPEC §8.4): who authored which final item.
    commitment_salt: bytes
    #: The exact envelopes of the messages she took, those that reached her: her input (the batch of step - 1;
    #: mixer 1's: every member's submission she mixed, hers included) and the final batch she voted on. The
    #: collector cannot leave out of a run's evidence a message a member took, and a member who signed another
    #: submission where the collector reads than the one mixer 1 mixed is shown equivocating (SPEC §8.4).
    taken: tuple[bytes, ...]
    #: `batch_digest` of the batch she published as mixer, `NO_BATCH` if she never mixed in this run: the
    #: evidence of a blame must hold that batch, and a batch of hers with another digest is her equivocation.
    batch_digest: bytes
    #: The exact envelope of the signed no-go vote she answers (hers, if she voted no-go): a blame carrying
    #: none is unsolicited, whatever votes the collector shows (SPEC §8.4).
    no_go_vote: bytes


@dataclass(frozen=True)
class GroupDone:
    """Collector -> group. The group's records were opened; members may stop re-sending."""

    TAG: ClassVar[str] = "group_done"
    round_id: bytes
    sender: bytes
    group: int
    run: int


@dataclass(frozen=True)
class Release:
    """Collector -> all (retained). The anonymized release and its manifest.

    ``rows`` is the little-endian float64 matrix (n_rows x (len(qi)+len(confidential))) as bytes:
    QI columns (group centroids) then confidential columns; ``group_ids`` lists the groups in row
    order and ``group_sizes`` the number of consecutive rows of each.
    """

    TAG: ClassVar[str] = "release"
    round_id: bytes
    sender: bytes
    columns: tuple[str, ...]
    group_ids: tuple[int, ...]
    group_sizes: tuple[int, ...]
    rows: bytes
    #: RFC 6962 root over the rows (each row's little-endian float64 bytes is a leaf), recomputed by every subject.
    rows_root: bytes
    #: The roster this release was computed from (every subject compares it with the one she saw).
    roster_root: bytes


@dataclass(frozen=True)
class Fetch:
    """Subject -> collector: please re-send what I am missing (``what`` = "release", "roster" or "assign")."""

    TAG: ClassVar[str] = "fetch"
    round_id: bytes
    sender: bytes
    what: str


#: The reason codes of a verdict (SPEC §7.3): her audit's (`coutil.audit.subject.REASONS`) and the protocol
#: complaints. A verdict with another reason is REJECT ``bad_field`` (an auditor or an operator's screen must
#: never have to print a subject's free text).
VERDICT_REASONS = frozenset({
    "ok", "malformed_release", "not_included", "not_k_anonymous", "distance_below_promise", "rows_root_mismatch",
    "roster_mismatch", "split_view", "rerun_after_reveal", "excluded_after_reveal", "regroup_after_reveal",
    "run_below_k", "run_not_in_group", "run_not_as_stated", "group_not_as_run", "fellow_not_on_roster",
})


@dataclass(frozen=True)
class Verdict:
    """Subject -> collector. Her audit verdict: accept, or the reason of her complaint, bound to the
    release she judged (its payload digest) and the roster she saw. Nothing else: d, v, the
    plausibility and her values stay on her device."""

    TAG: ClassVar[str] = "verdict"
    round_id: bytes
    sender: bytes
    accept: bool
    reason: str
    release_digest: bytes
    roster_root: bytes


@dataclass(frozen=True)
class VerdictAck:
    """Collector -> subject inbox: the verdict is recorded."""

    TAG: ClassVar[str] = "verdict_ack"
    round_id: bytes
    sender: bytes
    subject: bytes
    verdict_digest: bytes


Message: TypeAlias = (
    Announce
    | Register
    | RegisterAck
    | Roster
    | Assign
    | ShuffleStart
    | RunKeys
    | Submit
    | Batch
    | Vote
    | RevealOpen
    | Reveal
    | Blame
    | GroupDone
    | Release
    | Fetch
    | Verdict
    | VerdictAck
)

#: The closed union, by tag.
MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.TAG: cls
    for cls in (
        Announce,
        Register,
        RegisterAck,
        Roster,
        Assign,
        ShuffleStart,
        RunKeys,
        Submit,
        Batch,
        Vote,
        RevealOpen,
        Reveal,
        Blame,
        GroupDone,
        Release,
        Fetch,
        Verdict,
        VerdictAck,
    )
}

#: Messages only the collector may send; all others are sent by subjects.
COLLECTOR_TAGS = frozenset(
    {"announce", "register_ack", "roster", "assign", "shuffle_start", "reveal_open", "group_done", "release",
     "verdict_ack"}
)

