"""msgpack decoding within bounds (SPEC §7.1): what a message may make its receiver build.

A message is decoded before its signature can be checked (the sender's key is inside the payload), so
anyone who can publish on a topic a node reads chooses what it builds. A decoder builds an object of some
30-100 bytes per array entry whatever the entry's size on the wire (a 2-byte nested array, a 3-byte
integer): 60 MiB of them cost 0.9-1.7 GB before REJECT. Three bounds, each found by an attacker or a reviewer:

- an **entry budget**: the entries of all arrays of a value together (counted by msgpack's ``list_hook``
  as each array is finished);
- the **longest array** msgpack may start (``max_array_len``): arrays still being built are not yet
  counted, one per nesting level;
- for a value of more than `WALK_FROM` bytes, a **walk** of its headers before anything is built
  (`msgpack.Unpacker`: array headers read, everything else skipped) that counts every array's entries when
  it starts and its nesting depth (at most `MAX_NESTING`); below that size what a value builds is bounded by
  its bytes.

Only what `coutil.protocol.codec` needs; every failure is a `RemoteProtocolError` (``oversized``,
``not_msgpack``).
"""

from __future__ import annotations

from typing import Any

import msgpack

from coutil.errors import RemoteProtocolError

#: Arrays nest at most this deep in a value (an honest payload nests 4 deep: the payload, an assign's
#: fellows, one fellow, her inclusion proof; the announce's parameters, manifest and one of its pairs).
MAX_NESTING = 8
#: Values from this many bytes on are walked before they are decoded.
WALK_FROM = 1 << 16
#: First bytes of an array header (fixarray, array 16, array 32) and of a map header.
_ARRAYS = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])
_MAPS = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])


class _ForbiddenTypeError(Exception):
    pass


def _no_ext(code: int, data: bytes) -> object:
    raise _ForbiddenTypeError(f"extension type {code}")


def _no_maps(pairs: object) -> object:
    raise _ForbiddenTypeError("map")


class _OverBudgetError(Exception):
    pass


class _EntryBudget:
    """msgpack's ``list_hook``: counts the entries of every finished array, stops the decoding past the budget."""

    __slots__ = ("left",)

    def __init__(self, entries: int) -> None:
        self.left = entries

    def __call__(self, array: tuple[object, ...]) -> tuple[object, ...]:
        self.left -= len(array)
        if self.left < 0:
            raise _OverBudgetError
        return array


def _walk(data: bytes, what: str, entries: int, longest: int, max_str: int, max_bin: int) -> None:
    """Every array header of ``data`` read, its entries counted against ``entries`` and its depth against
    `MAX_NESTING`, before anything is built; maps refused (they are not part of the format)."""
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(data), 1), max_str_len=max_str, max_bin_len=max_bin,
                                max_array_len=longest, max_map_len=0, max_ext_len=max_bin)
    unpacker.feed(data)
    left = entries
    pending = [1]  # values still to read at each nesting level
    while pending:
        if not pending[-1]:
            pending.pop()
            continue
        pending[-1] -= 1
        first = data[unpacker.tell()]
        if first in _ARRAYS:
            size = unpacker.read_array_header()
            left -= size
            if left < 0:
                raise _OverBudgetError
            if len(pending) > MAX_NESTING:
                raise RemoteProtocolError("oversized", f"{what}: arrays nested deeper than {MAX_NESTING}")
            pending.append(size)
        elif first in _MAPS:
            raise _ForbiddenTypeError("map")
        else:
            unpacker.skip()


