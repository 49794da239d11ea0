"""The collector service: a `CollectorNode` whose every acknowledgement is backed by SQLite.

`PersistentCollector` wraps the sans-IO collector and follows the storage rule **write first,
publish second**: the driver publishes a node's outgoing messages only after `receive` (or
`on_timer`, `start`) returns, and before returning the service drains the node's events and commits
what they report, in one transaction:

* `RegistrationAccepted` / `VerdictAccepted`: the exact payload just received (before its ack);
* `GroupsFormed`: the roster (sorted subject keys, Merkle root, the signed roster) and every
  subject's group with her signed assign (before the roster and the assigns are published);
  `GroupMerged`: the moved members' new assigns;
* `MemberExcluded`: the exclusion; `ReleasePublished`: the signed release and its CSV (before it
  is published); `PhaseChanged`: the phase; when the round ends, every exclusion and the rejection
  counts (from the node's public `outcome()` and `rejections`).

It reads nothing private of the node: only its events, its outgoing messages (found by topic,
`coutil.protocol.topics`) and its public API. A ``kill -9`` therefore never loses anything the
collector acknowledged or published.

Restart semantics (`open_round`): the newest unfinished round in the database is

* **resumed** when it was still in registration and its registration window is still open: the
  collector is rebuilt from the service's secret seed (same identity, same round key, same deadlines,
  hence a byte-identical announce) and the stored registrations are replayed into it (their acks are
  re-sent; subjects de-duplicate them);
* **aborted** otherwise, at any later phase boundary (registration closed, sharing, auditing,
  released): the round's phase is set to ``aborted``; every stored row (registrations, roster,
  assignments, exclusions, release, verdicts) stays as it was and ``coutil collector export`` still
  writes a stored release. A fresh round is then announced. A shuffle is not resumed: the members'
  per-run keys live only in their processes, and the collector's round key only in the crashed
  one, so records never opened before the crash can never be opened.

The service's secret seed lives beside the database in ``<db>.secret`` (mode 0600): 32 random
bytes from which the collector's signing key and each round's random stream are derived
(HMAC-SHA256 in counter mode keyed with a 256-bit secret is a sound deterministic generator).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from coutil.collector.storage import CollectorStore, StoredRegistration, StoredRound
from coutil.errors import InputError
from coutil.fileio import fsync_directory
from coutil.protocol import codec, crypto, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import (
    CollectorEvent,
    GroupDissolved,
    GroupMerged,
    GroupsFormed,
    MemberExcluded,
    PhaseChanged,
    RegistrationAccepted,
    ReleasePublished,
    RunStarted,
    VerdictAccepted,
)
from coutil.protocol.messages import Assign, Roster, ShuffleStart
from coutil.protocol.node import SERIAL_POOL, Outgoing, Rejection, SeededRandom, SystemRandom, WorkPool
from coutil.sdc.dataset import format_number

SECRET_BYTES = 32

#: The events whose news the service commits before the call's outgoing messages leave.
_STORED_EVENTS = (RegistrationAccepted, VerdictAccepted, GroupsFormed, GroupMerged, MemberExcluded,
                  ReleasePublished, PhaseChanged, RunStarted, GroupDissolved)
#: Events whose call publishes shuffle_starts (a run's, or a closing one with no members): each states who
#: left its group and why, what an auditor checks the exclusions against (`coutil verify`, exclusion_evidence).
_RUN_EVENTS = (RunStarted, GroupMerged, GroupDissolved, MemberExcluded)


def secret_path(db_path: Path) -> Path:
    """Where the service's secret seed of the database ``db_path`` lives: ``<db>.secret``."""
    return db_path.with_name(db_path.name + ".secret")


def lock_path(db_path: Path) -> Path:
    """The lock file of the service serving the database ``db_path``: ``<db>.lock``."""
    return db_path.with_name(db_path.name + ".lock")


