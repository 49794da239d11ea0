"""The co-utile collaborative k-anonymity protocol: sans-IO state machines, messages, crypto.

Nothing in this package performs I/O, reads the clock or uses global randomness: nodes take
messages and ``now`` and return what to send; randomness comes from an injected `RandomSource`.
"""

from __future__ import annotations