def unpack(data: bytes, what: str, *, entries: int, longest: int, max_str: int, max_bin: int) -> Any:
    """The one msgpack value of ``data`` (tuples for arrays), within the bounds; `RemoteProtocolError` else."""
    try:
        if len(data) >= WALK_FROM:
            _walk(data, what, entries, longest, max_str, max_bin)
        return msgpack.unpackb(
            data,
            raw=False,
            use_list=False,
            strict_map_key=True,
            ext_hook=_no_ext,
            object_pairs_hook=_no_maps,  # maps and extension types are not part of the format
            list_hook=_EntryBudget(entries),
            max_str_len=max_str,
            max_bin_len=max_bin,
            max_array_len=longest,
        )
    except RemoteProtocolError:
        raise
    except _ForbiddenTypeError as exc:
        raise RemoteProtocolError("not_msgpack", f"{what}: {exc} not allowed") from None
    except _OverBudgetError:
        raise RemoteProtocolError("oversized", f"{what}: arrays of more than {entries} entries in all") from None
    except ValueError as exc:
        if "exceeds max_" in str(exc):
            raise RemoteProtocolError("oversized", f"{what}: {exc}") from None
        raise RemoteProtocolError("not_msgpack", f"{what}: {exc}") from None
    except Exception as exc:  # msgpack may raise other errors on hostile input (deep nesting, bad UTF-8, truncation)
        raise RemoteProtocolError("not_msgpack", f"{what}: {type(exc).__name__}") from None


#: Bytes of the length of a str (str 8, 16, 32) by its first byte.
_STR_LENGTH = {0xD9: 1, 0xDA: 2, 0xDB: 4}
#: Bytes of the length of a bin (bin 8, 16, 32) by its first byte.
_BIN_LENGTH = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_ARRAY_HEADER_BYTES = {**{b: 1 for b in range(0x90, 0xA0)}, 0xDC: 3, 0xDD: 5}


def _array_header(data: bytes) -> tuple[int, int] | None:
    """(entries, header bytes) of the array ``data`` starts with; None if it starts with none."""
    width = _ARRAY_HEADER_BYTES.get(data[0]) if data else None
    if width is None or len(data) < width:
        return None
    return (data[0] & 0x0F if width == 1 else int.from_bytes(data[1:width], "big")), width


def array_size(data: bytes) -> int | None:
    """The number of entries of the array ``data`` starts with, from its header; None if it starts with none."""
    header = _array_header(data)
    return None if header is None else header[0]


def first_str(data: bytes) -> bytes | None:
    """The raw bytes of the str that is the first entry of the array ``data`` starts with (a payload's tag),
    read from the headers without decoding anything; None when it does not start with an array and a str."""
    header = _array_header(data)
    entry = None if header is None else _str_or_bin(data, header[1], _STR_LENGTH)
    return None if entry is None else bytes(data[entry[0]:entry[0] + entry[1]])


def _str_or_bin(data: bytes, start: int, lengths: dict[int, int]) -> tuple[int, int] | None:
    """(offset, size) of the raw bytes of the str (``lengths`` `_STR_LENGTH`, fixstr too) or bin (`_BIN_LENGTH`)
    whose header is at ``start``; None if there is another type there, or it runs past the end."""
    if start >= len(data):
        return None
    first = data[start]
    if lengths is _STR_LENGTH and 0xA0 <= first <= 0xBF:
        size, start = first & 0x1F, start + 1
    elif first in lengths:
        width = lengths[first]
        size, start = int.from_bytes(data[start + 1:start + 1 + width], "big"), start + 1 + width
    else:
        return None
    return None if start + size > len(data) else (start, size)



def third_bin(data: bytes) -> bytes | None:
    """The raw bytes of the third entry of the array ``data`` starts with (a payload's sender) when its first
    entry is a str (the tag) and its second and third are bins (round id, sender), read from the headers;
    None otherwise. Nothing after the third entry is looked at: the caller must decode the whole before
    acting on it."""
    header = _array_header(data)
    if header is None or header[0] < 3:
        return None
    start, size = header[1], 0
    for lengths in (_STR_LENGTH, _BIN_LENGTH, _BIN_LENGTH):
        entry = _str_or_bin(data, start + size, lengths)
        if entry is None:
            return None
        start, size = entry
    return bytes(data[start:start + size])