@contextlib.contextmanager
def serving_lock(db_path: Path) -> Iterator[None]:
    """Hold the database for one service, or `InputError` (exit 2) naming the process that holds it.

    Two services on one database would each resume its open round from the same secret and sign it a
    roster of their own: to its subjects, a collector that equivocated (SPEC §4, proof of equivocation).
    An advisory lock (``flock``) on ``<db>.lock``, released by the kernel however the holder ends (a crash
    or SIGKILL leaves no stale lock); the file holds the holder's pid for this message and stays in place.
    Commands that only read the database (``status``, ``export``) take no lock. The lock is named from the
    database's real path: two services on one database through a symbolic link took two locks (found by an
    attacker playing the unlucky operator; a hard link still does, a name the kernel cannot resolve back).
    """
    try:
        path = lock_path(db_path.resolve())
    except (OSError, RuntimeError):  # a symlink loop, a directory this user may not search: the name as given
        path = lock_path(db_path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise InputError(f"{path}: cannot open the service's lock file ({exc.strerror or exc})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 20, 0).decode("ascii", errors="replace").strip()
            raise InputError(f"{db_path}: already served by another `coutil collector serve` (pid "
                             f"{holder if holder.isdigit() else 'unknown'}); a second service would sign other "
                             "rosters for its rounds: stop that one first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def load_secret(db_path: Path) -> bytes | None:
    """The service's secret seed, or None when it has none yet; `InputError` for a file that cannot be one."""
    path = secret_path(db_path)
    try:
        # `Path.exists` raises for a directory this user may not search (EACCES): a one-line error, not a bug.
        if not path.exists() and not path.is_symlink():
            return None
        secret = path.read_bytes()
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not the collector's secret file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the collector's secret file ({exc.strerror or exc})") from None
    if len(secret) != SECRET_BYTES:
        raise InputError(f"{path}: corrupt secret file (expected {SECRET_BYTES} bytes, found {len(secret)})")
    return secret


def create_secret(db_path: Path) -> bytes:
    """A new secret seed, written with mode 0600 (never over an existing file), whole or not at all.

    Written to a temporary file beside it, made durable, then linked into place: a short secret left behind (a
    kill or a power loss between creating the file and its data reaching the disk, found by an attacker who can
    kill the collector; or a full disk) is refused as corrupt at every later start, a crash loop under a restart
    policy. The temporary file (mode 0600) is removed however this ends, but by a kill."""
    path = secret_path(db_path)
    secret = SystemRandom().bytes(SECRET_BYTES)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # mode 0600
    except OSError as exc:
        raise InputError(f"{path}: cannot create the collector's secret file ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secret)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, path)  # FileExistsError rather than over an existing secret
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: the service's lock keeps others out meanwhile
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
            os.rename(temp, path)
        fsync_directory(path.parent)
    except OSError as exc:
        raise InputError(f"{path}: cannot write the collector's secret file ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    return secret


def load_or_create_secret(db_path: Path) -> bytes:
    """The service's secret seed (created with mode 0600 on first use)."""
    secret = load_secret(db_path)
    return secret if secret is not None else create_secret(db_path)


def check_identity(store: CollectorStore, db_path: Path, secret: bytes | None) -> None:
    """`InputError` (exit 2) when the secret beside the database is not the one that signed its rounds.

    A database moved or restored without its ``<db>.secret`` (or beside another database's) would otherwise
    get a new secret, i.e. a new collector identity: its subjects, who pin the old key, would ignore every
    message of the service, and its open round would be aborted. Refused before anything is written."""
    signed_by = store.latest_collector_key()
    path = secret_path(db_path)
    if signed_by is None:
        # The schema is written before the secret is created, so a secret beside a database that had no tables
        # is one whose database was deleted, truncated or replaced (found by an attacker playing the unlucky
        # operator: served silently as a new database under the old identity, every stored round gone).
        if secret is not None and store.created:
            raise InputError(f"{db_path}: new or empty, but {path} beside it is the secret of a collector whose "
                             "database held its rounds (deleted, truncated or replaced?): restore the database "
                             "from its backup; to start a new database on purpose, move that secret away first")
        return
    if secret is None:
        raise InputError(f"{db_path}: its rounds were signed by collector key {signed_by.hex()}, but {path} is "
                         "missing: restore it from the database's backup (a new secret would be a new collector "
                         "identity, which its subjects do not know); a new collector starts a new database")
    if identity_from_secret(secret).public != signed_by:
        raise InputError(f"{path}: not the secret of the collector key {signed_by.hex()} that signed the rounds of "
                         f"{db_path}: restore that database's own secret")


def identity_from_secret(secret: bytes) -> crypto.SigningKey:
    return crypto.SigningKey.from_seed(hashlib.sha256(b"coutil collector identity" + secret).digest())


def round_rng(secret: bytes, round_id: bytes) -> SeededRandom:
    return SeededRandom(hashlib.sha256(b"coutil collector round" + secret + round_id).digest())


class PersistentCollector:
    """A `CollectorNode` that commits what it acknowledges (implements `coutil.protocol.node.Node`)."""

    def __init__(
        self, node: CollectorNode, store: CollectorStore, *,
        resume: tuple[float, Sequence[StoredRegistration]] | None = None,
    ) -> None:
        """``resume``: (the round's original start time, its stored registrations)."""
        self.node = node
        self.store = store
        self.round_id = node.round_id
        self.client_id = node.client_id
        self._resume = resume
        self._limits = codec.Limits(max_message_bytes=node.config.accepted_message_bytes)
        #: The node's events, drained after every call, for the driver's `drain_events`.
        self._events: list[CollectorEvent] = []
        #: sid -> subject key of every accepted registration (exclusion events name the sid).
        self._subjects: dict[str, bytes] = {}
        self._finish_stored = False
        self._evidence_stored: set[tuple[int, int]] = set()

    # -- Node interface ---------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.node.finished

    @property
    def rejections(self) -> list[Rejection]:
        return list(self.node.rejections)

    def subscriptions(self) -> frozenset[str]:
        return self.node.subscriptions()

    def next_timer(self) -> float | None:
        return self.node.next_timer()

    def start(self, now: float) -> list[Outgoing]:
        if self._resume is not None:
            # Re-announce the stored round (byte-identical) and replay its registrations; their
            # acknowledgements are re-sent, which subjects de-duplicate. One transaction for the lot.
            started_at, registrations = self._resume
            with self.store.transaction():
                out = self._step(self.node.start(now, started_at=started_at), None, now)
                for stored in registrations:
                    # Replayed on the topic it originally arrived on (its sender's own), as the node checks.
                    topic = topics.subject_up(self.round_id, stored.subject_key)
                    out.extend(self._step(self.node.receive(topic, stored.payload, now), stored.payload, now))
            return out
        out = self.node.start(now)
        announce = next(o.payload for o in out if o.topic == topics.ANNOUNCE)
        with self.store.transaction():
            self.store.create_round(self.round_id, dataclasses.asdict(self.node.config),
                                    collector_key=self.node.public_key, now=now, announce=announce)
            return self._step(out, None, now)

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        return self._step(self.node.receive(topic, payload, now), payload, now)

    def on_timer(self, now: float) -> list[Outgoing]:
        return self._step(self.node.on_timer(now), None, now)

    def on_transport(self, up: bool, now: float) -> list[Outgoing]:
        return self._step(self.node.on_transport(up, now), None, now)

    def drain_events(self) -> list[CollectorEvent]:
        events, self._events = self._events, []
        return events

    # -- persistence ------------------------------------------------------------------------------
    def _step(self, out: list[Outgoing], received: bytes | None, now: float) -> list[Outgoing]:
        """Commit what the node's new events report, then hand ``out`` back (write first)."""
        events = self.node.drain_events()
        self._events.extend(events)
        stored = [e for e in events if isinstance(e, _STORED_EVENTS)]
        finishing = self.node.finished and not self._finish_stored
        if not stored and not finishing:
            return out
        with self.store.transaction():
            for event in stored:
                self._commit(event, out, received)
            if any(isinstance(e, _RUN_EVENTS) for e in stored):
                self._store_shuffle_starts(out)
            if any(isinstance(e, MemberExcluded) and e.reason.startswith("blamed_") for e in stored):
                self._store_run_evidence()
            if finishing:
                self._store_finish(now)
        return out

    def _commit(self, event: CollectorEvent, out: list[Outgoing], received: bytes | None) -> None:
        store, round_id = self.store, self.round_id
        if isinstance(event, RegistrationAccepted | VerdictAccepted):
            # Reported by the node while it handled ``received``: those are the bytes it accepted.
            if received is None or codec.payload_digest_of(received, self._limits) != event.digest:
                raise RuntimeError(f"{event.kind} without the payload it accepts")
            if isinstance(event, RegistrationAccepted):
                self._subjects[event.sid] = event.subject
                store.record_registration(round_id, event.subject, received, event.digest, event.at)
            else:
                store.record_verdict(round_id, event.subject, received, event.digest, accept=event.accept,
                                     now=event.at)
        elif isinstance(event, GroupsFormed):
            self._store_roster(out)
            self._store_assignments(out)
        elif isinstance(event, GroupMerged):
            self._store_assignments(out)
        elif isinstance(event, MemberExcluded):
            key = self._subjects.get(event.sid)
            if key is not None:
                store.record_exclusion(round_id, key, event.reason)
        elif isinstance(event, ReleasePublished):
            self._store_release(out, event.at)

        elif isinstance(event, PhaseChanged):
            store.set_phase(round_id, event.phase, event.at)

    def _store_roster(self, out: list[Outgoing]) -> None:
        payload = next(o.payload for o in out if o.topic == topics.roster(self.round_id))
        roster = codec.decode_own(payload, self._limits)
        if not isinstance(roster, Roster):
            raise RuntimeError(f"{roster.TAG} on the roster topic")
        keys = sorted(self._subjects.values())  # the roster order
        if len(keys) != roster.n:
            raise RuntimeError(f"roster of {roster.n} subjects, {len(keys)} registrations seen")
        self.store.record_roster(self.round_id, keys, roster.merkle_root, payload)

    def _store_assignments(self, out: list[Outgoing]) -> None:
        assignments: list[tuple[bytes, int, bytes | None]] = []
        for o in out:
            if topics.INBOX_MARK in o.topic:
                message = codec.decode_own(o.payload, self._limits)
                if isinstance(message, Assign):
                    assignments.append((message.subject, message.group, o.payload))
        self.store.record_assignments(self.round_id, assignments)

    def _store_shuffle_starts(self, out: list[Outgoing]) -> None:
        starts: dict[bytes, tuple[int, int, bytes]] = {}
        for o in out:
            if o.payload in starts or not (topics.INBOX_MARK in o.topic or "/c/group/" in o.topic):
                continue
            message = codec.decode_own(o.payload, self._limits)
            if isinstance(message, ShuffleStart):
                starts[o.payload] = (message.group, message.run, o.payload)
        if starts:
            self.store.record_shuffle_starts(self.round_id, starts.values())

    def _store_run_evidence(self) -> None:
        for (group, run), envelopes in self.node.run_evidence().items():
            if (group, run) not in self._evidence_stored:
                self.store.record_run_evidence(self.round_id, group, run, envelopes)
                self._evidence_stored.add((group, run))

    def _store_release(self, out: list[Outgoing], at: float) -> None:
        payload = next(o.payload for o in out if o.topic == topics.release(self.round_id))
        outcome = self.node.outcome()
        lines = [",".join(outcome.columns)]
        lines.extend(",".join(format_number(float(v)) for v in row) for row in outcome.rows)
        self.store.record_release(self.round_id, payload, "\n".join(lines) + "\n", at)

    def _store_finish(self, now: float) -> None:
        outcome = self.node.outcome()
        for excluded in outcome.excluded:
            key = self._subjects.get(str(excluded["sid"]))
            if key is not None:
                self.store.record_exclusion(self.round_id, key, str(excluded["reason"]))
        self.store.add_rejections(self.round_id, outcome.rejections)
        self._finish_stored = True


@dataclass(frozen=True)
class OpenedRound:
    collector: PersistentCollector
    #: "new", "resumed", or "new after aborting <round id>".
    how: str


def _reannounced(config: RoundConfig, identity: crypto.SigningKey, secret: bytes, stored: StoredRound) -> bytes:
    """The announce a resumed round would publish (a throwaway node, the same seed and start time)."""
    probe = CollectorNode(config, identity=identity, rng=round_rng(secret, stored.round_id), round_id=stored.round_id)
    out = probe.start(stored.created_at, started_at=stored.created_at)
    return next(o.payload for o in out if o.topic == topics.ANNOUNCE)


def open_round(store: CollectorStore, secret: bytes, config: RoundConfig, now: float, *,
               pool: WorkPool = SERIAL_POOL) -> OpenedRound:
    """Resume the newest unfinished round when possible, else abort it and create a new one.
    ``pool``: where the collector opens the groups' records (`coutil.protocol.node.WorkPool`)."""
    identity = identity_from_secret(secret)
    how = "new"
    latest = store.latest_round()
    if latest is not None and latest.phase not in ("done", "aborted"):
        stored = store.load_round(latest.round_id)
        stored_config: RoundConfig | None = None
        unreadable = ""
        if stored.phase == "registration":
            try:
                stored_config = RoundConfig.from_mapping(stored.params)
            except (InputError, ValueError, TypeError) as exc:
                # Parameters this coutil cannot take (another version's, or edited): the round cannot be
                # re-announced as it was, so it is aborted like any round it would announce otherwise.
                unreadable = f" (its stored parameters are not this coutil's: {exc})"
        if stored_config is not None and now < stored.created_at + stored_config.register_window:
            node = CollectorNode(stored_config, identity=identity, rng=round_rng(secret, stored.round_id),
                                 round_id=stored.round_id, pool=pool)
            # Every run's membership digest starts from the announce's digest (SPEC §8.4): resumed under
            # an announce its subjects did not register on (a coutil upgraded in between, whose manifest
            # lists another field), every run would be a split view. Such a round is aborted.
            if _reannounced(stored_config, identity, secret, stored) == stored.announce:
                resume = (stored.created_at, stored.registrations)
                return OpenedRound(PersistentCollector(node, store, resume=resume), "resumed")
            store.set_phase(stored.round_id, "aborted", now)
            how = f"new after aborting {stored.round_id.hex()} (this coutil would announce it otherwise)"
        else:
            store.set_phase(stored.round_id, "aborted", now)
            how = f"new after aborting {stored.round_id.hex()}{unreadable}"
    round_id = SystemRandom().bytes(16)
    node = CollectorNode(config, identity=identity, rng=round_rng(secret, round_id), round_id=round_id, pool=pool)
    return OpenedRound(PersistentCollector(node, store), how)
