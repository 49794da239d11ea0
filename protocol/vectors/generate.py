"""Write the language-neutral test vectors of protocol/SPEC.md into protocol/vectors/*.json.

Run ``python protocol/vectors/generate.py`` to (re)write them, ``--check`` to exit 1 when a file
differs from what the reference implementation produces now (tests/protocol/test_vectors.py does the
same check and also verifies every vector). Everything is deterministic: keys are derived from
labels as ``seed = SHA-256("coutil/v2 vectors " || label)`` and every ephemeral secret is listed.

Conventions of the JSON files: bytes are lower-case hex strings; floats are JSON numbers (shortest
round-trip form); a message is ``{"type": tag, "fields": {...}}`` with nested structures as objects
and fixed tuples (such as ``excluded`` entries) as arrays.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from coutil.protocol import codec, crypto, merkle
from coutil.protocol.messages import (
    Announce,
    Assign,
    Batch,
    Blame,
    Fetch,
    GroupDone,
    Message,
    Register,
    RegisterAck,
    Release,
    Reveal,
    RevealOpen,
    Roster,
    RoundParams,
    RunKeys,
    ShuffleStart,
    Submit,
    Verdict,
    VerdictAck,
    Vote,
)
from coutil.protocol.shuffle import (
    batch_digest,
    collector_aad,
    inner_aad,
    inner_commitment,
    keys_digest,
    members_digest,
    outer_aad,
)
from coutil.sdc.mdav import mdav, mdav_reference

HERE = Path(__file__).resolve().parent
#: A release's rows (3 columns, 3 rows, little-endian float64) for the rows_root vector (SPEC §8.3).
RELEASE_ROWS = np.array([[35.5, 1.7, 1000.0], [35.5, 1.7, 2500.0], [35.5, 1.7, -3.25]], "<f8").tobytes()
V = codec.PROTOCOL_VERSION
ROUND_ID = bytes.fromhex("00112233445566778899aabbccddeeff")


def seed_of(label: str) -> bytes:
    return hashlib.sha256(b"coutil/v2 vectors " + label.encode()).digest()


class ScriptedRandom:
    """A random source returning the listed byte strings (so vectors name every ephemeral secret)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    def bytes(self, n: int) -> bytes:
        chunk = self._chunks.pop(0)
        assert len(chunk) == n
        return chunk

    def below(self, bound: int) -> int:
        raise AssertionError("vectors draw no integers")


COLLECTOR = crypto.SigningKey.from_seed(seed_of("collector"))
SUBJECTS = [crypto.SigningKey.from_seed(seed_of(f"subject {i}")) for i in range(3)]
KX = [crypto.KxKey.from_secret(seed_of(f"kx {i}")) for i in range(4)]


def _announce() -> Announce:
    params = RoundParams(("age", "height"), ("income",), 3, "mdav", 1700000030.0, 20.0, 60.0, KX[0].public, 1,
                         1000, 0.05, (("method", "mdav"), ("protocol", "coutil/v2"), ("k", "3")))
    return Announce(ROUND_ID, COLLECTOR.public, params)


def _announce_digest() -> bytes:
    """The sample announce's payload digest: where every run's membership digest starts (SPEC §8.4)."""
    return codec.payload_digest(codec.encode_payload(_announce()))


