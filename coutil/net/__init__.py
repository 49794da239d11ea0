"""Transports that drive the sans-IO protocol nodes: the in-memory bus (virtual time) and MQTT."""

from __future__ import annotations
