"""Protocol parameters: one validated, frozen dataclass; TOML files load into it.

A TOML file has a ``[round]`` table whose keys are the field names below, e.g.::

    [round]
    qi = ["age", "height_cm"]
    confidential = ["income"]
    k = 5
    step_timeout = 20.0

Unknown keys and out-of-range values are `InputError`s (exit code 2 in the CLI).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from coutil.errors import InputError
from coutil.fileio import read_toml
from coutil.protocol.codec import MAX_MESSAGE_BYTES
from coutil.protocol.shuffle import largest_group, largest_run_members, largest_run_message, run_message_limit
from coutil.sdc.generalization import Scheme, parse_scheme, scheme_text

#: Hard caps that keep a single round within what one collector can hold.
MAX_ATTRIBUTES = 64
MAX_K = 1000
#: Random records of a subject's plausibility test (a subject refuses a round asking for more).
MAX_RANDOM_RECORDS = 10**7
#: Largest magnitude of a registered QI value (SPEC §7.3 register): beyond it a group's sum of QIs could
#: overflow float64 (two registrations of 1e308 crashed MDAV's standardization and the collector service,
#: found by an attacker); 1e15 is also where float64 stops holding every integer.
MAX_QI_MAGNITUDE = 1e15
#: How a round may form its groups.
GROUPINGS = ("mdav", "safepub")
#: The manifest entry by which the collector commits, in its signed announce, to publish the round's transcript with
#: every signed shuffle_start and the run evidence (transcript version 3, SPEC §8.5), signed by it (version 4):
#: without the commitment a collector exporting less (an older format, or nothing of it) turns the auditor's
#: `exclusion_evidence` and `blame_evidence` checks into skips, its exclusions then its word, and an unsigned
#: transcript lets it hand two auditors two rounds with nothing to show for it; with it, they fail. A subject takes
#: part only in a round that carries it (SPEC §4 announce), so that no honest subject's round can be downgraded.
TRANSCRIPT_COMMITMENT = ("transcript", "4")
#: The first committed version that carries the run evidence, and the first that is signed.
EVIDENCE_VERSION = 3
SIGNED_VERSION = 4


def committed_transcript(manifest: tuple[tuple[str, str], ...]) -> int:
    """The transcript version a signed announce's manifest commits to (0: none, or not a version number)."""
    value = dict(manifest).get(TRANSCRIPT_COMMITMENT[0], "")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 6 else 0


def commits_to_evidence(manifest: tuple[tuple[str, str], ...]) -> bool:
    """Whether a signed announce's manifest commits to the run evidence (version 3, or a later one)."""
    return committed_transcript(manifest) >= EVIDENCE_VERSION


def commits_to_signed_transcript(manifest: tuple[tuple[str, str], ...]) -> bool:
    """Whether a signed announce's manifest commits to a signed transcript (version 4, or a later one)."""
    return committed_transcript(manifest) >= SIGNED_VERSION


def takes_part_under(manifest: tuple[tuple[str, str], ...]) -> bool:
    """Whether a subject takes part in a round under this manifest: it commits to what `TRANSCRIPT_COMMITMENT`
    does (SPEC §4 announce)."""
    return committed_transcript(manifest) >= int(TRANSCRIPT_COMMITMENT[1])

#: The fields of a SafePub round (absent from an MDAV round's manifest).
GROUPING_FIELDS = frozenset({"grouping", "safepub_bins", "safepub_beta", "safepub_epsilon", "safepub_delta"})


