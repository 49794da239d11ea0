"""k-anonymity, l-diversity and t-closeness against hand-computed values and a brute-force EMD."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coutil.errors import InputError
from coutil.sdc.privacy import (
    check_privacy,
    class_emd,
    class_reports,
    equivalence_classes,
    k_anonymity,
    l_diversity,
    ordered_emd,
    t_closeness,
)

# QI (age band, zip) of 9 records, in classes of sizes 3, 4, 2.
QI = np.array([[1, 10], [1, 10], [1, 10], [2, 20], [2, 20], [2, 20], [2, 20], [3, 10], [3, 10]], dtype=float)
DISEASE = np.array([1, 1, 2, 1, 2, 3, 3, 4, 4], dtype=float)


def test_equivalence_classes_and_k_anonymity() -> None:
    labels, sizes = equivalence_classes(QI)
    assert sizes.tolist() == [3, 4, 2]
    assert labels.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2]
    report = k_anonymity(QI)
    assert (report.k, report.n_classes, report.n, report.violating_classes) == (2, 3, 9, 0)
    assert report.holds
    strict = k_anonymity(QI, required_k=3)
    assert not strict.holds
    assert (strict.violating_classes, strict.violating_records) == (1, 2)
    assert k_anonymity(QI, required_k=4).violating_classes == 2
    assert strict.to_dict()["classes"] == 3
    with pytest.raises(InputError):
        k_anonymity(QI, required_k=0)


def test_l_diversity_distinct_and_entropy() -> None:
    report = l_diversity(QI, DISEASE, "disease")
    # Class 3 has a single value (4, 4): distinct l = 1, entropy l = exp(0) = 1.
    assert report.distinct_l == 1
    assert report.entropy_l == pytest.approx(1.0)
    # Without that class: class 1 {1,1,2}: exp(H) = exp(-(2/3 ln 2/3 + 1/3 ln 1/3)).
    qi = QI[:7]
    report2 = l_diversity(qi, DISEASE[:7], "disease", required_l=2)
    h = -(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3))
    assert report2.distinct_l == 2
    assert report2.entropy_l == pytest.approx(np.exp(h))
    assert report2.holds
    failing = l_diversity(qi, DISEASE[:7], "disease", required_l=3)
    assert not failing.holds and failing.violating_classes == 1
    assert failing.to_dict()["attribute"] == "disease"


def test_t_closeness_li_et_al_salary_example() -> None:
    # Li, Li & Venkatasubramanian (2007): salaries 3k..11k; class {3k,4k,5k} is at EMD 0.375,
    # class {6k,8k,11k} at 0.167 from the whole table.
    table = np.arange(3.0, 12.0)
    assert ordered_emd([3.0, 4.0, 5.0], table) == pytest.approx(0.375)
    assert ordered_emd([6.0, 8.0, 11.0], table) == pytest.approx(1 / 6)
    qi = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2], dtype=float)
    salaries = np.array([3, 4, 5, 6, 8, 11, 7, 9, 10], dtype=float)
    labels, sizes = equivalence_classes(qi)
    # The third class {7k, 9k, 10k}: cumulative differences -1,-2,-3,-4,-2,-3,-1,+1,0 (ninths).
    np.testing.assert_allclose(class_emd(labels, sizes, salaries), [0.375, 1 / 6, 17 / 72])
    report = t_closeness(qi, salaries, "salary", required_t=0.2)
    assert report.t == pytest.approx(0.375)
    assert report.worst_class == 0
    assert not report.holds and report.violating_classes == 2
    assert t_closeness(qi, salaries, "salary", required_t=0.375).holds


def test_t_closeness_of_whole_table_class_is_zero_and_constant_attribute() -> None:
    qi = np.zeros(6)
    values = np.array([5.0, 1, 3, 3, 9, 2])
    assert t_closeness(qi, values).t == pytest.approx(0.0, abs=1e-12)
    assert t_closeness(np.arange(6.0), np.ones(6)).t == 0.0


@given(
    classes=st.lists(st.integers(0, 5), min_size=2, max_size=80),
    data=st.data(),
)
@settings(max_examples=150, deadline=None)
def test_fast_emd_matches_dense_reference(classes: list[int], data: st.DataObject) -> None:
    values = data.draw(st.lists(st.integers(0, 12), min_size=len(classes), max_size=len(classes)))
    qi = np.asarray(classes, dtype=float)
    column = np.asarray(values, dtype=float)
    labels, sizes = equivalence_classes(qi)
    fast = class_emd(labels, sizes, column)
    dense = [ordered_emd(column[labels == c], column) for c in range(sizes.size)]
    np.testing.assert_allclose(fast, dense, atol=1e-12)
    assert np.all((fast >= 0) & (fast <= 1 + 1e-12))


def test_check_privacy_combines_and_lists_failures() -> None:
    income = np.array([10, 20, 30, 10, 20, 30, 40, 50, 60], dtype=float)
    report = check_privacy(
        QI, ["age", "zip"], [("disease", DISEASE), ("income", income)],
        required_k=2, required_l=2, required_t=0.9, numeric=[False, True],
    )
    assert report.k_anonymity.holds
    assert [r.attribute for r in report.l_diversity] == ["disease", "income"]
    assert [r.attribute for r in report.t_closeness] == ["income"]
    assert not report.holds
    failures = report.failures()
    assert len(failures) == 1 and "l-diversity of disease" in failures[0]
    as_dict = report.to_dict()
    assert as_dict["holds"] is False and as_dict["qi"] == ["age", "zip"]
    ok = check_privacy(QI, ["age", "zip"], [("income", income)], required_k=2)
    assert ok.holds and ok.failures() == []


def test_bad_inputs() -> None:
    with pytest.raises(InputError):
        equivalence_classes(np.zeros((0, 2)))
    with pytest.raises(InputError):
        l_diversity(QI, DISEASE[:3])
    with pytest.raises(InputError):
        t_closeness(QI, DISEASE, required_t=1.5)
    with pytest.raises(InputError):
        ordered_emd([100.0], [1.0, 2.0])


@given(
    rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 6)), min_size=1, max_size=60)
)
@settings(max_examples=150, deadline=None)
def test_k_and_l_match_brute_force(rows: list[tuple[int, int, int]]) -> None:
    classes: dict[tuple[int, int], list[int]] = {}
    for a, b, value in rows:
        classes.setdefault((a, b), []).append(value)
    qi = np.array([[a, b] for a, b, _ in rows], dtype=float)
    values = np.array([v for _, _, v in rows], dtype=float)
    assert k_anonymity(qi).k == min(len(v) for v in classes.values())
    assert k_anonymity(qi).n_classes == len(classes)
    report = l_diversity(qi, values)
    assert report.distinct_l == min(len(set(v)) for v in classes.values())

    def entropy_l(group: list[int]) -> float:
        shares = np.array([group.count(x) / len(group) for x in set(group)])
        return float(np.exp(-(shares * np.log(shares)).sum()))

    assert report.entropy_l == pytest.approx(min(entropy_l(v) for v in classes.values()))


def test_entropy_l_requirement_with_float_tolerance() -> None:
    qi = np.array([0, 0, 0, 1, 1, 1], dtype=float)
    values = np.array([1, 2, 3, 1, 1, 2], dtype=float)
    second = np.exp(-(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3)))  # the {1, 1, 2} class
    report = l_diversity(qi, values, "v", required_entropy_l=second)
    assert report.holds and report.entropy_l == pytest.approx(second)
    failing = l_diversity(qi, values, "v", required_entropy_l=2.0)
    assert not failing.holds and failing.distinct_holds and not failing.entropy_holds
    assert failing.entropy_violating_classes == 1
    assert failing.to_dict()["required_entropy_l"] == 2.0
    # exp(ln 3) is 2.9999999999999996 in floats: three equally frequent values are 3-diverse.
    assert l_diversity(qi[:3], values[:3], required_entropy_l=3).holds
    assert not l_diversity(qi[:3], values[:3], required_entropy_l=3.001).holds
    with pytest.raises(InputError, match="entropy l"):
        l_diversity(qi, values, required_entropy_l=0.5)
    combined = check_privacy(qi, ["q"], [("v", values)], required_entropy_l=2.0)
    assert combined.failures() == [f"entropy l-diversity of v: entropy l = {second:.4f} < 2"]


def test_text_attributes_through_the_python_api() -> None:
    qi = np.array([["08001", "young"], ["08001", "young"], ["08002", "old"], ["08002", "old"]], dtype=object)
    labels, sizes = equivalence_classes(qi)
    assert sizes.tolist() == [2, 2] and labels[0] == labels[1] != labels[2]
    diseases = ["flu", "cold", "flu", "flu"]
    assert l_diversity(qi, diseases).distinct_l == 1
    with pytest.raises(InputError, match="not numeric"):
        t_closeness(qi, diseases)
    # By default a text confidential attribute gets l-diversity only; a numeric one also t-closeness.
    report = check_privacy(qi, ["zip", "age"], [("disease", diseases), ("salary", [1.0, 2.0, 3.0, 4.0])])
    assert [r.attribute for r in report.l_diversity] == ["disease", "salary"]
    assert [r.attribute for r in report.t_closeness] == ["salary"]
    with pytest.raises(InputError, match="missing"):
        l_diversity(qi, ["flu", None, "flu", "flu"])


def test_dataframes_through_the_python_api() -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "zip": ["08001", "08001", "08002", "08002", "08002"],
            "band": pd.Categorical(["a", "a", "b", "b", "b"], categories=["b", "a"]),
            "salary": [3.0, 4.0, 5.0, 6.0, 7.0],
            "grade": pd.Categorical(["lo", "hi", "lo", "mid", "hi"], categories=["lo", "mid", "hi"], ordered=True),
        }
    )
    ka = k_anonymity(frame[["zip", "band"]], required_k=2)
    assert (ka.k, ka.n_classes, ka.holds) == (2, 2, True)
    # An ordered categorical has an order: t-closeness on its ranks equals t-closeness on the codes 1..3.
    ranks = np.array([1.0, 3.0, 1.0, 2.0, 3.0])
    assert t_closeness(frame[["zip"]], frame["grade"]).t == pytest.approx(t_closeness(frame[["zip"]], ranks).t)
    with pytest.raises(InputError, match="unordered"):
        t_closeness(frame[["zip"]], frame["band"])
    frame.loc[0, "zip"] = None
    with pytest.raises(InputError, match="missing"):
        k_anonymity(frame[["zip"]])


def test_a_dataset_of_qis_is_accepted() -> None:
    from coutil.sdc.dataset import Dataset

    data = Dataset(("age", "zip"), QI)
    assert k_anonymity(data).k == k_anonymity(QI).k == 2


def test_per_class_report_by_hand() -> None:
    # Classes {records 0, 1} with values {10, 20} and {records 2, 3, 4} with {10, 10, 30}.
    # The table's distribution over 10 < 20 < 30 is (3/5, 1/5, 1/5). Ordered EMD = sum |cum (p - q)| / 2:
    # first class (1/2, 1/2, 0): |-1/10| + |2/10| = 3/10 -> 0.15; second (2/3, 0, 1/3): |1/15| + |-2/15| -> 0.1.
    qi = np.array([[1.0], [1.0], [2.0], [2.0], [2.0]])
    values = np.array([10.0, 20.0, 10.0, 10.0, 30.0])
    codes = np.array(["a", "b", "a", "a", "a"], dtype=object)
    report = check_privacy(qi, ["q"], [("v", values), ("c", codes)], required_l=2, per_class=True)
    assert report.classes is not None
    first, second = report.classes
    assert (first.index, first.size, first.first_record, second.index, second.size, second.first_record) == (
        0, 2, 0, 1, 3, 2
    )
    v1, c1 = first.attributes
    v2, c2 = second.attributes
    assert (v1.attribute, v1.distinct_l, v1.entropy_l, v1.t) == ("v", 2, pytest.approx(2.0), pytest.approx(0.15))
    assert (v2.distinct_l, v2.entropy_l, v2.t) == (2, pytest.approx(3 / 2 ** (2 / 3)), pytest.approx(0.1))
    assert (c1.attribute, c1.distinct_l, c1.entropy_l, c1.t) == ("c", 2, pytest.approx(2.0), None)
    assert (c2.distinct_l, c2.entropy_l, c2.t) == (1, pytest.approx(1.0), None)  # only "a": text has no t
    assert (first.holds, second.holds) == (True, False)  # the second class has one distinct code
    # The per-class t agrees with the dense reference EMD and its maximum is the release's t.
    assert v1.t == pytest.approx(ordered_emd(values[:2], values))
    assert v2.t == pytest.approx(ordered_emd(values[2:], values))
    assert report.t_closeness[0].t == pytest.approx(max(v1.t, v2.t))
    as_dict = report.to_dict()["classes"]
    assert as_dict[1] == {
        "class": 1, "size": 3, "first_record": 2, "holds": False,
        "confidential": [v2.to_dict(), {"attribute": "c", "distinct_l": 1, "entropy_l": 1.0, "t": None}],
    }
    assert "classes" not in check_privacy(qi, ["q"], [("v", values)]).to_dict()
    labels, sizes = equivalence_classes(qi)
    thresholds = class_reports(labels, sizes, [("v", values)], [True], required_k=3, required_t=0.12)
    assert [c.holds for c in thresholds] == [False, True]  # first: 2 records < 3 (and t 0.15 > 0.12)
    with pytest.raises(InputError, match="numeric"):
        class_reports(labels, sizes, [("v", values)], [])
