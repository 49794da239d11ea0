"""Microbenchmark of the protocol's curve operations: libsodium (PyNaCl, what coutil uses) beside
OpenSSL (`cryptography`, what it used before), and of the AEAD on both.

Reproduce with (from the repository root, venv active)::

    python simulations/bench/bench_crypto.py            # about 10 s
    python simulations/bench/bench_crypto.py --number 20000

Each operation runs ``--number`` times on one core (best of three repeats), on a 300-byte message
(about a protocol message) and a 256-byte AEAD plaintext. The coutil column calls the functions the
protocol calls (`coutil.protocol.crypto`); the OpenSSL column calls `cryptography`'s equivalents with
keys already parsed, as a caller keeping parsed keys would. A table (microseconds per operation and
the OpenSSL/coutil ratio measured in this run) goes to stdout, JSON to
simulations/bench/results/bench_crypto.json. Why it matters: a round signs and verifies about ten
messages and does about twenty X25519 exchanges per subject (README, "Benchmarks").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import timeit
from collections.abc import Callable
from pathlib import Path

import nacl.bindings as sodium
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from coutil.protocol import crypto

RESULTS = Path(__file__).resolve().parent / "results" / "bench_crypto.json"
RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


def _time(operation: Callable[[], object], number: int) -> float:
    """Microseconds per call, best of three repeats."""
    return min(timeit.repeat(operation, number=number, repeat=3)) / number * 1e6


def measure(number: int) -> list[dict[str, object]]:
    message = os.urandom(300)
    seed, peer_seed, aead_key, plaintext = os.urandom(32), os.urandom(32), os.urandom(32), os.urandom(256)
    ours = crypto.SigningKey.from_seed(seed)
    theirs = Ed25519PrivateKey.from_private_bytes(seed)
    their_public = theirs.public_key()
    signature = ours.sign(message)
    kx = crypto.KxKey.from_secret(os.urandom(32))
    their_kx = X25519PrivateKey.from_private_bytes(kx.secret)
    peer = X25519PrivateKey.from_private_bytes(peer_seed).public_key()
    peer_bytes = peer.public_bytes(*RAW)
    aad = b"coutil/v2 bench"
    nonce = bytes(12)
    sealed = ChaCha20Poly1305(aead_key).encrypt(nonce, plaintext, aad)
    rows = [
        ("Ed25519 sign", lambda: ours.sign(message), lambda: theirs.sign(message)),
        ("Ed25519 verify", lambda: crypto.verify(ours.public, message, signature),
         lambda: their_public.verify(signature, message)),
        ("X25519 key from secret", lambda: crypto.KxKey.from_secret(seed),
         lambda: X25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(*RAW)),
        ("X25519 exchange", lambda: kx.exchange(peer_bytes),
         lambda: their_kx.exchange(X25519PublicKey.from_public_bytes(peer_bytes))),
        ("ChaCha20-Poly1305 seal 256 B (cryptography) / libsodium",
         lambda: ChaCha20Poly1305(aead_key).encrypt(nonce, plaintext, aad),
         lambda: sodium.crypto_aead_chacha20poly1305_ietf_encrypt(plaintext, aad, nonce, aead_key)),
        ("ChaCha20-Poly1305 open 256 B (cryptography) / libsodium",
         lambda: ChaCha20Poly1305(aead_key).decrypt(nonce, sealed, aad),
         lambda: sodium.crypto_aead_chacha20poly1305_ietf_decrypt(sealed, aad, nonce, aead_key)),
    ]
    results: list[dict[str, object]] = []
    for name, used, other in rows:
        used_us, other_us = _time(used, number), _time(other, number)
        results.append({"operation": name, "coutil_us": round(used_us, 2), "other_us": round(other_us, 2),
                        "other_over_coutil": round(other_us / used_us, 2)})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5000, help="calls per timing")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = measure(args.number)
    print(f"{'operation':<58} {'coutil us':>10} {'other us':>10} {'other/coutil':>13}")
    for row in results:
        print(f"{row['operation']:<58} {row['coutil_us']:>10} {row['other_us']:>10} {row['other_over_coutil']:>12}x")
    print("other: OpenSSL through `cryptography` for the curve operations; libsodium for the AEAD rows")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_crypto", "number": args.number, "results": results,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
