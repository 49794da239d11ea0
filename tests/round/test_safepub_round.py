"""A SafePub round (`grouping = "safepub"`): subjects sample themselves with beta, groups are the classes of
bins announced before registration, classes below k are suppressed (never merged), and the release is
labelled (epsilon, delta)-DP only when every condition of the theorem holds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from coutil.errors import InputError
from coutil.protocol.config import RoundConfig
from coutil.round.memory import simulate_round
from coutil.round.report import privacy_label
from coutil.round.setup import load_round_spec
from coutil.round.simulation import FaultPlan
from coutil.sdc.generalization import classes_of, parse_scheme

CONFIGS = Path(__file__).parents[2] / "simulations" / "configs"
BINS = {"age": [18, 30, 40, 50, 60, 70, 90], "height_cm": [140, 160, 175, 200]}


def _config(**changes: object) -> RoundConfig:
    fields: dict[str, object] = {
        "qi": ("age", "height_cm"), "confidential": ("income",), "k": 5, "grouping": "safepub",
        "safepub_bins": BINS, "safepub_beta": 0.6, "random_records": 100, **changes}
    return RoundConfig.from_mapping(fields)


def _data(config: RoundConfig, rows: int) -> object:
    return load_round_spec(None, sets=[f"data.rows={rows}", "qi=age,height_cm", "confidential=income"]).data.load(
        config, 1)


@pytest.mark.parametrize("seed", [1, 2])
def test_subjects_sample_themselves_and_small_classes_are_suppressed(seed: int) -> None:
    config = _config()
    data = _data(config, 300)
    simulated = simulate_round(data, config, seed=seed)  # type: ignore[arg-type]
    report, outcome = simulated.report, simulated.report.outcome
    assert report.completed, report.summary()
    states = Counter(str(s.state) for s in simulated.subjects)
    sampled_out = states["sampled_out"]
    # Each subject's own coin: about (1 - beta) n of them never register (binomial, not a fixed share).
    assert stats.binomtest(sampled_out, data.n, 0.4).pvalue > 0.001  # type: ignore[attr-defined]
    assert outcome.registered == data.n - sampled_out
    # Every released group is a class of at least k; every smaller class was suppressed, none merged.
    assert min(outcome.group_sizes) >= config.k
    reasons = Counter(str(e["reason"]) for e in outcome.excluded)
    assert set(reasons) <= {"suppressed_class"} and "merged" not in reasons
    registered = [i for i, s in enumerate(simulated.subjects) if s.state != "sampled_out"]
    qi = data.values[registered][:, :2]  # type: ignore[attr-defined]
    classes = classes_of(qi, config.safepub_bins)
    sizes = classes.sizes()
    assert reasons.get("suppressed_class", 0) == int(sizes[sizes < config.k].sum())
    assert sum(outcome.group_sizes) == int(sizes[sizes >= config.k].sum())
    # Released QI values are the bins' midpoints: fixed by the announced scheme, not by the data.
    released = {tuple(row) for row in outcome.rows[:, :2].tolist()}
    assert released <= {tuple(m) for m in classes.midpoints.tolist()}
    # Suppressed subjects learned it (excluded, then done), nobody waits, nobody complains.
    for subject in simulated.subjects:
        assert subject.state in ("sampled_out", "done", "verdict_sent"), subject.state
    assert all(v["accept"] for v in outcome.verdicts)


def test_the_label_holds_only_when_every_condition_does(tmp_path: Path) -> None:
    spec = load_round_spec(CONFIGS / "safepub.toml")
    data = spec.data.load(spec.config, 1)
    simulated = simulate_round(data, spec.config, seed=1, out_dir=tmp_path / "out")
    label = json.loads((tmp_path / "out" / "manifest.json").read_text())["privacy"]
    assert label["differential_privacy"] is True, label
    assert label["delta_achieved"] < label["delta"] == 1e-3 and label["k"] == 34
    outcome = simulated.report.outcome
    # k too small for the claimed delta: the same round, relabelled, does not hold.
    small_k = RoundConfig.from_mapping({**{f: getattr(spec.config, f) for f in ("qi", "confidential", "grouping",
                                                                                "safepub_bins", "safepub_beta",
                                                                                "safepub_epsilon", "safepub_delta")},
                                        "k": 5})
    relabelled = type(outcome)(**{**outcome.__dict__, "manifest": dict(small_k.manifest())})
    assert privacy_label(relabelled)["differential_privacy"] is False
    assert privacy_label(relabelled)["conditions"]["k_gives_delta"] is False
    # A member excluded for another reason (a vanished subject): the released set is not SDGS's any more.
    vanished = simulate_round(data, spec.config, seed=1, faults=FaultPlan(vanish_fraction=0.05))
    vanished_label = privacy_label(vanished.report.outcome)
    assert vanished_label["conditions"]["no_exclusion_but_suppression"] is False
    assert vanished_label["differential_privacy"] is False


def test_an_mdav_release_is_never_labelled_dp() -> None:
    config = RoundConfig(qi=("age", "height_cm"), confidential=("income",), k=5, random_records=100)
    simulated = simulate_round(_data(config, 40), config, seed=1)  # type: ignore[arg-type]
    label = privacy_label(simulated.report.outcome)
    assert label["differential_privacy"] is False and "MDAV" in str(label["mechanism"])
    # An MDAV round's manifest has no grouping keys: its signed announce is what it was before them.
    assert "grouping" not in dict(config.manifest()) and dict(config.manifest())["method"] == "mdav"


@pytest.mark.parametrize(("changes", "message"), [
    ({"safepub_bins": {"age": [18, 40]}}, "exactly the QIs"),
    ({"safepub_bins": {"age": [40, 18], "height_cm": [140, 200]}}, "must increase"),
    ({"safepub_bins": {"age": [18], "height_cm": [140, 200]}}, "at least two"),
    ({"safepub_beta": 0.0}, "safepub_beta"),
    ({"grouping": "kmeans"}, "grouping must be"),
])
def test_bad_safepub_settings_are_input_errors(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        _config(**changes)
    with pytest.raises(InputError, match="need grouping"):
        RoundConfig(qi=("a",), confidential=("b",), safepub_beta=0.5)


def test_scheme_classes_by_hand() -> None:
    scheme = parse_scheme({"a": [0, 10, 20], "b": [0, 5, 10]}, ["a", "b"])
    classes = classes_of(np.array([[1.0, 1.0], [11.0, 1.0], [2.0, 2.0], [25.0, 9.0], [-3.0, 6.0]]), scheme)
    # (0,0), (1,0), (0,0), (1,1) clipped from 25, (0,1) clipped from -3.
    assert classes.labels.tolist() == [0, 2, 0, 3, 1]
    assert classes.midpoints.tolist() == [[5.0, 2.5], [5.0, 7.5], [15.0, 2.5], [15.0, 7.5]]
    assert classes.sizes().tolist() == [2, 1, 1, 1]
