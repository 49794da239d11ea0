"""The roster Merkle tree against a naive recursive RFC 6962 implementation and published CT vectors."""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coutil.protocol import merkle


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH, literally."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1 << ((n - 1).bit_length() - 1)  # largest power of two < n
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 6962 §2.1.1 PATH(m, D[n]), literally."""
    n = len(leaves)
    if n <= 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return [*_path(m, leaves[:k]), _mth(leaves[k:])]
    return [*_path(m - k, leaves[k:]), _mth(leaves[:k])]


# Leaves and roots of the certificate-transparency reference tests (RFC 6962 era test data).
CT_LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                         "606162636465666768696a6b6c6d6e6f")]
CT_ROOT_8 = "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"


def test_ct_reference_root() -> None:
    assert _mth(CT_LEAVES).hex() == CT_ROOT_8
    assert merkle.MerkleTree(CT_LEAVES).root.hex() == CT_ROOT_8


@pytest.mark.parametrize("n", [*range(0, 34), 63, 64, 65, 100])
def test_roots_and_paths_match_naive(n: int) -> None:
    leaves = [i.to_bytes(4, "big") * (i % 3) for i in range(n)]
    tree = merkle.MerkleTree(leaves)
    assert tree.size == n
    assert tree.root == _mth(leaves)
    for i in range(n):
        proof = tree.proof(i)
        assert list(proof) == _path(i, leaves)
        assert merkle.verify_inclusion(leaves[i], i, n, proof, tree.root)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=40), st.data())
def test_tampered_proofs_fail(leaves: list[bytes], data: st.DataObject) -> None:
    tree = merkle.MerkleTree(leaves)
    n = len(leaves)
    i = data.draw(st.integers(0, n - 1))
    proof = tree.proof(i)
    root = tree.root
    assert merkle.verify_inclusion(leaves[i], i, n, proof, root)
    assert not merkle.verify_inclusion(leaves[i] + b"x", i, n, proof, root)
    assert not merkle.verify_inclusion(leaves[i], i, n, proof, bytes(32))
    assert not merkle.verify_inclusion(leaves[i], n, n, proof, root)
    assert not merkle.verify_inclusion(leaves[i], -1, n, proof, root)
    assert not merkle.verify_inclusion(leaves[i], i, n, (*proof, bytes(32)), root)
    if proof:
        assert not merkle.verify_inclusion(leaves[i], i, n, proof[:-1], root)
        k = data.draw(st.integers(0, len(proof) - 1))
        bad = list(proof)
        bad[k] = bytes(b ^ 1 for b in bad[k])
        assert not merkle.verify_inclusion(leaves[i], i, n, bad, root)
        assert not merkle.verify_inclusion(leaves[i], i, n, [*proof[:k], b"short", *proof[k + 1:]], root)
    # The same proof must not verify another index unless that leaf is really there.
    for j in range(n):
        if j != i and leaves[j] != leaves[i]:
            assert not merkle.verify_inclusion(leaves[i], j, n, proof, root) or _path(j, leaves) == list(proof)


def test_roster_leaf_layout() -> None:
    key, salt = bytes(range(32)), bytes(range(32, 64))
    commitment = merkle.qi_commitment(salt, (1.0, -2.5))
    assert commitment == hashlib.sha256(b"coutil/roster-qi/v1\x00" + salt + struct.pack("<dd", 1.0, -2.5)).digest()
    leaf = merkle.roster_leaf(key, commitment)
    assert leaf == key + commitment
    assert len(leaf) == 64
    # Another salt, another commitment: a fellow member cannot try QI values against it without the salt.
    assert merkle.qi_commitment(bytes(32), (1.0, -2.5)) != commitment


def test_proof_index_out_of_range() -> None:
    with pytest.raises(IndexError):
        merkle.MerkleTree([b"a"]).proof(1)


def test_the_memo_never_answers_for_what_the_walk_refuses() -> None:
    """`verify_inclusion` is memoized (each member checks her fellows' roster entries): found by a reviewer, the
    cache finds entries by equality, so an index 1.0 or memoryview proof steps equal to a proof checked before got
    its True, where the walk refuses anything but an int index and bytes steps."""
    tree = merkle.MerkleTree([b"a", b"b", b"c", b"d", b"e"])
    proof = tree.proof(1)
    assert merkle.verify_inclusion(b"b", 1, 5, proof, tree.root)
    assert not merkle.verify_inclusion(b"b", 1.0, 5, proof, tree.root)  # type: ignore[arg-type]
    assert not merkle.verify_inclusion(b"b", 1, 5, tuple(memoryview(step) for step in proof), tree.root)  # type: ignore[misc]
    assert merkle.verify_inclusion(b"b", 1, 5, list(proof), tree.root)  # any sequence of bytes, as the walk takes