def _sample_messages() -> list[tuple[str, crypto.SigningKey, Message]]:
    c, s0, s1 = COLLECTOR.public, SUBJECTS[0].public, SUBJECTS[1].public
    members = tuple(sorted(k.public for k in SUBJECTS))
    d = hashlib.sha256(b"digest").digest()
    md = members_digest(_announce_digest(), 0, 1, members[:2])
    kd = keys_digest(ROUND_ID, 0, 1, members[:2],
                     {m: (KX[i].public, KX[i + 2].public) for i, m in enumerate(members[:2])})
    salt = seed_of("commitment salt")
    onion = bytes(range(100))
    items = (b"\x01" * 10, b"\x02" * 10)
    rows = np.array([[35.5, 1.7, 1000.0], [35.5, 1.7, 2500.0]], "<f8").tobytes()
    return [
        ("announce", COLLECTOR, _announce()),
        ("register", SUBJECTS[0], Register(ROUND_ID, s0, (34.0, 1.75), seed_of("roster salt"))),
        ("register_ack", COLLECTOR, RegisterAck(ROUND_ID, c, s0, d)),
        ("roster", COLLECTOR, Roster(ROUND_ID, c, 3, d, 1)),
        ("assign", COLLECTOR, Assign(ROUND_ID, c, s0, 0, (d, d[::-1]), d, 0, members, (35.5, 1.7),
                                     tuple((i + 1, d[::-1], (d,)) for i, m in enumerate(members) if m != s0))),
        ("shuffle_start", COLLECTOR, ShuffleStart(ROUND_ID, c, 0, 1, members[:2], ((members[2], "silent"),), 99.5)),
        ("run_keys", SUBJECTS[1], RunKeys(ROUND_ID, s1, 0, 1, KX[1].public, KX[2].public, d, md)),
        ("submit", SUBJECTS[1], Submit(ROUND_ID, s1, 0, 1, onion, inner_commitment(onion, salt))),
        ("batch", SUBJECTS[1], Batch(ROUND_ID, s1, 0, 1, 2, items)),
        ("vote", SUBJECTS[1], Vote(ROUND_ID, s1, 0, 1, True, d, d, md, kd)),
        ("reveal_open", COLLECTOR, RevealOpen(ROUND_ID, c, 0, 1, d)),
        ("reveal", SUBJECTS[1], Reveal(ROUND_ID, s1, 0, 1, KX[2].secret)),
        ("blame", SUBJECTS[1], Blame(ROUND_ID, s1, 0, 1, KX[1].secret, (1, 0), salt,
                                     (codec.encode(Batch(ROUND_ID, s0, 0, 1, 1, items[::-1]), SUBJECTS[0]),),
                                     batch_digest(items),
                                     codec.encode(Vote(ROUND_ID, s0, 0, 1, False, d, d, md, kd), SUBJECTS[0]))),
        # Mixer 1's blame carries the submissions she mixed (hers included) and the final batch (SPEC §8.4).
        ("blame_of_mixer_1", SUBJECTS[0], Blame(ROUND_ID, s0, 0, 1, KX[0].secret, (0, 1), salt,
                                                (codec.encode(Submit(ROUND_ID, s0, 0, 1, onion[::-1], d), SUBJECTS[0]),
                                                 codec.encode(Submit(ROUND_ID, s1, 0, 1, onion,
                                                                     inner_commitment(onion, salt)), SUBJECTS[1]),
                                                 codec.encode(Batch(ROUND_ID, s1, 0, 1, 2, items), SUBJECTS[1])),
                                                batch_digest(items[::-1]),
                                                codec.encode(Vote(ROUND_ID, s1, 0, 1, False, d, d, md, kd),
                                                             SUBJECTS[1]))),
        # A blame on two final batches of the final mixer, no no-go vote: `no_go_vote` empty (SPEC §8.4).
        ("blame_on_two_finals", SUBJECTS[0], Blame(ROUND_ID, s0, 0, 1, KX[0].secret, (1, 0), salt,
                                                   (codec.encode(Batch(ROUND_ID, s1, 0, 1, 2, items), SUBJECTS[1]),
                                                    codec.encode(Batch(ROUND_ID, s1, 0, 1, 2, items[::-1]),
                                                                 SUBJECTS[1])),
                                                   batch_digest(items[::-1]), b"")),
        ("group_done", COLLECTOR, GroupDone(ROUND_ID, c, 0, 1)),
        ("release", COLLECTOR, Release(ROUND_ID, c, ("age", "height", "income"), (0,), (2,), rows,
                                       merkle.rows_root(rows, 3), d)),
        ("fetch", SUBJECTS[0], Fetch(ROUND_ID, s0, "release")),
        ("verdict", SUBJECTS[0], Verdict(ROUND_ID, s0, True, "ok", d[::-1], d)),
        ("verdict_ack", COLLECTOR, VerdictAck(ROUND_ID, c, s0, d)),
    ]


def _pack(value: object) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _envelope(payload: bytes, key: crypto.SigningKey, version: object = codec.PROTOCOL_VERSION,
              signature: bytes | None = None) -> bytes:
    if signature is None:
        signature = key.sign(codec.SIGNATURE_DOMAIN + payload)
    return _pack([version, payload, signature])


