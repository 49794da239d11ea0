"""The roster's Merkle tree (protocol/SPEC.md §8.3): an RFC 6962 Merkle hash tree.

Leaf hash = SHA-256(0x00 || leaf), node hash = SHA-256(0x01 || left || right), the left subtree
holding the largest power of two below the size. Built bottom-up, that tree is exactly the one
obtained by pairing each level's nodes left to right and promoting an unpaired last node unchanged
to the next level; this module stores those levels so every audit path costs O(log n).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence

HASH_BYTES = 32


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


#: Domain separation of `qi_commitment` (version 1 of its encoding).
QI_COMMITMENT_TAG = b"coutil/roster-qi/v1\x00"


def qi_commitment(salt: bytes, qi: Sequence[float]) -> bytes:
    """SHA-256 of `QI_COMMITMENT_TAG`, the registration's 32-byte salt and her QI values as little-endian
    float64: what her roster leaf holds of her QIs. The salt keeps a fellow member, who sees the commitment
    in his assign, from trying QI values until one matches."""
    return hashlib.sha256(QI_COMMITMENT_TAG + bytes(salt) + struct.pack(f"<{len(qi)}d", *qi)).digest()


def roster_leaf(public_key: bytes, commitment: bytes) -> bytes:
    """A roster entry: the subject's key followed by her `qi_commitment`."""
    return bytes(public_key) + bytes(commitment)


def rows_root(rows: bytes, columns: int) -> bytes:
    """The release's ``rows_root`` (SPEC §8.3): the RFC 6962 root over its rows, each row's
    little-endian float64 bytes (8 x ``columns``) one leaf, in release order."""
    width = 8 * columns
    if columns <= 0 or len(rows) % width:
        raise ValueError("rows do not fill the columns")
    return MerkleTree([rows[i:i + width] for i in range(0, len(rows), width)]).root


class MerkleTree:
    """An RFC 6962 tree over ``leaves`` (raw leaf bytes, in roster order)."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        level = [leaf_hash(leaf) for leaf in leaves]
        self._levels: list[list[bytes]] = [level]
        while len(level) > 1:
            paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                paired.append(level[-1])  # an unpaired last node moves up unchanged
            level = paired
            self._levels.append(level)

    @property
    def size(self) -> int:
        return len(self._levels[0])

    @property
    def root(self) -> bytes:
        """The tree head; RFC 6962 defines the empty tree's as SHA-256 of the empty string."""
        if not self._levels[0]:
            return hashlib.sha256(b"").digest()
        return self._levels[-1][0]

    def proof(self, index: int) -> tuple[bytes, ...]:
        """The audit path of leaf ``index``: sibling hashes from the leaf's level upwards."""
        if not 0 <= index < self.size:
            raise IndexError(f"leaf index {index} outside a tree of {self.size} leaves")
        path: list[bytes] = []
        for level in self._levels[:-1]:
            sibling = index ^ 1
            if sibling < len(level):
                path.append(level[sibling])
            index //= 2
        return tuple(path)


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """True when ``proof`` shows that ``leaf`` (raw bytes) is leaf ``index`` of the tree of ``size`` with ``root``.

    Walks the same levels as `MerkleTree`: at each level a node either has a sibling (one proof
    element consumed) or is the unpaired last node (promoted, nothing consumed). Never raises.

    Memoized (a pure function of its arguments): each member of a group checks her fellows' roster
    entries (SPEC §4 share.1), so a process hosting a group checks each entry g - 1 times, at 17
    hashes each for a roster of 10^5.
    """
    # Memoized only for exactly the types a decoded message holds: lru_cache finds its entries by equality, and
    # 1.0 == 1 or a memoryview equal to bytes would get a cached True the walk refuses (found by a reviewer).
    if type(leaf) is bytes and type(root) is bytes and type(index) is int and type(size) is int \
            and type(proof) is tuple and all(type(step) is bytes for step in proof):
        return _verify_inclusion_memo(leaf, index, size, proof, root)
    return _verify_inclusion(leaf, index, size, proof, root)


@functools.lru_cache(maxsize=4096)
def _verify_inclusion_memo(leaf: bytes, index: int, size: int, proof: tuple[bytes, ...], root: bytes) -> bool:
    return _verify_inclusion(leaf, index, size, proof, root)


def _verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    if not (isinstance(index, int) and isinstance(size, int) and 0 <= index < size):
        return False
    current = leaf_hash(leaf)
    position = 0
    width = size
    while width > 1:
        if index % 2 == 1 or index + 1 < width:
            if position >= len(proof):
                return False
            sibling = proof[position]
            if not isinstance(sibling, bytes) or len(sibling) != HASH_BYTES:
                return False
            position += 1
            current = node_hash(sibling, current) if index % 2 == 1 else node_hash(current, sibling)
        index //= 2
        width = (width + 1) // 2
    return position == len(proof) and current == root
