"""Statistical disclosure control: data model, MDAV, masking methods, information loss, privacy checks.

The Python API, module by module (every function raises `coutil.errors.InputError` on bad input):

- `coutil.sdc.dataset`: `load_csv(path, columns, ordinal)` and `as_dataset(data)` give a `Dataset`
  (an ``(n, m)`` float matrix with attribute names) from a CSV file, an array or a pandas DataFrame.
  pandas is optional: it is never imported, DataFrames are recognised by their interface.
  *Ordinal categorical attributes* are stored as the 1-based rank of their category: declare them with
  ``ordinal={"edu": ("primary", "secondary", "tertiary")}`` (CLI: ``--ordinal
  'edu=primary<secondary<tertiary'``) or pass an ordered ``pd.Categorical``; methods that need an order
  (MDAV, rank swapping, t-closeness) use the ranks, and outputs write the nearest category back.
- `coutil.sdc.mdav`: `mdav(values, k)`, exact classic MDAV (`mdav_partitioned` for very large n,
  `mdav_with_progress` for a progress display).
- `coutil.sdc.partition`: median splits of the records into slices of neighbours: `split_in_blocks(z,
  max_size)` (the blocks of `mdav_partitioned`) and `split_in_parts(values, parts)` (N balanced slices).
- `coutil.sdc.masking`: rank swapping, additive and multiplicative noise, synthetic data, local
  anonymization; each takes a ``seed`` and is reproducible.
- `coutil.sdc.infoloss`: `information_loss(original, masked)`: SSE/SST, IL1s (a mean), preservation of
  means, variances and correlations, per attribute and overall.
- `coutil.sdc.privacy`: `check_privacy(qi, names, confidential)`: k-anonymity, l-diversity (distinct
  and entropy), t-closeness; QIs and confidential attributes may be text (compared by equality).
  ``per_class=True`` (or `class_reports`) adds every class's size, distinct l, entropy l and t.

Every ``values`` argument accepts an array, a `Dataset` or a DataFrame.
"""

from __future__ import annotations
