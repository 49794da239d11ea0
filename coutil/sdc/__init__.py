"""Statistical disclosure control: data model, MDAV, masking methods, information loss, privacy checks."""

from __future__ import annotations
