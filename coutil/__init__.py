"""coutil: co-utile collaborative anonymization.

Subjects form k-anonymous groups peer to peer (MDAV on their quasi-identifiers), share their
confidential attributes at group level through an accountable shuffle, and every subject audits the
release with the (d,v,f)-permuted privacy check of Domingo-Ferrer & Muralidhar.
"""

from __future__ import annotations

__version__ = "0.1.0"
