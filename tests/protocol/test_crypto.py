"""The protocol's cryptography against published RFC vectors and an independent re-derivation.

Oracles: RFC 8032 §7.1 (Ed25519 test 1), RFC 7748 §6.1 (X25519), RFC 5869 A.1 (HKDF-SHA256), and
the `cryptography` package's own Ed25519/HKDF/X25519/ChaCha20-Poly1305 (OpenSSL), used step by step as in
SPEC §8.1: coutil's curve operations run on libsodium (PyNaCl), so these are two implementations.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st

from coutil.protocol import crypto
from coutil.protocol.node import SeededRandom


class FixedRandom:
    """A random source that returns scripted bytes (to reproduce a seal with a chosen ephemeral key)."""

    def __init__(self, *chunks: bytes) -> None:
        self._data = b"".join(chunks)

    def bytes(self, n: int) -> bytes:
        out, self._data = self._data[:n], self._data[n:]
        assert len(out) == n, "script exhausted"
        return out

    def below(self, bound: int) -> int:
        raise AssertionError("not used")


def test_ed25519_rfc8032_test_1() -> None:
    key = crypto.SigningKey.from_seed(bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
    assert key.public.hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    signature = key.sign(b"")
    assert signature.hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert crypto.verify(key.public, b"", signature)
    assert not crypto.verify(key.public, b"x", signature)
    assert not crypto.verify(key.public, b"", signature[:-1] + bytes([signature[-1] ^ 1]))
    assert not crypto.verify(key.public[:31], b"", signature)
    assert not crypto.verify(bytes(32), b"", signature)


def test_x25519_rfc7748() -> None:
    alice = crypto.KxKey.from_secret(bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"))
    bob = crypto.KxKey.from_secret(bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"))
    assert alice.public.hex() == "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    assert bob.public.hex() == "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
    shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    assert alice.exchange(bob.public).hex() == shared == bob.exchange(alice.public).hex()


@settings(max_examples=50, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), data=st.binary(max_size=300), flip=st.integers(0, 63))
def test_ed25519_equals_openssl_both_ways(seed: bytes, data: bytes, flip: int) -> None:
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    theirs = Ed25519PrivateKey.from_private_bytes(seed)
    ours = crypto.SigningKey.from_seed(seed)
    assert ours.public == theirs.public_key().public_bytes(*raw)
    signature = ours.sign(data)
    assert signature == theirs.sign(data)  # deterministic signatures: the same bytes
    assert crypto.verify(ours.public, data, signature)
    forged = bytearray(signature)
    forged[flip] ^= 1
    assert not crypto.verify(ours.public, data, bytes(forged))
    assert not crypto.verify(ours.public, data + b"x", signature)


@settings(max_examples=50, deadline=None)
@given(mine=st.binary(min_size=32, max_size=32), theirs=st.binary(min_size=32, max_size=32))
def test_x25519_equals_openssl(mine: bytes, theirs: bytes) -> None:
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    peer = X25519PrivateKey.from_private_bytes(theirs).public_key()
    key = crypto.KxKey.from_secret(mine)
    assert key.public == X25519PrivateKey.from_private_bytes(mine).public_key().public_bytes(*raw)
    assert key.exchange(peer.public_bytes(*raw)) == X25519PrivateKey.from_private_bytes(mine).exchange(peer)


def test_x25519_low_order_point_is_a_crypto_error() -> None:
    key = crypto.KxKey.generate(SeededRandom(1))
    with pytest.raises(crypto.CryptoError):
        key.exchange(bytes(32))
    with pytest.raises(crypto.CryptoError):
        crypto.KxKey.from_secret(b"short")


def test_hkdf_rfc5869_case_1() -> None:
    okm = crypto.hkdf_sha256(bytes([0x0B] * 22), bytes(range(13)), bytes(range(0xF0, 0xFA)))
    # The first 32 of the RFC's 42 output bytes (T(1)).
    assert okm.hex() == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=96), st.binary(max_size=96), st.binary(max_size=32))
def test_hkdf_matches_library(ikm: bytes, salt: bytes, info: bytes) -> None:
    expected = HKDF(hashes.SHA256(), 32, salt, info).derive(ikm)
    assert crypto.hkdf_sha256(ikm, salt, info) == expected


def test_seal_follows_spec_8_1_step_by_step() -> None:
    recipient = crypto.KxKey.generate(SeededRandom("recipient"))
    eph_secret = bytes(range(32))
    sealed = crypto.seal(recipient.public, b"hello", b"aad", FixedRandom(eph_secret))
    eph = X25519PrivateKey.from_private_bytes(eph_secret)
    eph_pub = crypto.KxKey.from_secret(eph_secret).public
    assert sealed[:32] == eph_pub
    shared = eph.exchange(X25519PublicKey.from_public_bytes(recipient.public))
    key = HKDF(hashes.SHA256(), 32, eph_pub + recipient.public, b"coutil/v2 seal").derive(shared)
    assert ChaCha20Poly1305(key).decrypt(bytes(12), sealed[32:], b"aad") == b"hello"
    assert len(sealed) == 5 + crypto.SEAL_OVERHEAD
    assert crypto.open_sealed(recipient, sealed, b"aad") == b"hello"


def test_open_fails_on_wrong_key_aad_or_tampering() -> None:
    rng = SeededRandom(7)
    recipient, other = crypto.KxKey.generate(rng), crypto.KxKey.generate(rng)
    sealed = crypto.seal(recipient.public, b"secret record", b"aad", rng)
    with pytest.raises(crypto.CryptoError):
        crypto.open_sealed(other, sealed, b"aad")
    with pytest.raises(crypto.CryptoError):
        crypto.open_sealed(recipient, sealed, b"other aad")
    for position in (0, 31, 32, len(sealed) - 1):
        tampered = bytearray(sealed)
        tampered[position] ^= 0x80
        with pytest.raises(crypto.CryptoError):
            crypto.open_sealed(recipient, bytes(tampered), b"aad")
    with pytest.raises(crypto.CryptoError):
        crypto.open_sealed(recipient, sealed[:47], b"aad")


def test_seal_to_all_needs_every_secret_in_order() -> None:
    rng = SeededRandom(11)
    keys = [crypto.KxKey.generate(rng) for _ in range(4)]
    publics = [k.public for k in keys]
    sealed = crypto.seal_to_all(publics, b"inner", b"ad", rng)
    assert len(sealed) == 5 + crypto.SEAL_OVERHEAD
    secrets = [k.secret for k in keys]
    assert crypto.open_with_all(secrets, sealed, b"ad") == b"inner"
    with pytest.raises(crypto.CryptoError):
        crypto.open_with_all(secrets[:3], sealed, b"ad")
    with pytest.raises(crypto.CryptoError):
        crypto.open_with_all(secrets[::-1], sealed, b"ad")
    wrong = crypto.KxKey.generate(rng).secret
    with pytest.raises(crypto.CryptoError):
        crypto.open_with_all([*secrets[:3], wrong], sealed, b"ad")
    # A single recipient cannot open it with the one-recipient construction either (domain separation).
    single = crypto.seal_to_all(publics[:1], b"inner", b"ad", rng)
    with pytest.raises(crypto.CryptoError):
        crypto.open_sealed(keys[0], single, b"ad")


def test_onion_peels_in_mixing_order_with_step_binding() -> None:
    rng = SeededRandom(3)
    mixers = [crypto.KxKey.generate(rng) for _ in range(5)]

    def aad(step: int) -> bytes:
        return b"step" + step.to_bytes(4, "big")

    onion = crypto.build_onion(b"core", [m.public for m in mixers], aad, rng)
    assert len(onion) == 4 + 5 * crypto.SEAL_OVERHEAD
    with pytest.raises(crypto.CryptoError):
        crypto.peel(mixers[1], onion, aad(1))  # mixer 2 cannot take the outermost layer
    with pytest.raises(crypto.CryptoError):
        crypto.peel(mixers[0], onion, aad(2))  # layer bound to step 1
    item = onion
    for step, mixer in enumerate(mixers, start=1):
        item = crypto.peel(mixer, item, aad(step))
        assert len(item) == 4 + (5 - step) * crypto.SEAL_OVERHEAD
    assert item == b"core"


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=1, max_value=6), st.integers(min_value=0, max_value=2**32))
def test_equal_size_plaintexts_give_equal_size_onions(g: int, seed: int) -> None:
    rng = SeededRandom(seed)
    mixers = [crypto.KxKey.generate(rng).public for _ in range(g)]
    sizes = {len(crypto.build_onion(rng.bytes(40), mixers, lambda j: b"", rng)) for _ in range(3)}
    assert sizes == {40 + g * crypto.SEAL_OVERHEAD}


def test_keys_come_only_from_the_injected_source() -> None:
    a, b = SeededRandom("same"), SeededRandom("same")
    assert crypto.SigningKey.generate(a).public == crypto.SigningKey.generate(b).public
    assert crypto.KxKey.generate(a).secret == crypto.KxKey.generate(b).secret
    recipient = crypto.KxKey.generate(SeededRandom(0)).public
    assert crypto.seal(recipient, b"x", b"", a) == crypto.seal(recipient, b"x", b"", b)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=8))
def test_record_round_trip_and_fixed_length(values: list[float]) -> None:
    data = crypto.encode_record(values)
    assert len(data) == 8 * len(values)
    assert crypto.decode_record(data, len(values)) == tuple(values)


def test_record_rejects_wrong_width_and_non_finite() -> None:
    assert crypto.encode_record([1.5, -2.0]).hex() == "000000000000f83f00000000000000c0"
    with pytest.raises(ValueError):
        crypto.decode_record(bytes(16), 3)
    with pytest.raises(ValueError):
        crypto.decode_record(bytes.fromhex("000000000000f87f"), 1)  # NaN
    with pytest.raises(ValueError):
        crypto.encode_record([float("inf")])


def test_reprs_hide_secrets() -> None:
    rng = SeededRandom(5)
    signing, kx = crypto.SigningKey.generate(rng), crypto.KxKey.generate(rng)
    assert signing.seed.hex() not in repr(signing) and kx.secret.hex() not in repr(kx)