@dataclass(frozen=True)
class RoundConfig:
    """Parameters of one protocol round (everything in it is published in the manifest)."""

    #: Quasi-identifier attribute names (microaggregated; the collector sees them).
    qi: tuple[str, ...]
    #: Confidential attribute names (shared only through the group shuffle).
    confidential: tuple[str, ...]
    #: Minimum group size (k-anonymity of the release).
    k: int = 5
    #: Seconds after the announce during which registrations are accepted.
    register_window: float = 30.0
    #: Seconds a group may take for one step of its shuffle before silent members are excluded.
    step_timeout: float = 20.0
    #: First re-send interval for unacknowledged messages (doubles up to 8x).
    retry_interval: float = 2.0
    #: Seconds after the release during which verdicts are collected.
    audit_window: float = 60.0
    #: The collector's promise: every subject's permutation distance is at least this.
    min_permutation_distance: int = 0
    #: Random records a subject draws to judge whether her match is plausible as a random one.
    random_records: int = 1000
    #: Significance level of that plausibility test.
    alpha: float = 0.05
    #: Largest accepted encoded message (the release is the largest).
    max_message_bytes: int = MAX_MESSAGE_BYTES
    #: Close registration as soon as this many subjects registered (0: wait for the whole window).
    expected_subjects: int = 0
    #: How groups are formed: "mdav" (microaggregation, the default) or "safepub" (the classes of the
    #: fixed bins ``safepub_bins``, each subject taking part with probability ``safepub_beta``, classes
    #: below k suppressed: (k, beta)-SDGS, labelled (epsilon, delta)-DP when every condition holds).
    grouping: str = "mdav"
    #: SafePub only: bin edges per QI, fixed before registration ({qi: [e0, e1, ...]}, or its JSON text).
    safepub_bins: Scheme = ()
    #: SafePub only: each subject's probability of taking part, drawn on her own device.
    safepub_beta: float = 1.0
    #: SafePub only: the (epsilon, delta) the round claims (checked against k and beta).
    safepub_epsilon: float = 0.0
    safepub_delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "qi", tuple(self.qi))
        object.__setattr__(self, "confidential", tuple(self.confidential))
        names = self.qi + self.confidential
        if not self.qi:
            raise InputError("round config: at least one QI attribute is required (qi)")
        if not self.confidential:
            raise InputError("round config: at least one confidential attribute is required (confidential)")
        if len(names) > MAX_ATTRIBUTES:
            raise InputError(f"round config: at most {MAX_ATTRIBUTES} attributes in all")
        if len(set(names)) != len(names):
            raise InputError("round config: an attribute is listed twice (qi, confidential disjoint)")
        for name in names:
            if not isinstance(name, str) or not name or len(name) > 64 or not name.isprintable():
                raise InputError(f"round config: bad attribute name {name!r}")
        if not isinstance(self.k, int) or isinstance(self.k, bool) or not 1 <= self.k <= MAX_K:
            raise InputError(f"round config: k must be an integer in [1, {MAX_K}], got {self.k!r}")
        for name in ("register_window", "step_timeout", "retry_interval", "audit_window"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value <= 0:
                raise InputError(f"round config: {name} must be a positive number of seconds, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.retry_interval > self.step_timeout:
            raise InputError("round config: retry_interval must not exceed step_timeout")
        if not isinstance(self.min_permutation_distance, int) or self.min_permutation_distance < 0:
            raise InputError("round config: min_permutation_distance must be a non-negative integer")
        if not isinstance(self.random_records, int) or not 0 <= self.random_records <= MAX_RANDOM_RECORDS:
            raise InputError("round config: random_records must be an integer in [0, 10^7]")
        if not isinstance(self.alpha, (int, float)) or not 0.0 < float(self.alpha) < 1.0:
            raise InputError("round config: alpha must be in (0, 1)")
        object.__setattr__(self, "alpha", float(self.alpha))
        if not isinstance(self.expected_subjects, int) or self.expected_subjects < 0:
            raise InputError("round config: expected_subjects must be a non-negative integer")
        if not isinstance(self.max_message_bytes, int) or not 2**16 <= self.max_message_bytes <= 2**30:
            raise InputError("round config: max_message_bytes must be in [65536, 2^30]")
        self._check_grouping()
        self._check_message_room()

    def _check_message_room(self) -> None:
        """A group has up to 2k - 1 members (MDAV's, or a SafePub class cut by `safepub_groups`), and its shuffle's
        largest message grows with the square of that (`largest_run_message`): a k whose groups' blames exceed the
        limit, the collector's or the one every subject applies (SPEC §7.1), would have honest blames refused
        `oversized`."""
        limit = run_message_limit(self.max_message_bytes)
        members = 2 * self.k - 1
        needed = largest_run_message(members, len(self.confidential))
        if needed > limit:
            most = (largest_group(len(self.confidential), limit) + 1) // 2
            # At or above the subjects' limit, raising max_message_bytes cannot help: say whose limit it is.
            whose = "max_message_bytes" if self.max_message_bytes < MAX_MESSAGE_BYTES else \
                "the limit every subject applies"
            raise InputError(f"round config: k = {self.k} lets a group reach {members} members, whose shuffle "
                             f"messages reach {needed:,} bytes, above {whose} ({limit:,} bytes): k must be at most "
                             f"{most} (SPEC §7.1)")

    def _check_grouping(self) -> None:
        if self.grouping not in GROUPINGS:
            raise InputError(f"round config: grouping must be one of {', '.join(GROUPINGS)}, got {self.grouping!r}")
        if self.grouping == "mdav":
            if self.safepub_bins or self.safepub_beta != 1.0 or self.safepub_epsilon or self.safepub_delta:
                raise InputError("round config: safepub_* keys need grouping = \"safepub\"")
            return
        object.__setattr__(self, "safepub_bins", parse_scheme(self.safepub_bins, self.qi, "round config: safepub_bins"))
        beta, epsilon, delta = self.safepub_beta, self.safepub_epsilon, self.safepub_delta
        for name, value in (("safepub_beta", beta), ("safepub_epsilon", epsilon), ("safepub_delta", delta)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise InputError(f"round config: {name} must be a number")
        if not 0.0 < beta <= 1.0:
            raise InputError("round config: safepub_beta must be in (0, 1]")
        if epsilon < 0 or not 0.0 <= delta < 1.0:
            raise InputError("round config: safepub_epsilon must be >= 0 and safepub_delta in [0, 1)")
        object.__setattr__(self, "safepub_beta", float(beta))
        object.__setattr__(self, "safepub_epsilon", float(epsilon))
        object.__setattr__(self, "safepub_delta", float(delta))

    @property
    def accepted_message_bytes(self) -> int:
        """The largest message the collector decodes: its ``max_message_bytes``, and never less than the largest
        blame of a merged run (`largest_run_members`, bounded by the 64 MiB every subject applies, SPEC §4, §7.1).
        A merge may make a run larger than the config's 2k - 1 members; a collector refusing that run's blames
        `oversized` could not convict its deviators, and the blamers would wait out the deadline."""
        merged = largest_run_message(largest_run_members(self.confidential), len(self.confidential))
        return max(self.max_message_bytes, min(merged, MAX_MESSAGE_BYTES))

    @property
    def columns(self) -> tuple[str, ...]:
        """Release columns: QIs then confidential attributes."""
        return self.qi + self.confidential

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RoundConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(
                f"round config: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}"
            )
        for key in ("qi", "confidential"):
            if key not in data:
                raise InputError(f"round config: missing required key {key!r}")
            value = data[key]
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, (list, tuple)):
                raise InputError(f"round config: {key} must be a list of attribute names")
        args = dict(data)
        for key in ("qi", "confidential"):
            value = args[key]
            args[key] = tuple(v.strip() for v in value.split(",")) if isinstance(value, str) else tuple(value)
        try:
            return cls(**args)
        except TypeError as exc:
            raise InputError(f"round config: {exc}") from None

    @classmethod
    def from_toml(cls, path: str | Path) -> RoundConfig:
        doc = read_toml(path)
        table = doc.get("round")
        if not isinstance(table, dict):
            raise InputError(f"{path}: a [round] table is required")
        try:
            return cls.from_mapping(table)
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from None

    def manifest(self) -> tuple[tuple[str, str], ...]:
        """The transparency manifest entries (Definition 4 of paper 002: all parameters, no seeds).

        The grouping keys appear only for a SafePub round: an MDAV round's manifest (and so its signed
        announce) is the same as before they existed."""
        entries = [("method", self.grouping), ("protocol", "coutil/v2"), TRANSCRIPT_COMMITMENT]
        for f in fields(self):
            if f.name in GROUPING_FIELDS and self.grouping == "mdav":
                continue
            value = getattr(self, f.name)
            if f.name == "safepub_bins":
                text = scheme_text(value)
            else:
                text = ",".join(value) if isinstance(value, tuple) else repr(value)
            entries.append((f.name, text))
        return tuple(entries)
