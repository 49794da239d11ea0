"""The auditor's grouping check (`coutil.round.verify`): the groups recomputed on the registrations
(MDAV, or the announced SafePub bins' classes), and every departure from them explained as a merge of
SPEC §4 ("Timeouts and dropouts").

A group that loses members below k before its reveal_open merges with the nearest other group whose
records are still sealed, by squared Euclidean distance between QI centroids (ties by the lower group
number); the centroid of a group that changed (lost or gained members) is the mean of its members'
QIs, of an untouched group MDAV's. `check_grouping` holds every merge the assigns show to the rule
stated in its docstring.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from coutil.errors import InputError
from coutil.protocol.collector_release import safepub_cut_order
from coutil.protocol.messages import Assign, ShuffleStart
from coutil.protocol.shuffle import largest_run_members
from coutil.protocol.topics import sid_of
from coutil.round.verify_roster import Check, VerifiedRound, need
from coutil.sdc.generalization import parse_scheme, safepub_groups
from coutil.sdc.mdav import mdav


def _same_time(a: float, b: float) -> bool:
    """Two issue times of one step of the collector (a closing shuffle_start and the target's new run):
    they differ by the rounding of deadline - step_timeout only."""
    return abs(a - b) <= 1e-6 + 1e-12 * abs(b)


@dataclass
class _Grouping:
    """MDAV's groups on the roster, and what the collector did with them."""

    keys: list[bytes]
    matrix: np.ndarray
    expected: dict[int, list[bytes]]
    centres: np.ndarray
    #: Per group, the members whose records its release must hold (`VerifiedRound.record_holders`).
    sure: Mapping[int, set[bytes]]
    assigned: dict[bytes, Assign]
    #: Per group, the members whose records its release may hold (`VerifiedRound.record_holders`).
    maybe: Mapping[int, set[bytes]]
    #: The signed runs of each group, in run order.
    runs_of: dict[int, list[ShuffleStart]]
    #: The most members a merged run may have (`largest_run_members` of the announced confidential attributes).
    max_members: int
    untouched: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.index = {key: i for i, key in enumerate(self.keys)}

    def mean(self, members: Sequence[bytes] | set[bytes]) -> np.ndarray:
        """The collector's centroid of a changed group: the mean of its members' QIs in roster order."""
        return np.asarray(self.matrix[sorted(self.index[m] for m in members)].mean(axis=0), dtype=np.float64)

    def centroid(self, label: int, members: set[bytes]) -> np.ndarray:
        """A group's centroid while it had ``members``: MDAV's if they are MDAV's, else their mean."""
        if members == set(self.expected.get(label, ())):
            return np.asarray(self.centres[label], dtype=np.float64)
        return self.mean(members)


def _untouched(g: _Grouping, k: int, r: VerifiedRound) -> list[int]:
    """Groups certainly sealed, with MDAV's centroid, at every merge: each of their MDAV members is
    assigned to them and holds a released record, and each member was told exactly MDAV's member list.
    Such a group never lost a member nor took one in (so it was never dissolved), and no group is
    opened before every merge is done (the reveal barrier, SPEC §4 share.7). A member whose record the
    release may hold (`blamed_unsolicited` without the shuffle_starts) counts as holding one when her
    group's release holds as many records as MDAV's members."""
    out = []
    released = dict(zip(r.release.group_ids, r.release.group_sizes, strict=False)) if r.release is not None else {}
    for label, members in g.expected.items():
        holders = g.sure.get(label, set())
        if released.get(label) == len(members):
            holders = holders | g.maybe.get(label, set())
        if len(members) < k or holders != set(members):
            continue
        if all(key in g.assigned and g.assigned[key].group == label and g.assigned[key].members == tuple(members)
               for key in members):
            out.append(label)
    return out


def _nearest(g: _Grouping, check: Check, source: int, target: int, movers: set[bytes], target_before: set[bytes],
             candidates: Sequence[tuple[int, list[tuple[np.ndarray, int]]]]) -> None:
    """`_merge_problem`, failed."""
    problem = _merge_problem(g, source, target, movers, target_before, candidates)
    if problem is not None:
        check.fail(problem)


def _merge_problem(g: _Grouping, source: int, target: int, movers: set[bytes], target_before: set[bytes],
                   candidates: Sequence[tuple[int, list[tuple[np.ndarray, int]]]]) -> str | None:
    """No group in ``candidates`` (label, its possible centroids and sizes at the merge: groups certainly sealed
    then) is nearer to the movers' mean than the target (its centroid while it had ``target_before``), nor as near
    with a lower number, whichever of its possible centroids it had, unless it was too large to take the movers
    (`largest_run_members`; neither may the target be)."""
    if not target_before:
        return f"group {source}'s members moved to group {target}, which had no members left"
    unknown = sorted((movers | target_before) - g.index.keys())
    if unknown:
        return (f"group {source}'s merge into group {target} names {', '.join(sid_of(key) for key in unknown)}, "
                "not on the roster")
    if len(movers) + len(target_before) > g.max_members:
        return (f"group {source}'s {len(movers)} members merged into group {target} of {len(target_before)}: "
                f"above the {g.max_members} members whose run's messages fit what every subject accepts")
    here = g.mean(movers)
    distance = float(np.sum((g.centroid(target, target_before) - here) ** 2))
    for other, possible in candidates:
        if other in (source, target):
            continue
        # A group the movers would have made too large was no candidate (SPEC §4): excused if any state it may have
        # had at the merge was too large, as if any was farther (the order of one step's changes is not signed).
        ds = [_nearer(g, here, len(movers), distance, target, other, centre, size) for centre, size in possible]
        if ds and all(d is not None for d in ds):
            return (f"group {source}'s remaining members merged into group {target} (squared distance "
                    f"{distance:.6g}), group {other}, still sealed, is nearer ({max(d or 0.0 for d in ds):.6g}): "
                    "not the nearest group")
    return None


def _nearer(g: _Grouping, here: np.ndarray, movers: int, distance: float, target: int, other: int,
            centre: np.ndarray, size: int) -> float | None:
    """The squared distance from the movers' mean ``here`` to group ``other`` in one state it may have had at the
    merge (``centre``, ``size``) if it would have taken them before ``target`` at ``distance`` (SPEC §4: fits, and
    nearer or as near with a lower number), else None."""
    if size + movers > g.max_members:
        return None
    d = float(np.sum((centre - here) ** 2))
    return d if d < distance or (d == distance and other < target) else None


def _untouched_centres(g: _Grouping) -> list[tuple[int, list[tuple[np.ndarray, int]]]]:
    return [(label, [(np.asarray(g.centres[label], dtype=np.float64), len(g.expected[label]))])
            for label in g.untouched]


def _sealed_at(g: _Grouping, r: VerifiedRound, t: float) -> list[tuple[int, list[tuple[np.ndarray, int]]]]:
    """The groups certainly sealed when a merge was issued at ``t``, with their possible centroids then (found by
    an attacker: comparing only the groups untouched for the whole round let a collector merge a victim past
    nearer groups that lost a member after the merge, into a group of its colluders): every group whose latest
    signed run issued before ``t`` has members (no group is opened before every merge, SPEC §4 share.7), at those
    members' centroid, and the groups untouched throughout. The order of one step's changes is not signed: a
    group with a run issued at the very time of the merge is compared under its members before and after it,
    and not at all if that run closes it (a reviewer moved later changes to the merge's time)."""
    out = dict(_untouched_centres(g))
    for label, runs in g.runs_of.items():
        if label in out or label not in g.expected:
            continue
        before = [s for s in runs if r.issued(s) < t and not _same_time(r.issued(s), t)]
        at = [s for s in runs if _same_time(r.issued(s), t)]
        if not before or not before[-1].members or (at and not at[-1].members) \
                or any(key not in g.index for s in (before[-1], *at[-1:]) for key in s.members):
            continue  # (a key not on the roster is a failure of its own: `_nearest`, exclusion_evidence)
        out[label] = [(g.centroid(label, set(s.members)), len(s.members)) for s in (before[-1], *at[-1:])]
    return sorted(out.items())


#: The work (`_Orders.cost` units: one per merge a `_blocker` call looks at) the auditor grants, over the whole
#: transcript, to searching the merges of an instant for an order other than the listed one (`_longest_order`). An
#: honest collector lists its shuffle_starts in the order it issued them, which is the order it decided its merges in
#: (`_exclude`: each merge's closing shuffle_start, then the target's run, before the next group's timeout), so the
#: listed order fits and is checked in one pass; only a transcript listing them otherwise is searched (up to 2^n sets
#: of n merges depending on one another). A per-instant allowance let a collector craft hundreds of instants of ~13
#: such merges, about 1.9 s of verify each, and beyond it each merge was compared under any state the others may have
#: left, a weaker check (found by the attackers of b410e13 and b208db8): now the search beyond this work fails,
#: naming the instant. The whole of it is about a second of verify (measured on 6 sets of 15 such merges, the
#: crafted round of tests/verify/test_verify_merge_budget.py: 86 s before, 2 s in all).
_SEARCH_WORK = 1 << 20


@dataclass
class _SearchBudget:
    """What is left of `_SEARCH_WORK` for the transcript being verified."""

    left: int = field(default_factory=lambda: _SEARCH_WORK)

    def spend(self, units: int) -> bool:
        """Take ``units`` of the work; False (nothing taken) when fewer are left."""
        if units > self.left:
            return False
        self.left -= units
        return True


def _states_at(g: _Grouping, r: VerifiedRound, label: int,
               times: Sequence[float]) -> list[tuple[int, tuple[np.ndarray, int] | None]]:
    """Group ``label``'s states around one instant (``times``, its merges' times of issue), in the order they were
    signed: (run, its centroid and size, or None when it was not certainly sealed then: closed, with a key not on the
    roster, or with no run before), its latest run before the instant first (run -1 if none), then each run issued
    at it."""
    runs = g.runs_of.get(label, [])
    at = [s for s in runs if any(_same_time(r.issued(s), t) for t in times)]
    before = [s for s in runs if r.issued(s) < min(times) and s not in at]
    out: list[tuple[int, tuple[np.ndarray, int] | None]] = [] if before else [(-1, None)]
    for s in before[-1:] + at:
        sealed = label in g.expected and bool(s.members) and all(key in g.index for key in s.members)
        out.append((s.run, (g.centroid(label, set(s.members)), len(s.members)) if sealed else None))
    return out


@dataclass
class _Orders:
    """The merges of one instant as `_blocker` orders them. ``where[i]``: the index among each changed group's states
    of merge i's run there; ``near[i]``: per other changed group that would have taken i's movers first in some state,
    per state, its squared distance if it would have, else None."""

    where: list[dict[int, int]]
    near: list[dict[int, list[float | None]]]

    def __post_init__(self) -> None:
        #: Per changed group, the merges with a run in it: all in one part of the instant (`_check_instant` joins a
        #: merge with every merge changing a group its own changes or that may have been nearer).
        self.touching: dict[int, list[int]] = defaultdict(list)
        for j, runs in enumerate(self.where):
            for label in runs:
                self.touching[label].append(j)
        #: What one `_blocker` call on merge i costs: the merges it looks at (`_SEARCH_WORK`).
        self.cost = [1 + sum(len(self.touching[label]) for label in (*self.where[i], *self.near[i]))
                     for i in range(len(self.where))]


def _blocker(o: _Orders, i: int, placed: set[int] | frozenset[int]) -> tuple[bool, tuple[int, float] | None]:
    """Could merge ``i`` come right after the merges ``placed`` (of its part of the instant, the others after it) and
    go to its nearest group? (False, None) if the signed runs put it elsewhere; (False, (group, distance)) if that
    group, in every state this order leaves it, would have taken the movers first."""
    for label, p in o.where[i].items():
        if any(j != i and (o.where[j][label] < p) != (j in placed) for j in o.touching[label]):
            return False, None
    for label, ds in o.near[i].items():
        lo = max((o.where[j][label] for j in o.touching[label] if j in placed), default=0)
        hi = min((o.where[j][label] for j in o.touching[label] if j not in placed), default=len(ds)) - 1
        span = ds[lo:hi + 1]
        if span and all(d is not None for d in span):
            return False, (label, max(d or 0.0 for d in span))
    return True, None


def _check_instant(g: _Grouping, r: VerifiedRound, check: Check, hops: list[_Hop], budget: _SearchBudget) -> bool:
    """Rule (b) for the merges issued at one instant (one step of the collector: no message orders them): some order
    of them in which each went to its nearest group, the groups they change in the states the merges before it in
    that order left (found by a reviewer of the size rule: each merge compared under any state of the other's groups
    let a collector swap two merges of a step, each excused by a state only the other order has). The order the
    transcript lists them in first (an honest collector's, `_SEARCH_WORK`), then a search within ``budget``; beyond
    it, a failure. Returns whether an order other than the listed one was needed and found."""
    times = [hop.t for hop in hops]
    changed = {label for hop in hops for label in (hop.source, hop.target)}
    # The groups no merge of the instant changes: in the states `_sealed_at` gives, whatever the order.
    fixed = [(label, possible) for label, possible in _sealed_at(g, r, hops[0].t) if label not in changed]
    states = {label: _states_at(g, r, label, times) for label in changed}
    live: list[_Hop] = []
    for hop in hops:
        problem = _merge_problem(g, hop.source, hop.target, hop.movers, hop.before, fixed)
        if problem is not None:
            check.fail(problem)  # in every order
        else:
            live.append(hop)
    where = [{label: [run for run, _ in states[label]].index(run)
              for label, run in ((hop.source, hop.closing), (hop.target, hop.opening))} for hop in live]
    near: list[dict[int, list[float | None]]] = []
    distance: list[float] = []
    for hop in live:
        here = g.mean(hop.movers)
        distance.append(float(np.sum((g.centroid(hop.target, hop.before) - here) ** 2)))
        ds = {label: [None if state is None else
                      _nearer(g, here, len(hop.movers), distance[-1], hop.target, label, *state)
                      for _, state in states[label]]
              for label in changed if label not in (hop.source, hop.target)}
        near.append({label: d for label, d in ds.items() if any(x is not None for x in d)})
    o = _Orders(where, near)
    # Merges that change no group another depends on are ordered apart (union-find over the dependencies: one
    # group changed by both, or changed by one and in some state nearer for the other's movers).
    parent = list(range(len(live)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(live)):
        for label in (*where[i], *near[i]):
            for j in o.touching[label]:
                parent[root(i)] = root(j)
    parts: dict[int, list[int]] = defaultdict(list)
    for i in range(len(live)):
        parts[root(i)].append(i)
    reordered = False
    for merges in parts.values():
        listed = sorted(merges, key=lambda i: live[i].listed)
        misfit = _misfit(o, listed)
        if misfit is None:
            continue
        placed, searched = _longest_order(o, merges, budget)
        if len(placed) == len(merges):
            reordered = True
            continue
        if not searched:
            i, blocker = misfit
            why = (f"group {blocker[0]}, still sealed, is nearer ({blocker[1]:.6g})" if blocker is not None
                   else "the signed runs put it elsewhere")
            check.fail(f"the {len(merges)} merges issued at {hops[0].t:.3f} into and out of groups "
                       f"{sorted({label for j in merges for label in where[j]})}: in the order the transcript lists "
                       f"them, group {live[i].source}'s merge into group {live[i].target} cannot come next ({why}), "
                       f"and another order needs more search than the {_SEARCH_WORK} units the auditor grants a "
                       "transcript")
            continue
        for i in merges:
            if i not in placed:
                blocker = _blocker(o, i, placed)[1]
                if blocker is not None:
                    check.fail(_not_nearest(live[i], distance[i], blocker, len(merges), len(placed)))
                    break
        else:
            check.fail(f"the {len(merges)} merges issued at {hops[0].t:.3f} into and out of groups "
                       f"{sorted({label for i in merges for label in where[i]})}: no order fits their signed runs")
    return reordered


def _misfit(o: _Orders, order: Sequence[int]) -> tuple[int, tuple[int, float] | None] | None:
    """The first merge of ``order`` that cannot come next, with what blocks it (`_blocker`); None: the order fits."""
    placed: set[int] = set()
    for i in order:
        fits, blocker = _blocker(o, i, placed)
        if not fits:
            return i, blocker
        placed.add(i)
    return None


def _longest_order(o: _Orders, merges: Sequence[int], budget: _SearchBudget) -> tuple[frozenset[int], bool]:
    """The merges that can come first, each to its nearest group, in a largest such set (all: an order exists), and
    whether the search was complete (False: ``budget`` ran out first)."""
    seen: set[frozenset[int]] = {frozenset()}
    frontier = [frozenset[int]()]
    best = frozenset[int]()
    while frontier:
        placed = frontier.pop()
        if len(placed) > len(best):
            best = placed
            if len(best) == len(merges):
                break
        for i in merges:
            if i in placed:
                continue
            if not budget.spend(o.cost[i]):
                return best, False
            if _blocker(o, i, placed)[0]:
                following = placed | {i}
                if following not in seen:
                    seen.add(following)
                    frontier.append(following)
    return best, True


def _not_nearest(hop: _Hop, distance: float, blocker: tuple[int, float], merges: int, before: int = 0) -> str:
    other, d = blocker
    among = (f" once the {before} merge(s) of the {merges} issued then that can come first are done (no order of them "
             "takes each to its nearest group)" if merges > 1 else "")
    return (f"group {hop.source}'s remaining members merged into group {hop.target} (squared distance {distance:.6g}) "
            f"at {hop.t:.3f}, group {other}, still sealed, is nearer ({d:.6g}){among}: not the nearest group")


def _no_partner(g: _Grouping, r: VerifiedRound, check: Check) -> None:
    """A group dissolved `below_k_no_partner` had no group to merge into (SPEC §4): none certainly sealed when its
    closing shuffle_start was issued (`_sealed_at`, as for a merge) would have taken its members in every state it
    may have had then (found by the reviewer of the size rule: the claim was never checked, and a collector could
    exclude the members of a group fallen below k in place of merging them). Groups dissolved so at one instant (one
    step, whose order is not signed) need an order in which none would have fitted into one dissolved after it, still
    sealed then (found by an attacker of `_no_partner`: the last two groups, fallen below k at one `now`, each
    dissolved `below_k_no_partner` beside the other, which `_sealed_at` leaves out as closed at that time; an honest
    collector merges the first into the second)."""
    closings: list[tuple[float, int, int, int | None]] = []  # (time, group, members left, its sealed size before)
    for (label, run), s in sorted(r.runs().items()):
        left = {key for key, reason in s.excluded if reason == "below_k_no_partner"}
        if s.members or not left or label not in g.expected:
            continue
        t = r.issued(s)
        before = [p for p in g.runs_of.get(label, []) if p.run < run and p.members]
        sealed = bool(before) and before[-1].run == run - 1 and all(key in g.index for key in before[-1].members)
        closings.append((t, label, len(left), len(before[-1].members) if sealed else None))
        for other, possible in _sealed_at(g, r, t):
            if other != label and possible and all(size + len(left) <= g.max_members for _, size in possible):
                check.fail(f"group {label} run {run} excludes {len(left)} members `below_k_no_partner` at {t:.3f}, "
                           f"and group {other}, still sealed, would have taken them: a group fallen below k merges "
                           "while one fits")
                break
    closings.sort()
    while closings:
        instant = [c for c in closings if _same_time(c[0], closings[0][0])]
        closings = closings[len(instant):]
        pending = list(instant)
        while pending:
            # One that would fit into none of the others still sealed can come first; none: every order fails.
            first = next((c for c in pending if not any(
                other is not c and other[3] is not None and other[3] + c[2] <= g.max_members for other in pending)),
                None)
            if first is None:
                check.fail(f"groups {sorted(c[1] for c in pending)} all exclude their members `below_k_no_partner` at "
                           f"{pending[0][0]:.3f}: whichever dissolved first, another was still sealed and would have "
                           "taken its members")
                break
            pending.remove(first)


def _suppressed_before_merges(r: VerifiedRound, check: Check, merges: Sequence[tuple[int, float]]) -> None:
    """Suppressions follow the reveal barrier, after every merge (SPEC §4 share.7): a group suppressed at or
    before a merge's time is a record out of order (a reviewer dated later suppressions to a merge's time, to
    take the nearer groups out of its comparison)."""
    if not merges:
        return
    last_group, last = max(merges, key=lambda m: m[1])
    for (group, run), s in sorted(r.runs().items()):
        when = r.issued(s)
        if not s.members and any(reason == "suppressed" for _, reason in s.excluded) \
                and (when < last or _same_time(when, last)):
            check.fail(f"group {group} run {run} suppresses its members at {when:.3f}, not after the merge of group "
                       f"{last_group} at {last:.3f}: suppressions come after the reveal barrier, after every merge")


@dataclass
class _Hop:
    """A merge the signed shuffle_starts state."""

    source: int
    target: int
    movers: set[bytes]
    #: The target's members before the merge.
    before: set[bytes]
    #: When it was issued.
    t: float
    #: The source's closing run and the target's run started with the movers.
    closing: int
    opening: int
    #: Where the transcript lists the closing shuffle_start (its first copy): the order of the merges an honest
    #: collector issued at one instant (`_SEARCH_WORK`).
    listed: int


def _merge_hops(g: _Grouping, r: VerifiedRound, check: Check) -> list[_Hop]:
    """Every merge the signed shuffle_starts state, from each closing shuffle_start naming members `merged` and the
    target's run started with them at once."""
    runs = r.runs()
    listed: dict[tuple[int, int], int] = {}
    for n, s in enumerate(r.shuffle_starts):
        listed.setdefault((s.group, s.run), n)
    hops: list[_Hop] = []
    # The runs with members by time of issue, to find the ones started with a closing shuffle_start.
    started_at = sorted((r.issued(s), s.group, s.run) for s in runs.values() if s.members)
    times = [t for t, _, _ in started_at]
    for (group, run), s in sorted(runs.items()):
        movers = {key for key, reason in s.excluded if reason == "merged"}
        if s.members or not movers or group not in g.expected:
            continue  # a group MDAV never formed: `exclusion_evidence` names it
        t = r.issued(s)
        window = started_at[bisect_left(times, t - 1.0):bisect_right(times, t + 1.0)]
        started = [other for other in (runs[(gr, rn)] for _, gr, rn in window) if other.group != group
                   and movers <= set(other.members) and _same_time(r.issued(other), t)]
        if len({other.group for other in started}) == 1:
            # Two merges of one step into one group: its runs then follow one another (each the one before plus
            # its movers, `exclusion_evidence`), and the first holding these movers is their merge's (found by a
            # reviewer: an honest collector failed, both runs holding the first merge's movers).
            started = [min(started, key=lambda other: other.run)]
        if len(started) != 1:
            check.fail(f"group {group} run {run} states members merged into another group, and "
                       f"{'no' if not started else len(started)} run(s) of another group started with them then")
            continue
        [best] = started
        hops.append(_Hop(group, best.group, movers, set(best.members) - movers, t, run, best.run, listed[(group, run)]))
    return hops


def _check_merge_source(g: _Grouping, r: VerifiedRound, check: Check, label: int, members: list[bytes],
                        moved: list[bytes]) -> bool:
    """Rule (a) of `check_grouping` for the MDAV group ``label`` whose members ``moved`` left it."""
    assigned = g.assigned
    excluded = r.transcript.exclusions
    live = g.sure.get(label, set())
    # Where every mover went: members excluded since may have been left behind by a later merge, but a
    # mover whose record the release must hold (a blame after the reveal_open exempts her from a statement)
    # is where her assign says: a victim split off from her fellow movers to a group of the collector's choosing.
    holders = set().union(*g.sure.values()) if g.sure else set()
    targets = {assigned[key].group for key in moved if key in holders or sid_of(key) not in excluded}
    stayed = [key for key in members if assigned[key].group == label]
    ok = True
    if len(targets) > 1:
        check.fail(f"group {label} split over groups {sorted(targets)}")
        ok = False
    if len(moved) >= r.k:
        check.fail(f"group {label}: {len(moved)} members moved to another group, at least k = {r.k}: a group that "
                   "did not fall below k never merges")
        ok = False
    if any(key in live for key in stayed):
        check.fail(f"group {label}: {len(moved)} members moved to group {min(targets or {label})}, "
                   f"{sum(key in live for key in stayed)} stayed")
        ok = False
    if r.transcript.shuffle_starts_included:
        runs = g.runs_of.get(label, [])
        stated = {key for s in runs for key, reason in s.excluded if reason != "merged"}
        for key in stayed:
            if key not in stated and key not in live:
                check.fail(f"group {label}: {sid_of(key)} neither moved nor excluded by a signed shuffle_start of "
                           "the group (a merge needs the group to have lost her)")
                ok = False
        closing = [s for s in runs if not s.members]
        named = {key for s in closing for key, reason in s.excluded if reason == "merged"}
        if set(moved) - named:
            check.fail(f"group {label}: {len(set(moved) - named)} members moved to another group without its closing "
                       "shuffle_start naming them `merged`")
            ok = False
    return ok


def check_grouping(r: VerifiedRound, check: Check) -> None:
    """The groups recomputed on the registrations (MDAV, or the announced SafePub bins' classes), merges
    explained. A group whose members' assigns name other groups is a merge, valid only if:

    (a) its members that did not move are all excluded (none of them holds a released record) and, with
        the shuffle_starts, each is named in a signed shuffle_start of the group, and the group's closing
        shuffle_start (no members) names every member who moved `merged`; fewer than k moved; all moved
        to one group (the live ones), one MDAV formed; SafePub never merges;
    (b) the target was the nearest group: the distance is the squared Euclidean one between the movers'
        mean QIs (the centroid of the group they left, which has lost members) and the target's centroid
        at the merge (MDAV's if it had MDAV's members then, else their mean). With the shuffle_starts each
        merge is read from its closing shuffle_start and the target's run started with the movers at the
        same time (the target's members then: that run's minus the movers); without them, only a single
        merge into a target that did not itself move on is checked, with the target's members then read
        from the movers' assign. No group certainly sealed at the merge with a known centroid may be
        nearer, nor as near with a lower number: the groups that kept MDAV's members throughout (every
        member assigned there, told MDAV's list, holding a released record: never dissolved, and opened
        only after the reveal barrier, after every merge); with the shuffle_starts also the groups whose
        signed runs show them sealed at the merge (`_sealed_at`), and the merges issued at one instant
        must have one order in which each goes to its nearest group (`_check_instant`). Groups that
        changed otherwise are not compared (their centroid at the merge depends on when each change
        happened). With the shuffle_starts, a group whose members are excluded `below_k_no_partner` had no
        group sealed then that would have taken them (`_no_partner`).
    (c) (in `verify`'s release check) every group whose members differ from MDAV's is released with the
        mean of its final members' QIs.
    """
    if not need(r, check, roster=True):
        return
    if not r.transcript.registrations_included:
        check.skip("needs the registrations (export or run with --with-registrations)")
        return
    assert r.roster is not None and r.announce is not None
    params = r.announce.params
    qi_of = r.qi_of()
    keys = sorted(qi_of)
    if len(keys) != r.roster.n or not keys:
        check.skip("the registrations are not the roster (see inclusion)")
        return
    width = len(params.qi_names)
    if any(len(qi) != width for qi in qi_of.values()):
        check.skip(f"registrations without exactly {width} QI values (see inclusion)")
        return
    matrix = np.array([qi_of[key] for key in keys], dtype=np.float64)
    excluded = r.transcript.exclusions
    assigned = {a.subject: a for a in r.assigns}
    try:
        if params.method == "safepub":
            scheme = parse_scheme(dict(params.manifest).get("safepub_bins", ""), params.qi_names)
            classes = safepub_groups(matrix, scheme, params.k, safepub_cut_order(keys, r.roster.merkle_root))
            labels, centres, n_groups = classes.labels, classes.midpoints, int(classes.midpoints.shape[0])
        elif params.method == "mdav":
            grouping = mdav(matrix, params.k)
            labels, centres, n_groups = grouping.groups, np.asarray(grouping.centroids, dtype=np.float64), \
                grouping.n_groups
        else:
            check.skip(f"unknown grouping method {params.method!r} (see parameters)")
            return
    except (InputError, ValueError) as exc:
        check.fail(f"{params.method} cannot group the roster with the announced parameters (k = {params.k}): {exc}")
        return
    if r.roster.n_groups != n_groups:
        check.fail(f"the roster announces {r.roster.n_groups} groups, {params.method} forms {n_groups}")
    expected: dict[int, list[bytes]] = defaultdict(list)
    for key, label in zip(keys, labels.tolist(), strict=True):
        expected[int(label)].append(key)
    r.formed = {label: tuple(members) for label, members in expected.items()}
    r.formed_centroids = {label: tuple(float(v) for v in centres[label]) for label in expected}
    runs_of: dict[int, list[ShuffleStart]] = defaultdict(list)
    for (label, _run), s in sorted(r.runs().items()):
        runs_of[label].append(s)
    sure, maybe = r.record_holders()
    g = _Grouping(keys, matrix, expected, centres, sure, assigned, maybe, runs_of,
                  largest_run_members(params.confidential_names))
    g.untouched = _untouched(g, params.k, r)
    merged: list[int] = []
    for label, members in sorted(expected.items()):
        if len(members) < params.k:
            # SafePub: a class below k gets no assign; its members are excluded `suppressed_class`.
            for key in members:
                if key in assigned:
                    check.fail(f"class {label} has {len(members)} members, below k, yet {sid_of(key)} was assigned")
                elif excluded.get(sid_of(key)) != "suppressed_class":
                    check.fail(f"{sid_of(key)} of class {label} (below k) is not excluded `suppressed_class`")
            continue
        if any(key not in assigned for key in members):
            check.fail(f"group {label}: {sum(key not in assigned for key in members)} of its members got no assign")
            continue
        moved = [key for key in members if assigned[key].group != label]
        if not moved:
            first = assigned[members[0]]
            want = r.formed_centroids[label]
            if first.members == tuple(members) and first.centroid != want:
                check.fail(f"group {label}: assigned centroid {first.centroid}, {params.method} gives {want}")
            continue
        if params.method != "mdav":
            check.fail(f"class {label} merged into another: SafePub never merges")
            continue
        if any(assigned[key].group not in expected for key in moved):
            check.fail(f"group {label} moved to a group {params.method} never formed")
            continue
        if _check_merge_source(g, r, check, label, members, moved):
            merged.append(label)
    _check_targets(g, r, check, merged)
    if check.status == "pass":
        check.notes.append(f"the {n_groups} groups are {params.method}'s on the {len(keys)} registrations"
                           + (f" ({len(merged)} merged after losing members below k, each into the nearest "
                              "group still sealed)" if merged else ""))


def _check_targets(g: _Grouping, r: VerifiedRound, check: Check, merged: list[int]) -> None:
    """Rule (b) of `check_grouping` for every merge."""
    if r.transcript.shuffle_starts_included:
        hops = _merge_hops(g, r, check)
        instants: list[list[_Hop]] = []
        for hop in sorted(hops, key=lambda h: (h.t, h.source)):
            if instants and _same_time(instants[-1][0].t, hop.t):
                instants[-1].append(hop)
            else:
                instants.append([hop])
        budget = _SearchBudget()
        reordered = sum(_check_instant(g, r, check, instant, budget) for instant in instants)
        if reordered:
            check.notes.append(f"the merges of {reordered} instant(s) fit an order other than the one the transcript "
                               "lists them in (an honest collector lists them in the order it issued them)")
        _suppressed_before_merges(r, check, [(hop.source, hop.t) for hop in hops])
        _no_partner(g, r, check)
        return
    assigned = g.assigned
    excluded = r.transcript.exclusions
    into: dict[int, list[int]] = defaultdict(list)
    movers_of: dict[int, set[bytes]] = {}
    if not merged:
        return
    for label in merged:
        movers_of[label] = {key for key in g.expected[label] if assigned[key].group != label}
        live = [key for key in movers_of[label] if sid_of(key) not in excluded]
        if live:
            into[assigned[live[0]].group].append(label)
    unchecked = 0
    for target, sources in sorted(into.items()):
        moved_on = any(assigned[key].group != target for key in g.expected.get(target, ()))
        if len(sources) != 1 or moved_on:
            unchecked += len(sources)
            continue
        [source] = sources
        movers = movers_of[source]
        told = next(assigned[key].members for key in movers if sid_of(key) not in excluded)
        _nearest(g, check, source, target, movers, set(told) - movers, _untouched_centres(g))
    if unchecked:
        check.notes.append(f"{unchecked} merge(s) into a group that took several merges or moved on: which group was "
                           "nearest is not checked without the shuffle_starts")
