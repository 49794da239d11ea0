"""Co-utility experiments: collaborative vs centralized vs local anonymization, and the payoff of every deviation.

- `config`: study files (a grid of cells, the baselines, subject types and their weights);
- `strategies`: subject (and collector) strategies by name: the registry the deviation library plugs into;
- `driver`: the collaborative round in memory with per-subject plans, CPU timing and ground truth;
- `measures`: utility, per-subject risk (collector, intruder, colluding group members), confidence intervals;
- `cells`: one cell: the round and the baselines on the same records, measured per subject;
- `payoffs`: payoff table and the self-enforcement check;
- `permutation`: paper 002's Figures 2-3 and Table 7;
- `runner`: running a study in process or on Dask, resumable, tidy CSVs; `files`: result files;
- `plots`: the figures (matplotlib, the ``plot`` extra).
"""