def messages_file() -> dict[str, Any]:
    keys = {"collector": COLLECTOR} | {f"subject {i}": k for i, k in enumerate(SUBJECTS)}
    valid = []
    for name, key, message in _sample_messages():
        data = codec.encode(message, key)
        payload = codec.encode_payload(message)
        valid.append({
            "name": name,
            "signer": next(label for label, k in keys.items() if k is key),
            "message": codec.message_to_plain(message),
            "payload": payload.hex(),
            "envelope": data.hex(),
            "digest": codec.payload_digest(payload).hex(),
        })
    return {
        "description": "One valid encoding per message type. Decoding 'envelope' must verify and give 'message'; "
                       "encoding 'message' with the signer's key must give 'envelope' byte for byte.",
        "signature_domain": codec.SIGNATURE_DOMAIN.hex(),
        "keys": {label: {"seed": k.seed.hex(), "public": k.public.hex()} for label, k in keys.items()},
        "valid": valid,
    }


def _body(message: Message) -> list[Any]:
    body: list[Any] = list(msgpack.unpackb(codec.encode_payload(message), raw=False))
    return body


#: The encoding of the Ed25519 identity point (a point of small order).
SMALL_ORDER_POINT = b"\x01" + bytes(31)


def invalid_file() -> dict[str, Any]:
    s = SUBJECTS[1]
    submit = Submit(ROUND_ID, s.public, 0, 1, b"onion", bytes(32))
    good = codec.encode(submit, s)
    sb = _body(submit)
    vote = _body(Vote(ROUND_ID, s.public, 0, 1, True, bytes(32), bytes(32), bytes(32), bytes(32)))
    register = _body(Register(ROUND_ID, s.public, (1.0, 2.0), bytes(32)))
    fetch = _body(Fetch(ROUND_ID, s.public, "release"))
    announce = _body(next(m for name, _, m in _sample_messages() if name == "announce"))

    def signed(body: list[Any], key: crypto.SigningKey = s) -> bytes:
        return _envelope(_pack(body), key)

    def change(body: list[Any], index: int, value: object) -> list[Any]:
        out = list(body)
        out[index] = value
        return out

    payload = _pack(sb)
    sig = s.sign(codec.SIGNATURE_DOMAIN + payload)
    cases: list[tuple[str, str, bytes, dict[str, int]]] = [
        ("empty input", "not_msgpack", b"", {}),
        ("reserved msgpack byte 0xc1", "not_msgpack", b"\xc1", {}),
        ("trailing bytes after the envelope", "not_msgpack", good + b"\x00", {}),
        ("truncated envelope", "not_msgpack", good[:-1], {}),
        ("map instead of array", "not_msgpack", _pack({"v": 1}), {}),
        ("extension type inside the payload", "not_msgpack",
         _envelope(_pack(["submit", msgpack.ExtType(1, b"x")]), s), {}),
        ("envelope is not an array", "bad_envelope", _pack(1), {}),
        ("envelope of four entries", "bad_envelope", _pack([V, payload, sig, b""]), {}),
        ("signature of 63 bytes", "bad_envelope", _pack([V, payload, sig[:63]]), {}),
        ("payload as str", "bad_envelope", _pack([V, "submit", sig]), {}),
        ("version as bool", "bad_envelope", _pack([True, payload, sig]), {}),
        ("payload is not an array", "bad_envelope", _envelope(_pack(b"submit"), s), {}),
        ("payload tag is not a str", "bad_envelope", signed(change(sb, 0, 7)), {}),
        ("version 1 (the previous protocol)", "bad_version", _envelope(payload, s, version=1), {}),
        ("unknown tag", "unknown_type", signed(change(sb, 0, "hello")), {}),
        ("one field too many", "bad_field", signed([*sb, 0]), {}),
        ("one field too few", "bad_field", signed(sb[:-1]), {}),
        ("bool where a uint is expected", "bad_field", signed(change(sb, 3, True)), {}),
        ("negative uint", "bad_field", signed(change(sb, 3, -1)), {}),
        ("uint of 2^53", "bad_field", signed(change(sb, 3, 2**53)), {}),
        ("float where a uint is expected", "bad_field", signed(change(sb, 3, 0.0)), {}),
        ("int where a bool is expected", "bad_field", signed(change(vote, 5, 1)), {}),
        ("NaN float", "bad_field", signed(change(register, 3, [1.0, float("nan")])), {}),
        ("infinite float", "bad_field", signed(change(register, 3, [float("inf"), 1.0])), {}),
        ("int where a float is expected", "bad_field", signed(change(register, 3, [1.0, 2])), {}),
        ("round id of 15 bytes", "bad_field", signed(change(sb, 1, ROUND_ID[:15])), {}),
        ("sender of 31 bytes", "bad_field", signed(change(sb, 2, s.public[:31])), {}),
        ("str where bin is expected", "bad_field", signed(change(sb, 5, "onion")), {}),
        ("control character in a str", "bad_field", signed(change(fetch, 3, "rel\nease")), {}),
        ("nested params with a field missing", "bad_field", signed(change(announce, 3, announce[3][:-1]), COLLECTOR),
         {}),
        ("flipped signature bit", "bad_signature", _pack([V, payload, bytes([sig[0] ^ 1]) + sig[1:]]), {}),
        ("signed by another key than the sender", "bad_signature", _envelope(payload, SUBJECTS[0]), {}),
        ("signature without the domain prefix", "bad_signature", _pack([V, payload, s.sign(payload)]), {}),
        # The identity point as sender key and as R, with S = 0: the cofactorless equation holds for every
        # message, so plain RFC 8032 verification (OpenSSL's) accepts it. SPEC §8 rejects small-order points.
        ("small-order sender key, identity signature", "bad_signature",
         _pack([V, _pack(change(sb, 2, SMALL_ORDER_POINT)), SMALL_ORDER_POINT + bytes(32)]), {}),
        ("message above max_message_bytes", "oversized",
         codec.encode(Submit(ROUND_ID, s.public, 0, 1, bytes(1000), bytes(32)), s), {"max_message_bytes": 1024}),
        ("array of 4097 entries", "oversized", signed(change(_body(Batch(ROUND_ID, s.public, 0, 1, 2, ())), 6,
                                                             [b""] * 4097)), {}),
        ("string above max_string_bytes", "oversized", signed(change(fetch, 3, "x" * 17)), {"max_string_bytes": 16}),
    ]
    return {
        "description": "Each 'envelope' must be rejected with 'reason' (SPEC §7.2) under the default limits "
                       "overridden by 'limits'.",
        "default_limits": {"max_message_bytes": codec.MAX_MESSAGE_BYTES, "max_array_entries": codec.MAX_ARRAY_ENTRIES,
                           "max_string_bytes": codec.MAX_STRING_BYTES},
        "invalid": [{"name": name, "reason": reason, "limits": limits, "envelope": data.hex()}
                    for name, reason, data, limits in cases],
    }


