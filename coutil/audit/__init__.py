"""Permuted-privacy audit and attacks (Domingo-Ferrer & Muralidhar, *New directions in anonymization*).

- `coutil.audit.ranks`: the rank index of a release (star intervals, L-infinity nearest neighbours in
  rank space, windows S^j(d) and their variances);
- `coutil.audit.permutation`: reverse mapping (Algorithm 1), permutation distance (Algorithm 2) and
  its vector form with a record mapping f;
- `coutil.audit.diversity`: the diversity of the windows by variance, distinct or entropy
  l-diversity, or t-closeness;
- `coutil.audit.privacy_check`: does (d, v)- or (d, v, f)-permuted privacy hold for a record, for the
  data set, and on which attributes does it fail;
- `coutil.audit.subject`: a subject's audit of a release, the one function of her in-round verdict
  and of ``coutil audit --record-values`` (release digest, random records, p-value, verdict);
- `coutil.audit.report`: the documented result objects of ``coutil audit`` (data protector, subject);
- `coutil.audit.intruder`: the maximum-knowledge intruder (Section 5);
- `coutil.audit.linkage`: classical record-linkage attacks for comparison;
- `coutil.audit.plots`: the figures of the intruder's verification;
- `coutil.audit.inputs`: reading the original and release CSV files for the commands.

Submodules are imported on demand (the CLI stays fast to start), so nothing is re-exported here.
"""
