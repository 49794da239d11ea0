"""The protocol's cryptography (protocol/SPEC.md §8): signatures, sealing layers, onions, records.

Ed25519 (RFC 8032) signs messages; X25519 (RFC 7748) + HKDF-SHA256 (RFC 5869) + ChaCha20-Poly1305
(RFC 8439) seal one message to one recipient ("a layer"), or to several recipients at once so that
opening needs every recipient's secret. Every key is drawn from the injected `RandomSource`, never
from global randomness, so simulations are reproducible from their seed.

Every sealed message is exactly `SEAL_OVERHEAD` bytes longer than its plaintext: equal-size
plaintexts give equal-size ciphertexts at every step of a shuffle, so sizes link nothing.

Libraries: the curve operations (Ed25519, X25519) run on libsodium through PyNaCl, whose Ed25519
verification is about twice as fast as OpenSSL's through `cryptography` (a round verifies about ten
signatures per subject), its signing 1.6x and its X25519 public-key derivation 1.9x; the AEAD stays
on `cryptography`, twice as fast as libsodium's (simulations/bench/bench_crypto.py measures all of
it). Both follow the RFCs bit for bit (deterministic Ed25519 signatures, clamped X25519 scalars):
tests/protocol/test_crypto.py re-derives every construction with `cryptography` alone. libsodium's
verification also rejects small-order keys and R, which SPEC §8 requires.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from collections.abc import Callable, Sequence

import nacl.bindings as sodium
import nacl.exceptions
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from coutil.protocol.node import RandomSource

KEY_BYTES = 32
SIGNATURE_BYTES = 64
TAG_BYTES = 16
#: Ephemeral public key + Poly1305 tag.
SEAL_OVERHEAD = KEY_BYTES + TAG_BYTES
#: Domain separation of signatures (SPEC §7.1) and of the two HKDF uses (SPEC §8.1, §8.2).
SIGNATURE_DOMAIN = b"coutil/v2\x00"
#: Domain of the collector's signature of a transcript (SPEC §8.5): it signs a digest, never a message, and no
#: message's signed bytes start with this prefix, so neither signature can stand for the other.
TRANSCRIPT_DOMAIN = b"coutil/v2 transcript\x00"
SEAL_INFO = b"coutil/v2 seal"
SEAL_ALL_INFO = b"coutil/v2 seal all"
_ZERO_NONCE = bytes(12)


class CryptoError(Exception):
    """A ciphertext does not open, a key is malformed, or a key agreement fails."""


def _check_key_bytes(value: bytes, what: str) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != KEY_BYTES:
        raise CryptoError(f"{what} must be {KEY_BYTES} bytes")
    return bytes(value)


class SigningKey:
    """An Ed25519 signing key (a subject's per-round identity, or the collector's long-term key)."""

    __slots__ = ("_expanded", "public", "seed")

    def __init__(self, seed: bytes) -> None:
        self.seed = _check_key_bytes(seed, "an Ed25519 seed")
        public, self._expanded = sodium.crypto_sign_seed_keypair(self.seed)
        #: The 32-byte public key (the party's identity on the wire).
        self.public: bytes = public

    @classmethod
    def generate(cls, rng: RandomSource) -> SigningKey:
        return cls(rng.bytes(KEY_BYTES))

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        return cls(seed)

    def sign(self, data: bytes) -> bytes:
        signed: bytes = sodium.crypto_sign(data, self._expanded)  # signature || data
        return signed[:SIGNATURE_BYTES]

    def __repr__(self) -> str:  # never show the seed
        return f"SigningKey(public={self.public.hex()})"


def verify(public: bytes, data: bytes, signature: bytes) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``data`` under ``public``.

    Any malformed input (wrong lengths, a public key that is not a curve point) gives False.
    """
    if len(public) != KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        sodium.crypto_sign_open(bytes(signature) + bytes(data), bytes(public))
    except (nacl.exceptions.CryptoError, nacl.exceptions.TypeError, nacl.exceptions.ValueError):
        return False
    return True


