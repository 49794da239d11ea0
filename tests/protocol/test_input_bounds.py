"""A registered QI value must be finite and at most `MAX_QI_MAGNITUDE` in magnitude (SPEC §7.3 register).

Found by an attacker: two registrations of QI = 1e308 (finite, so accepted) overflowed MDAV's standardization at
the close of registration and crashed the collector service, again after every restart (it replays them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from coutil.errors import InputError, RemoteProtocolError
from coutil.protocol import codec, crypto, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import MAX_QI_MAGNITUDE, RoundConfig
from coutil.protocol.messages import Register
from coutil.protocol.node import SeededRandom
from coutil.protocol.states import CollectorState
from coutil.round.setup import DataSource
from coutil.sdc.mdav import mdav

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=2, random_records=0,
                     step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)


def _register(collector: CollectorNode, qi: tuple[float, float], i: int) -> None:
    key = crypto.SigningKey.generate(SeededRandom(f"subject {i}"))
    message = Register(collector.round_id, key.public, qi, bytes(32))
    collector.receive(topics.subject_up(collector.round_id, key.public), codec.encode(message, key), 0.5)


def test_huge_qi_values_are_refused_at_registration_and_the_round_goes_on() -> None:
    rng = SeededRandom("collector")
    collector = CollectorNode(CONFIG, identity=crypto.SigningKey.generate(rng), rng=rng, round_id=bytes(16))
    collector.start(0.0)
    for i, qi in enumerate([(1e308, 170.0), (1e308, 171.0), (-MAX_QI_MAGNITUDE * 2, 160.0)]):
        _register(collector, qi, i)
    assert [r.reason for r in collector.rejections] == ["bad_field"] * 3
    for i, qi in enumerate([(30.0, 170.0), (MAX_QI_MAGNITUDE, 171.0), (40.0, 160.0)], start=3):
        _register(collector, qi, i)
    collector.on_timer(CONFIG.register_window + 1.0)  # the close of registration: MDAV on what was accepted
    assert collector.state == CollectorState.SHARING


def test_mdav_standardizes_values_near_the_float64_limit_without_overflow() -> None:
    x = np.array([[1e308, 1.0], [1e308, 2.0], [-1e308, 3.0], [5.0, 4.0], [6.0, 5.0], [7.0, 6.0]])
    with np.errstate(over="ignore"):  # the centroids of such values overflow: a data problem, not a crash
        groups = mdav(x, 2).groups
    assert sorted(np.bincount(groups).tolist()) == [2, 2, 2]


def test_a_round_over_data_with_such_a_value_is_an_input_error(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "data.csv"
    path.write_text("age,height,income\n30,170,1\n1e308,171,2\n40,160,3\n")
    with pytest.raises(InputError, match="record 2 has a QI value beyond"):
        DataSource(csv=path).load(CONFIG, 1)


@pytest.mark.parametrize(("accept", "reason"), [(False, "[/]"), (False, "a free text"), (True, "not_included"),
                                                (False, "ok")])
def test_a_verdict_with_another_reason_than_a_reason_code_is_rejected(accept: bool, reason: str) -> None:
    """Found by an attacker: a signed verdict with reason "[/]" made `collector status` crash on printing it. A
    verdict is accept with `ok` or a complaint with one of `VERDICT_REASONS` (SPEC §7.3), REJECT `bad_field`."""
    from coutil.errors import RemoteProtocolError
    from coutil.protocol.messages import VERDICT_REASONS, Verdict

    rng = SeededRandom("collector")
    collector = CollectorNode(CONFIG, identity=crypto.SigningKey.generate(rng), rng=rng, round_id=bytes(16))
    collector.start(0.0)
    _register(collector, (30.0, 170.0), 0)
    key = crypto.SigningKey.generate(SeededRandom("subject 0"))
    for ok_accept, ok_reason in ((True, "ok"), (False, "not_included")):
        assert ok_reason in VERDICT_REASONS
        good = codec.decode(codec.encode(Verdict(bytes(16), key.public, ok_accept, ok_reason, bytes(32), bytes(32)),
                                         key))
        collector._on_verdict(good.message, good, 1.0)  # type: ignore[arg-type]
        collector._verdicts.clear()
    bad = codec.decode(codec.encode(Verdict(bytes(16), key.public, accept, reason, bytes(32), bytes(32)), key))
    with pytest.raises(RemoteProtocolError) as caught:
        collector._on_verdict(bad.message, bad, 1.0)  # type: ignore[arg-type]
    assert caught.value.reason == "bad_field"


def test_a_flood_of_bad_messages_is_counted_not_kept_one_by_one() -> None:
    """Found by an attacker: every rejected message was kept with its topic (200,000 one-byte payloads on 2 kB
    topics added 275 MB to the collector service). Now the first `KEPT_REJECTIONS` are kept, their topic cut to
    `KEPT_TEXT` characters, and every one is counted (the report's and the service's counts stay exact)."""
    from coutil.protocol.collector_release import rejection_counts
    from coutil.protocol.node import KEPT_REJECTIONS, KEPT_TEXT

    rng = SeededRandom("collector")
    collector = CollectorNode(CONFIG, identity=crypto.SigningKey.generate(rng), rng=rng, round_id=bytes(16))
    collector.start(0.0)
    long_topic = "coutil/v2/" + "x" * 2000
    for _ in range(KEPT_REJECTIONS + 500):
        collector.receive(long_topic, b"\x01", 0.1)
    assert len(collector.rejections) == KEPT_REJECTIONS
    assert max(len(r.topic) for r in collector.rejections) == KEPT_TEXT
    assert sum(rejection_counts(collector.rejections).values()) == KEPT_REJECTIONS + 500
    assert collector.outcome().rejections == rejection_counts(collector.rejections)


def test_large_signed_messages_are_not_kept_alive_beyond_a_byte_budget() -> None:
    """Found by an attacker: twenty signed 32 MiB messages, each rejected, stayed alive in the decode cache of
    the collector service (1.9 GB). The large caches now hold at most `DecodeCache.LARGE_BYTES` together."""
    import os

    from coutil.protocol.messages import Submit

    cache = codec.DecodeCache()
    size = 12 * 1024 * 1024
    for i in range(8):
        key = crypto.SigningKey.generate(SeededRandom(f"flooder {i}"))
        cache.decode(codec.encode(Submit(bytes(16), key.public, 0, 0, os.urandom(size), bytes(32)), key),
                     codec.Limits())
    held = {id(k[1]): len(k[1]) for k in cache._large}
    held.update((id(data), len(data)) for data, _, _ in cache._large_objects)
    assert sum(held.values()) <= cache.LARGE_BYTES
    assert len(held) >= 1  # a bulletin (the newest large message) stays cached


def _refused_with_peak(data: bytes) -> tuple[RemoteProtocolError, int]:
    """`codec.decode` of a message that must be refused: the refusal, and the peak of what decoding allocated."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError) as refused:
            codec.decode(data)
        return refused.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _hostile_batch(entries: int, entry: bytes, tag: str = "batch") -> bytes:
    """An unsigned envelope whose payload holds ``entries`` small entries in arrays of 2^16 (each under
    every per-array limit, so that only the total can stop it)."""
    import msgpack

    per = 2**16
    arrays = [b"\xdd" + per.to_bytes(4, "big") + entry * per for _ in range(max(1, entries // per))]
    payload = b"".join([b"\xdd" + (1 + len(arrays)).to_bytes(4, "big"), msgpack.packb(tag), *arrays])
    return bytes(msgpack.packb([codec.PROTOCOL_VERSION, payload, bytes(64)], use_bin_type=True))


@pytest.mark.parametrize(("entry", "tag"), [(b"\x91\x00", "batch"), (b"\xcd\x12\x34", "vote"),
                                            (b"\x91\x00", "release")])
def test_a_message_of_many_small_entries_is_refused_before_it_costs_many_times_its_size(entry: bytes,
                                                                                         tag: str) -> None:
    """Found by an attacker: a message is decoded before its signature can be checked, and msgpack builds an
    object of 30-100 bytes per entry whatever its size on the wire: 60 MiB of 1-entry arrays cost 1.7 GB
    while decoding (`simulations/bench/bench_decode_bounds.py`). The arrays of a payload now hold at most
    `Limits.max_payload_entries` entries together (the release `max_release_entries`): REJECT ``oversized``,
    having built at most that many."""
    data = _hostile_batch(3 * codec.MAX_RELEASE_ENTRIES, entry, tag)  # 12-18 MiB on the wire
    refused, peak = _refused_with_peak(data)
    assert refused.reason == "oversized"
    assert "entries in all" in refused.detail
    # At most about 64 bytes per entry of the budget (a 1-entry array and its pointer), where without it
    # every entry of the message was built (three times the budget), then REJECT bad_field.
    budget = codec.MAX_RELEASE_ENTRIES if tag == "release" else codec.MAX_PAYLOAD_ENTRIES
    assert peak < 100 * budget, (peak, len(data))


def _chain(levels: int, tag: str) -> bytes:
    """An unsigned envelope whose payload nests ``levels`` arrays of 2^20 entries, each holding 2^20 - 1
    3-byte integers and the next array: arrays still being built, which no finished-array count sees."""
    import msgpack

    size = 2**20
    level = b"\xdd" + size.to_bytes(4, "big") + b"\xcd\x12\x34" * size
    for _ in range(levels - 1):
        level = b"\xdd" + size.to_bytes(4, "big") + b"\xcd\x12\x34" * (size - 1) + level
    payload = b"\x92" + msgpack.packb(tag) + level
    return bytes(msgpack.packb([codec.PROTOCOL_VERSION, payload, bytes(64)], use_bin_type=True))


@pytest.mark.parametrize(("levels", "tag"), [(3, "batch"), (8, "release")])
def test_nested_arrays_still_being_built_are_bounded_too(levels: int, tag: str) -> None:
    """Found by a reviewer of the entry budget: msgpack calls its hook when an array is finished, so a chain of
    nested 2^20-entry arrays was built whole before any was counted (60 MiB: 0.9 GB, 19 s). Every message but
    a release now has arrays of at most 4,096 entries (its schema's limit) from their headers, and a payload
    of 64 KiB or more is walked header by header, entries counted as each array starts and nesting at most
    8 deep, before anything is built."""
    data = _chain(levels, tag)
    refused, peak = _refused_with_peak(data)
    assert refused.reason == "oversized"
    assert peak < 4 * len(data), (peak, len(data))  # the payload's copies, nothing built per entry


def test_arrays_nested_deeper_than_any_message_are_refused() -> None:
    import msgpack

    from coutil.protocol.unpack import MAX_NESTING, WALK_FROM

    deep = b"\x91" * (MAX_NESTING + 1) + b"\xc4\x00"  # MAX_NESTING + 1 arrays around an empty bin
    pad = b"\xc6" + WALK_FROM.to_bytes(4, "big") + bytes(WALK_FROM)  # a bin making the payload walked
    payload = b"\x93" + msgpack.packb("batch") + pad + deep
    with pytest.raises(RemoteProtocolError) as refused:
        codec.decode(bytes(msgpack.packb([codec.PROTOCOL_VERSION, payload, bytes(64)], use_bin_type=True)))
    assert refused.value.reason == "oversized" and "nested deeper" in refused.value.detail


def test_the_largest_honest_messages_fit_the_entry_budgets() -> None:
    """The budgets refuse no honest message: a release with both per-group arrays at their 2^20-entry limit,
    and an assign whose every array is at the 4,096-entry limit with 64-hash proofs (more than any roster of
    at most 2^53 subjects needs), decode; one entry more than the budget is REJECT ``oversized``."""
    from coutil.protocol.messages import Assign, Release

    key = crypto.SigningKey.generate(SeededRandom("collector"))
    groups = codec.MAX_LONG_ARRAY_ENTRIES
    release = Release(bytes(16), key.public, ("a", "b"), tuple(range(groups)), (1,) * groups, bytes(16 * groups),
                      bytes(32), bytes(32))
    assert codec.decode(codec.encode(release, key)).message == release
    width = codec.MAX_ARRAY_ENTRIES
    proof = (bytes(32),) * 64
    assign = Assign(bytes(16), key.public, key.public, 0, proof, bytes(32), 0, (key.public,) * width,
                    (0.0,) * width, ((1, bytes(32), proof),) * (width - 1))
    data = codec.encode(assign, key)
    assert codec.decode(data).message == assign
    entries = 11 + 64 + 2 * width + (width - 1) * (1 + 3 + 64)  # the fellows: an entry, a triple, a proof
    assert entries <= codec.MAX_PAYLOAD_ENTRIES
    with pytest.raises(RemoteProtocolError) as refused:
        codec.decode(data, codec.Limits(max_payload_entries=entries - 1))
    assert refused.value.reason == "oversized"
    assert codec.decode(data, codec.Limits(max_payload_entries=entries)).message == assign


def test_the_run_message_bound_holds_for_every_message_of_a_round_where_every_member_blames() -> None:
    """`largest_run_message` bounds what a run produces: each onion is exactly `onion_bytes` long (its quadratic
    term), every envelope of a run in which every member blames (a false complaint) fits under the bound of its
    group, and mixer 1's blame, the largest, is more than half of it (a bound loose enough to refuse honest ks
    would fail here)."""
    from coutil.protocol.messages import Batch, Blame, ShuffleStart, Submit
    from coutil.protocol.shuffle import largest_run_message, onion_bytes
    from tests.adversary.common import CONFIG as PLAYED
    from tests.adversary.common import play

    width = len(PLAYED.confidential)
    for seed in (3, 8):
        collector = play({"subjects": [{"strategy": "false-complaint", "rows": [4]}]}, seed=seed).round.collector
        [envelopes] = collector.run_evidence().values()
        messages = [(codec.decode(e).message, e) for e in envelopes]
        start = next(m for m, _ in messages if isinstance(m, ShuffleStart))
        g = len(start.members)
        bound = largest_run_message(g, width)
        assert all(len(e) <= bound for _, e in messages)
        assert all(len(m.onion) == onion_bytes(g, width) for m, _ in messages if isinstance(m, Submit))
        assert all(len(item) == onion_bytes(g, width, m.step) for m, _ in messages if isinstance(m, Batch)
                   for item in m.items)
        largest = max(len(e) for m, e in messages if isinstance(m, Blame))
        assert bound / 2 < largest <= bound, (largest, bound)


def test_a_k_whose_groups_shuffle_messages_exceed_the_limit_is_an_input_error() -> None:
    """An MDAV group has up to 2k - 1 members and its blames grow with the square of that: at the 64 MiB every
    subject accepts, k = 700 would have honest blames refused `oversized` mid-round; the config names the largest
    k that fits, which is accepted, and a smaller `max_message_bytes` lowers it."""
    from coutil.protocol.shuffle import largest_group, largest_run_message

    def config(k: int, **extra: Any) -> RoundConfig:
        return RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=k, **extra)

    with pytest.raises(InputError, match=r"k = 700 lets a group reach 1399 members.* at most (\d+)") as refused:
        config(700)
    most = int(refused.value.args[0].rsplit("at most ", 1)[1].split()[0])
    assert largest_run_message(2 * most - 1, 2) <= codec.MAX_MESSAGE_BYTES < largest_run_message(2 * most + 1, 2)
    assert config(most).k == most
    with pytest.raises(InputError, match="above the limit every subject applies"):
        config(most + 1, max_message_bytes=2**30)
    small = (largest_group(2, 2**16) + 1) // 2
    assert config(small, max_message_bytes=2**16).k == small
    with pytest.raises(InputError, match="above max_message_bytes"):
        config(small + 1, max_message_bytes=2**16)
    # A SafePub round too: its classes are cut into groups of at most 2k - 1 (SPEC §9.1), so the same bound holds.
    bins = {"age": [0, 50, 120], "height": [0, 170, 250]}
    assert config(small, grouping="safepub", safepub_bins=bins, max_message_bytes=2**16).k == small
    with pytest.raises(InputError, match="above max_message_bytes"):
        config(small + 1, grouping="safepub", safepub_bins=bins, max_message_bytes=2**16)


def test_a_collector_announcing_a_small_limit_still_decodes_the_blames_of_a_merged_run() -> None:
    """A merge may form a run of up to `largest_run_members` members, above the config's 2k - 1, whose blames the
    subjects accept up to 64 MiB. A collector announcing `max_message_bytes` = 64 KiB refused them `oversized`
    (found by an attacker of the merge bound): it could not convict that run's deviators, and their blamers waited
    out the deadline. It now decodes up to `RoundConfig.accepted_message_bytes` (SPEC §7.1): a 200 kB blame is
    judged on its merits (here: from no member), and a message above even that is still `oversized`."""
    from coutil.protocol.messages import Blame
    from coutil.protocol.shuffle import largest_run_members, largest_run_message

    small = RoundConfig(qi=("age", "height"), confidential=("income",), k=2, random_records=0,
                        max_message_bytes=2**16)
    merged = largest_run_message(largest_run_members(small.confidential), 1)
    assert merged > small.max_message_bytes and small.accepted_message_bytes >= merged
    rng = SeededRandom("collector")
    collector = CollectorNode(small, identity=crypto.SigningKey.generate(rng), rng=rng, round_id=bytes(16))
    collector.start(0.0)
    key = crypto.SigningKey.generate(SeededRandom("blamer"))
    topic = topics.subject_group(collector.round_id, key.public)
    for size, oversized in ((200_000, False), (small.accepted_message_bytes + 1, True)):
        blame = Blame(collector.round_id, key.public, 0, 0, bytes(32), (), bytes(32), (bytes(size),), bytes(32),
                      b"")
        collector.receive(topic, codec.encode(blame, key), 1.0)
        assert (collector.rejections[-1].reason == "oversized") is oversized, collector.rejections[-1]
