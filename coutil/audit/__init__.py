"""Permuted-privacy audit and attacks (Domingo-Ferrer & Muralidhar, *New directions in anonymization*).

- `coutil.audit.ranks`: the rank index of a release (star intervals, L-infinity nearest neighbours in
  rank space, window variances);
- `coutil.audit.permutation`: reverse mapping (Algorithm 1), permutation distance (Algorithm 2) and
  its vector form with a record mapping f;
- `coutil.audit.intruder`: the maximum-knowledge intruder (Section 5);
- `coutil.audit.linkage`: classical record-linkage attacks for comparison;
- `coutil.audit.plots`: the figures of the intruder's verification.

Submodules are imported on demand (the CLI stays fast to start), so nothing is re-exported here.
"""