def sign_transcript(key: SigningKey, statement: bytes) -> bytes:
    """The collector's signature of a transcript's 32-byte statement (SPEC §8.5), under `TRANSCRIPT_DOMAIN`."""
    if len(statement) != 32:
        raise ValueError("a transcript statement is a 32-byte digest")
    return key.sign(TRANSCRIPT_DOMAIN + statement)


def verify_transcript(public: bytes, statement: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``public``'s `sign_transcript` of ``statement``."""
    return len(statement) == 32 and verify(public, TRANSCRIPT_DOMAIN + statement, signature)


class KxKey:
    """An X25519 key pair (the collector's round key, a member's outer or inner run key)."""

    __slots__ = ("public", "secret")

    def __init__(self, secret: bytes) -> None:
        #: The 32 secret bytes as drawn (X25519 clamps them when used).
        self.secret = _check_key_bytes(secret, "an X25519 secret")
        self.public: bytes = sodium.crypto_scalarmult_base(self.secret)

    @classmethod
    def generate(cls, rng: RandomSource) -> KxKey:
        return cls(rng.bytes(KEY_BYTES))

    @classmethod
    def from_secret(cls, secret: bytes) -> KxKey:
        return cls(secret)

    def exchange(self, peer_public: bytes) -> bytes:
        """X25519 shared secret; CryptoError for a malformed or low-order peer key (all-zero output)."""
        peer = _check_key_bytes(peer_public, "an X25519 public key")
        try:
            shared: bytes = sodium.crypto_scalarmult(self.secret, peer)
        except nacl.exceptions.RuntimeError:  # libsodium refuses an all-zero shared secret
            raise CryptoError("X25519 key agreement failed: low-order peer key (all-zero shared secret)") from None
        return shared

    def __repr__(self) -> str:  # never show the secret
        return f"KxKey(public={self.public.hex()})"


#: X25519 public keys of small order (libsodium's list, with the non-canonical encodings of 0 and 1;
#: compared with the top bit cleared, as X25519 ignores it): any secret gives the all-zero shared secret.
_SMALL_ORDER = frozenset(bytes.fromhex(h) for h in (
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
))


def is_small_order(public: bytes) -> bool:
    """True for an X25519 public key no key agreement can use (SPEC §8: a received key is checked
    before anything is sealed to it, so that a bad key is a REJECT, not a failure later)."""
    if len(public) != KEY_BYTES:
        return True
    return bytes(public[:31]) + bytes([public[31] & 0x7F]) in _SMALL_ORDER


def hkdf_sha256(ikm: bytes, salt: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) with a 32-byte output: one extract and one expand block."""
    prk = hmac.digest(salt, ikm, hashlib.sha256)
    return hmac.digest(prk, info + b"\x01", hashlib.sha256)


def _encrypt(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    # A fresh ephemeral key per message makes every AEAD key single-use, so the zero nonce is safe.
    return ChaCha20Poly1305(key).encrypt(_ZERO_NONCE, plaintext, aad)


def _decrypt(key: bytes, ciphertext: bytes, aad: bytes) -> bytes:
    try:
        return ChaCha20Poly1305(key).decrypt(_ZERO_NONCE, ciphertext, aad)
    except InvalidTag:
        raise CryptoError("ciphertext does not open (wrong key, associated data or tampered)") from None


def seal(recipient_public: bytes, plaintext: bytes, aad: bytes, rng: RandomSource) -> bytes:
    """Seal to one recipient (SPEC §8.1): ``eph_pub || ChaCha20-Poly1305(key, 0, plaintext, aad)``."""
    recipient = _check_key_bytes(recipient_public, "the recipient's X25519 key")
    eph = KxKey.generate(rng)
    key = hkdf_sha256(eph.exchange(recipient), eph.public + recipient, SEAL_INFO)
    return eph.public + _encrypt(key, plaintext, aad)


def open_sealed(kx_key: KxKey, sealed: bytes, aad: bytes) -> bytes:
    """Open a `seal` ciphertext with the recipient's key; CryptoError if it does not open."""
    if len(sealed) < SEAL_OVERHEAD:
        raise CryptoError("sealed message too short")
    eph_public = bytes(sealed[:KEY_BYTES])
    key = hkdf_sha256(kx_key.exchange(eph_public), eph_public + kx_key.public, SEAL_INFO)
    return _decrypt(key, bytes(sealed[KEY_BYTES:]), aad)


def _seal_all_key(shared_secrets: Sequence[bytes], eph_public: bytes, recipients: Sequence[bytes]) -> bytes:
    return hkdf_sha256(b"".join(shared_secrets), eph_public + b"".join(recipients), SEAL_ALL_INFO)


def seal_to_all(publics: Sequence[bytes], plaintext: bytes, aad: bytes, rng: RandomSource) -> bytes:
    """Seal so that opening needs *every* recipient's secret (SPEC §8.2 inner sealing).

    One ephemeral key; the HKDF input keying material is the concatenation of the X25519 shared
    secrets with every recipient in order, the salt ``eph_pub || R_1 || ... || R_n``.
    """
    if not publics:
        raise CryptoError("seal_to_all needs at least one recipient")
    recipients = [_check_key_bytes(p, "a recipient's X25519 key") for p in publics]
    eph = KxKey.generate(rng)
    key = _seal_all_key([eph.exchange(r) for r in recipients], eph.public, recipients)
    return eph.public + _encrypt(key, plaintext, aad)


def open_with_all(secrets: Sequence[bytes | KxKey], sealed: bytes, aad: bytes) -> bytes:
    """Open a `seal_to_all` ciphertext with every recipient's secret (or key), in the sealing order.

    A caller opening many items with the same recipients passes `KxKey`s, built once.
    """
    if not secrets:
        raise CryptoError("open_with_all needs at least one secret")
    if len(sealed) < SEAL_OVERHEAD:
        raise CryptoError("sealed message too short")
    keys = [s if isinstance(s, KxKey) else KxKey.from_secret(s) for s in secrets]
    eph_public = bytes(sealed[:KEY_BYTES])
    key = _seal_all_key([k.exchange(eph_public) for k in keys], eph_public, [k.public for k in keys])
    return _decrypt(key, bytes(sealed[KEY_BYTES:]), aad)


def build_onion(
    inner: bytes, outer_publics: Sequence[bytes], aad_for_step: Callable[[int], bytes], rng: RandomSource
) -> bytes:
    """Wrap ``inner`` in one layer per mixer: mixer g innermost, mixer 1 outermost (SPEC §8.2).

    ``aad_for_step(j)`` is the associated data of mixer j's layer (j = 1..g). Layers are sealed
    from j = g down to 1, each drawing its ephemeral key from ``rng`` in that order.
    """
    onion = inner
    for j in range(len(outer_publics), 0, -1):
        onion = seal(outer_publics[j - 1], onion, aad_for_step(j), rng)
    return onion


def peel(kx_key: KxKey, item: bytes, aad: bytes) -> bytes:
    """Remove one mixer's layer (the mixer's outer key and its step's associated data)."""
    return open_sealed(kx_key, item, aad)


def encode_record(values: Sequence[float]) -> bytes:
    """A confidential record as consecutive little-endian float64 (SPEC §8.2): 8 bytes per value.

    All records of a round have the same number of values, hence the same length, so no padding is
    needed for the ciphertexts to be equal-sized. Non-finite values are a caller bug (ValueError).
    """
    floats = [float(v) for v in values]
    if not all(math.isfinite(v) for v in floats):
        raise ValueError("a confidential value is not finite")
    return struct.pack(f"<{len(floats)}d", *floats)


def decode_record(data: bytes, width: int) -> tuple[float, ...]:
    """Inverse of `encode_record`; ValueError unless exactly ``width`` finite values."""
    if len(data) != 8 * width:
        raise ValueError(f"record of {len(data)} bytes, expected {8 * width}")
    values = struct.unpack(f"<{width}d", data)
    if not all(math.isfinite(v) for v in values):
        raise ValueError("record holds a non-finite value")
    return values
