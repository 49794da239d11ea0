"""The reference implementation against the language-neutral vectors in protocol/vectors/*.json."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, crypto, merkle

VECTORS = Path(__file__).parents[2] / "protocol" / "vectors"


def _load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


class ScriptedRandom:
    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    def bytes(self, n: int) -> bytes:
        chunk = self._chunks.pop(0)
        assert len(chunk) == n
        return chunk

    def below(self, bound: int) -> int:
        raise AssertionError


def _script(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"coutil_{path.parent.name}_generate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vector_files_are_up_to_date() -> None:
    assert _script(VECTORS / "generate.py").main(["--check"]) == 0, "run python protocol/vectors/generate.py"


def test_spec_state_tables_are_generated_from_the_code() -> None:
    """SPEC.md section 11 is the transition tables of the code, not a hand-written copy of them."""
    generator = _script(VECTORS.parent / "generate.py")
    assert generator.main(["--check"]) == 0, "run python protocol/generate.py"
    spec = (VECTORS.parent / "SPEC.md").read_text(encoding="utf-8")
    assert "| sharing | `roster`, `assign`, `shuffle_start`" in spec
    assert "    registration --> sharing" in spec


MESSAGES = _load("messages.json")


@pytest.mark.parametrize("vector", MESSAGES["valid"], ids=lambda v: v["name"])
def test_valid_messages(vector: dict[str, Any]) -> None:
    key_info = MESSAGES["keys"][vector["signer"]]
    key = crypto.SigningKey.from_seed(bytes.fromhex(key_info["seed"]))
    assert key.public.hex() == key_info["public"]
    expected = codec.message_from_plain(vector["message"])
    decoded = codec.decode(bytes.fromhex(vector["envelope"]), codec.Limits())
    assert decoded.message == expected
    assert decoded.payload.hex() == vector["payload"]
    assert decoded.digest.hex() == vector["digest"]
    assert codec.encode(expected, key).hex() == vector["envelope"]
    assert codec.message_to_plain(decoded.message) == vector["message"]


def test_every_message_type_has_a_valid_vector() -> None:
    from coutil.protocol.messages import MESSAGE_TYPES

    assert {v["message"]["type"] for v in MESSAGES["valid"]} == set(MESSAGE_TYPES)


INVALID = _load("invalid.json")


@pytest.mark.parametrize("vector", INVALID["invalid"], ids=lambda v: v["name"])
def test_invalid_messages(vector: dict[str, Any]) -> None:
    limits = dataclasses.replace(codec.Limits(), **vector["limits"])
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(bytes.fromhex(vector["envelope"]), limits)
    assert info.value.reason == vector["reason"]


def test_every_codec_reason_is_covered() -> None:
    assert {v["reason"] for v in INVALID["invalid"]} == set(codec.REASONS)


CRYPTO = _load("crypto.json")


def test_record_vector() -> None:
    record = CRYPTO["record"]
    assert crypto.encode_record(record["values"]).hex() == record["encoded"]
    assert crypto.decode_record(bytes.fromhex(record["encoded"]), 2) == tuple(record["values"])


def test_x25519_key_vectors() -> None:
    for pair in CRYPTO["x25519_keys"]:
        assert crypto.KxKey.from_secret(bytes.fromhex(pair["secret"])).public.hex() == pair["public"]


def test_seal_vector() -> None:
    v = {k: bytes.fromhex(x) for k, x in CRYPTO["seal"].items()}
    sealed = crypto.seal(v["recipient_public"], v["plaintext"], v["aad"], ScriptedRandom(v["ephemeral_secret"]))
    assert sealed == v["sealed"]
    key = crypto.KxKey.from_secret(v["recipient_secret"])
    assert crypto.open_sealed(key, v["sealed"], v["aad"]) == v["plaintext"]


def test_seal_to_all_vector() -> None:
    v = CRYPTO["seal_to_all"]
    secrets = [bytes.fromhex(s) for s in v["recipient_secrets"]]
    publics = [crypto.KxKey.from_secret(s).public for s in secrets]
    plaintext, aad, sealed = (bytes.fromhex(v[k]) for k in ("plaintext", "aad", "sealed"))
    assert crypto.seal_to_all(publics, plaintext, aad, ScriptedRandom(bytes.fromhex(v["ephemeral_secret"]))) == sealed
    assert crypto.open_with_all(secrets, sealed, aad) == plaintext


def test_onion_vector() -> None:
    v = CRYPTO["onion"]
    mixers = [crypto.KxKey.from_secret(bytes.fromhex(s)) for s in v["mixer_secrets"]]
    aads = [bytes.fromhex(a) for a in v["layer_aads"]]
    ephs = [bytes.fromhex(e) for e in v["layer_ephemeral_secrets"]]
    onion = crypto.build_onion(bytes.fromhex(v["inner"]), [m.public for m in mixers], lambda j: aads[j - 1],
                               ScriptedRandom(*reversed(ephs)))
    assert onion.hex() == v["onion"]
    item = onion
    for mixer, aad, expected in zip(mixers, aads, v["after_peel"], strict=True):
        item = crypto.peel(mixer, item, aad)
        assert item.hex() == expected
    assert item.hex() == v["inner"]


MERKLE = _load("merkle.json")


def test_merkle_vectors() -> None:
    assert merkle.MerkleTree([]).root.hex() == MERKLE["empty_root"]
    leaf = MERKLE["roster_leaf"]
    commitment = merkle.qi_commitment(bytes.fromhex(leaf["salt"]), tuple(leaf["qi"]))
    assert commitment.hex() == leaf["commitment"]
    assert merkle.roster_leaf(bytes.fromhex(leaf["key"]), commitment).hex() == leaf["leaf"]
    for tree_vector in MERKLE["trees"]:
        leaves = [bytes.fromhex(x) for x in tree_vector["leaves"]]
        tree = merkle.MerkleTree(leaves)
        root = bytes.fromhex(tree_vector["root"])
        assert tree.root == root
        for i, proof_hex in enumerate(tree_vector["proofs"]):
            proof = [bytes.fromhex(p) for p in proof_hex]
            assert list(tree.proof(i)) == proof
            assert merkle.verify_inclusion(leaves[i], i, len(leaves), proof, root)


def test_grouping_vector() -> None:
    from coutil.sdc.mdav import mdav

    v = _load("grouping.json")
    roster = v["roster"]
    keys = [bytes.fromhex(r["key"]) for r in roster]
    assert keys == sorted(keys)
    qi = np.array([r["qi"] for r in roster], dtype=np.float64)
    salts = [bytes.fromhex(r["salt"]) for r in roster]
    tree = merkle.MerkleTree([merkle.roster_leaf(k, merkle.qi_commitment(salt, tuple(q)))
                              for k, q, salt in zip(keys, qi.tolist(), salts, strict=True)])
    assert tree.root.hex() == v["merkle_root"]
    result = mdav(qi, v["k"])
    assert result.groups.tolist() == v["groups"]
    assert np.asarray(result.centroids).tolist() == v["centroids"]
    assert min(np.bincount(result.groups)) >= v["k"]


def test_v2_view_and_commitment_vectors() -> None:
    from coutil.protocol.shuffle import inner_commitment, keys_digest, members_digest

    v = CRYPTO["members_digest"]
    members = [bytes.fromhex(m) for m in v["members"]]
    assert members_digest(bytes.fromhex(v["announce_digest"]), v["group"], v["run"], members).hex() == v["digest"]
    kv = CRYPTO["keys_digest"]
    members = [bytes.fromhex(m) for m in kv["members"]]
    keys = {m: (bytes.fromhex(o), bytes.fromhex(i)) for m, (o, i) in zip(members, kv["keys"], strict=True)}
    assert keys_digest(bytes.fromhex(kv["round_id"]), kv["group"], kv["run"], members, keys).hex() == kv["digest"]
    c = CRYPTO["inner_commitment"]
    assert inner_commitment(bytes.fromhex(c["inner"]), bytes.fromhex(c["salt"])).hex() == c["commitment"]
    r = MERKLE["release_rows_root"]
    rows = bytes.fromhex(r["rows"])
    assert merkle.rows_root(rows, r["columns"]).hex() == r["root"]
    width = 8 * r["columns"]
    assert merkle.MerkleTree([rows[i:i + width] for i in range(0, len(rows), width)]).root.hex() == r["root"]


def test_vectors_speak_protocol_v2() -> None:
    from coutil.protocol import topics

    assert codec.PROTOCOL_VERSION == 2 and topics.PREFIX == "coutil/v2"
    assert codec.SIGNATURE_DOMAIN == b"coutil/v2\x00" and MESSAGES["signature_domain"] == b"coutil/v2\x00".hex()
    for vector in MESSAGES["valid"]:
        assert bytes.fromhex(vector["envelope"])[1] == 2  # msgpack [2, payload, signature]