def crypto_file() -> dict[str, Any]:
    recipient = KX[0]
    eph = seed_of("ephemeral 0")
    plaintext = crypto.encode_record((1000.0, -2.5))
    aad = collector_aad(ROUND_ID)
    sealed = crypto.seal(recipient.public, plaintext, aad, ScriptedRandom([eph]))
    inner_keys = KX[1:4]
    eph_all = seed_of("ephemeral all")
    iaad = inner_aad(ROUND_ID, 2, 1)
    sealed_all = crypto.seal_to_all([k.public for k in inner_keys], sealed, iaad, ScriptedRandom([eph_all]))
    mixers = [crypto.KxKey.from_secret(seed_of(f"mixer {j}")) for j in (1, 2, 3)]
    layer_ephs = {j: seed_of(f"layer {j}") for j in (1, 2, 3)}
    aad_for_step: Callable[[int], bytes] = lambda j: outer_aad(ROUND_ID, 2, 1, j)  # noqa: E731
    onion = crypto.build_onion(sealed_all, [m.public for m in mixers], aad_for_step,
                               ScriptedRandom([layer_ephs[3], layer_ephs[2], layer_ephs[1]]))
    peels = []
    item = onion
    for j, mixer in enumerate(mixers, start=1):
        item = crypto.peel(mixer, item, aad_for_step(j))
        peels.append(item.hex())
    return {
        "description": "SPEC §8. 'seal': ephemeral secret given; 'seal_to_all': recipients in order; 'onion': "
                       "layer j sealed to mixer j with its listed ephemeral secret (layers built from g down to 1); "
                       "'after_peel' lists the item after mixers 1..g peeled.",
        "record": {"values": [1000.0, -2.5], "encoded": plaintext.hex()},
        "members_digest": {"announce_digest": _announce_digest().hex(), "group": 2, "run": 1,
                           "members": [k.public.hex() for k in SUBJECTS],
                           "digest": members_digest(_announce_digest(), 2, 1, [k.public for k in SUBJECTS]).hex()},
        "keys_digest": {"round_id": ROUND_ID.hex(), "group": 2, "run": 1,
                        "members": [k.public.hex() for k in SUBJECTS[:2]],
                        "keys": [[KX[i].public.hex(), KX[i + 2].public.hex()] for i in range(2)],
                        "digest": keys_digest(ROUND_ID, 2, 1, [k.public for k in SUBJECTS[:2]],
                                              {k.public: (KX[i].public, KX[i + 2].public)
                                               for i, k in enumerate(SUBJECTS[:2])}).hex()},
        "inner_commitment": {"inner": sealed_all.hex(), "salt": seed_of("commitment salt").hex(),
                             "commitment": inner_commitment(sealed_all, seed_of("commitment salt")).hex()},
        "x25519_keys": [{"secret": k.secret.hex(), "public": k.public.hex()} for k in KX],
        "seal": {"recipient_secret": recipient.secret.hex(), "recipient_public": recipient.public.hex(),
                 "ephemeral_secret": eph.hex(), "plaintext": plaintext.hex(), "aad": aad.hex(),
                 "sealed": sealed.hex()},
        "seal_to_all": {"recipient_secrets": [k.secret.hex() for k in inner_keys], "ephemeral_secret": eph_all.hex(),
                        "plaintext": sealed.hex(), "aad": iaad.hex(), "sealed": sealed_all.hex()},
        "onion": {"mixer_secrets": [m.secret.hex() for m in mixers],
                  "layer_ephemeral_secrets": [layer_ephs[j].hex() for j in (1, 2, 3)],
                  "layer_aads": [aad_for_step(j).hex() for j in (1, 2, 3)],
                  "inner": sealed_all.hex(), "onion": onion.hex(), "after_peel": peels},
    }


