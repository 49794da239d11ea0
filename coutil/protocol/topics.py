"""MQTT topic grammar (protocol/SPEC.md, section "Topics").

Every publisher writes only under its own prefix, so a broker ACL can confine each subject to
``coutil/v2/+/s/<her sid>/#`` (the MQTT client id of a subject is her sid):

- ``coutil/v2/announce``                      collector, retained: the current round's Announce
- ``coutil/v2/<round>/c/roster``              collector, retained: Roster
- ``coutil/v2/<round>/c/release``             collector, retained: Release
- ``coutil/v2/<round>/c/to/<sid>``            collector -> one subject: acks, Assign, re-sends
- ``coutil/v2/<round>/c/group/<g>``           collector -> group g: ShuffleStart, RevealOpen, GroupDone
- ``coutil/v2/<round>/s/<sid>/up``            subject -> collector: Register, Verdict, Fetch
- ``coutil/v2/<round>/s/<sid>/group``         subject -> her group and the collector: run_keys, final batch,
  vote, blame
- ``coutil/v2/<round>/s/<sid>/to/<rsid>``     subject -> one member (and the collector): a submission to
  the first mixer, a batch to the next mixer (protocol v2: O(k) bytes per member instead of O(k^2))

``<round>`` is the hex of the 16-byte round id; ``<sid>`` the hex of the first 16 bytes of the
subject's per-round Ed25519 public key.
"""

from __future__ import annotations

PREFIX = "coutil/v2"
ANNOUNCE = f"{PREFIX}/announce"


#: Topic suffixes of the collector's bulletins (announce, roster, release): retained, read by everyone.
BULLETIN_SUFFIXES = ("/announce", "/c/roster", "/c/release")


def is_bulletin(topic: str) -> bool:
    """Whether ``topic`` carries a bulletin (counted apart from the protocol traffic)."""
    return topic.endswith(BULLETIN_SUFFIXES)


def sid_of(subject_key: bytes) -> str:
    return subject_key[:16].hex()


def round_hex(round_id: bytes) -> str:
    return round_id.hex()


def roster(round_id: bytes) -> str:
    return f"{PREFIX}/{round_hex(round_id)}/c/roster"


def release(round_id: bytes) -> str:
    return f"{PREFIX}/{round_hex(round_id)}/c/release"


#: What marks a subject's inbox topic (``coutil/v2/<round>/c/to/<sid>``).
INBOX_MARK = "/c/to/"


def inbox(round_id: bytes, subject_key: bytes) -> str:
    return f"{PREFIX}/{round_hex(round_id)}{INBOX_MARK}{sid_of(subject_key)}"


def group_control(round_id: bytes, group: int) -> str:
    return f"{PREFIX}/{round_hex(round_id)}/c/group/{group}"


def subject_up(round_id: bytes, subject_key: bytes) -> str:
    return f"{PREFIX}/{round_hex(round_id)}/s/{sid_of(subject_key)}/up"


def subject_group(round_id: bytes, subject_key: bytes) -> str:
    return f"{PREFIX}/{round_hex(round_id)}/s/{sid_of(subject_key)}/group"


def is_subject_group(topic: str) -> bool:
    """Whether ``topic`` is a subject's group topic (``coutil/v2/<round>/s/<sid>/group``), where an
    empty payload is her clearing of her retained run_keys (SPEC §5), not a message."""
    parts = topic.split("/")
    return len(parts) == 6 and topic.startswith(PREFIX + "/") and parts[3] == "s" and parts[5] == "group"


def subject_to(round_id: bytes, sender_key: bytes, receiver_key: bytes) -> str:
    """A member's message meant for one fellow member (the collector reads it too)."""
    return f"{PREFIX}/{round_hex(round_id)}/s/{sid_of(sender_key)}/to/{sid_of(receiver_key)}"


def addressed_to(round_id: bytes, sender_key: bytes, topic: str) -> str | None:
    """The sid ``topic`` addresses when it is the sender's topic towards one member (`subject_to`), else None."""
    towards = f"{PREFIX}/{round_hex(round_id)}/s/{sid_of(sender_key)}/to/"
    return topic[len(towards):] if topic.startswith(towards) else None


def to_subject(round_id: bytes, receiver_key: bytes) -> str:
    """The filter a subject subscribes to for the member messages meant for her alone."""
    return f"{PREFIX}/{round_hex(round_id)}/s/+/to/{sid_of(receiver_key)}"


def all_subject_to(round_id: bytes) -> str:
    return f"{PREFIX}/{round_hex(round_id)}/s/+/to/+"


def all_subject_up(round_id: bytes) -> str:
    return f"{PREFIX}/{round_hex(round_id)}/s/+/up"


def all_subject_group(round_id: bytes) -> str:
    return f"{PREFIX}/{round_hex(round_id)}/s/+/group"


def covering_filter(topic_filter: str) -> str:
    """A filter covering ``topic_filter`` and its siblings: one per round and kind of topic.

    ``coutil/v2/<round>/c/...`` -> ``coutil/v2/<round>/c/#``, ``coutil/v2/<round>/s/<sid>/<kind>``
    -> ``coutil/v2/<round>/s/+/<kind>`` and ``.../s/<sid>/to/<rsid>`` -> ``.../s/+/to/+``; anything
    else is its own cover. A connection hosting many subjects subscribes to these covers and routes
    locally (`coutil.net.connection`), for brokers whose cost per message grows with the number of
    subscriptions.
    """
    parts = topic_filter.split("/")
    if len(parts) < 5 or f"{parts[0]}/{parts[1]}" != PREFIX:
        return topic_filter
    if parts[3] == "c":
        return f"{PREFIX}/{parts[2]}/c/#"
    if parts[3] == "s" and len(parts) == 6:
        return f"{PREFIX}/{parts[2]}/s/+/{parts[5]}"
    if parts[3] == "s" and len(parts) == 7 and parts[5] == "to":
        return f"{PREFIX}/{parts[2]}/s/+/to/+"
    return topic_filter


def matches(topic_filter: str, topic: str) -> bool:
    """MQTT topic-filter matching with ``+`` and ``#`` wildcards."""
    f_parts = topic_filter.split("/")
    t_parts = topic.split("/")
    for i, part in enumerate(f_parts):
        if part == "#":
            return True
        if i >= len(t_parts):
            return False
        if part != "+" and part != t_parts[i]:
            return False
    return len(f_parts) == len(t_parts)