def merkle_file() -> dict[str, Any]:
    trees = []
    for n in (1, 2, 3, 5, 7, 8, 13):
        leaves = [hashlib.sha256(bytes([i])).digest()[: 1 + i % 5] for i in range(n)]
        tree = merkle.MerkleTree(leaves)
        trees.append({"leaves": [leaf.hex() for leaf in leaves], "root": tree.root.hex(),
                      "proofs": [[p.hex() for p in tree.proof(i)] for i in range(n)]})
    key = SUBJECTS[0].public
    return {
        "description": "RFC 6962 trees (SPEC §8.3): root and the audit path of every leaf.",
        "empty_root": merkle.MerkleTree([]).root.hex(),
        "roster_leaf": {"key": key.hex(), "qi": [34.0, 1.75], "salt": seed_of("roster salt").hex(),
                        "commitment": merkle.qi_commitment(seed_of("roster salt"), (34.0, 1.75)).hex(),
                        "leaf": merkle.roster_leaf(key, merkle.qi_commitment(seed_of("roster salt"),
                                                                             (34.0, 1.75))).hex()},
        "trees": trees,
        "release_rows_root": {"columns": 3, "rows": RELEASE_ROWS.hex(),
                              "root": merkle.rows_root(RELEASE_ROWS, 3).hex()},
    }


def grouping_file() -> dict[str, Any]:
    """A small roster and its MDAV grouping (SPEC §9), in roster order (sorted keys)."""
    rng = np.random.default_rng(20240601)
    qi = np.round(rng.normal([40.0, 170.0], [12.0, 9.0], size=(14, 2)), 1)
    keys = [crypto.SigningKey.from_seed(seed_of(f"roster {i}")).public for i in range(14)]
    order = sorted(range(14), key=lambda i: keys[i])
    matrix = qi[order]
    k = 3
    result = mdav(matrix, k)
    assert np.array_equal(result.groups, mdav_reference(matrix, k).groups)
    salts = [seed_of(f"roster salt {i}") for i in range(14)]
    tree = merkle.MerkleTree([merkle.roster_leaf(keys[i], merkle.qi_commitment(salts[i], tuple(qi[i].tolist())))
                              for i in order])
    return {
        "description": "Roster in roster order (sorted keys) with QIs; MDAV with k gives 'groups' (label per "
                       "roster position, labels in order of formation) and 'centroids'.",
        "k": k,
        "roster": [{"key": keys[i].hex(), "qi": qi[i].tolist(), "salt": salts[i].hex()} for i in order],
        "merkle_root": tree.root.hex(),
        "groups": [int(g) for g in result.groups.tolist()],
        "centroids": np.asarray(result.centroids).tolist(),
    }


FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "messages.json": messages_file,
    "invalid.json": invalid_file,
    "crypto.json": crypto_file,
    "merkle.json": merkle_file,
    "grouping.json": grouping_file,
}


def render(build: Callable[[], dict[str, Any]]) -> str:
    return json.dumps(build(), indent=1, allow_nan=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a vector file is missing or out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, build in FILES.items():
        path = HERE / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python protocol/vectors/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
