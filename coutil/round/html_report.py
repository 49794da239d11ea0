"""One self-contained HTML page describing a finished run directory (`coutil report DIR`).

A run directory holds what `coutil run` and `coutil simulate` write (`coutil.round.report.write_outputs`):
``release.csv``, ``manifest.json``, ``audit.json``, ``trace.jsonl`` and ``report.json``. The page has five
sections, in this order: a summary (subjects released, excluded and complaining, k, information loss of the
release against centralized MDAV on the same records), the phase timeline, per-subject traffic, the
subjects' verdicts (the distribution of the permutation distance d while verdicts carry it, the counts of
accepts and reasons otherwise), and the QI marginals before and after anonymization. Figures are PNGs
drawn with matplotlib (the ``plot`` extra) and embedded as base64 data URIs: the page needs no other file
and no network.

The original data are known when the caller names the CSV (``--data``; its first N records, N the round's
subjects, as `coutil run --data` reads them) or when the release matches the first N records of the
shipped survey; they are checked against the release (every released record must be one of them, matched
by its confidential values, which the release carries intact) before anything is computed from them.
Nothing confidential leaves the run directory beyond what ``release.csv`` already holds: the marginals of
the original QIs are histograms.

Written defensively: every field of the JSON files is optional beyond the release itself, so that the
page still renders for outputs of other protocol versions (a verdict without ``permutation_distance``,
names given as lists instead of comma-joined strings, phases under other names).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coutil.errors import InputError
from coutil.round.setup import default_data_path
from coutil.sdc.dataset import load_csv, read_csv_table
from coutil.sdc.infoloss import il1s, sse_sst_percent_pair
from coutil.sdc.mdav import mdav

#: The files of a run directory, all required.
RUN_FILES = ("release.csv", "manifest.json", "audit.json", "trace.jsonl", "report.json")
#: Section ids, in page order (tests look for each).
SECTIONS = ("summary", "timeline", "traffic", "verdicts", "marginals")
#: Trace lines read at most (a 10^5-subject trace has about 10^6 lines; the timeline needs no more).
MAX_TRACE_LINES = 2_000_000
#: Figure size in inches at `DPI` (about 860 x 300 pixels: fits the page's column).
FIGURE_SIZE = (8.6, 3.0)
DPI = 100
ACCENT = "#2b6cb0"
MUTED = "#a0aec0"
WARN = "#c05621"
PHASE_COLOURS = {"registration": "#bee3f8", "sharing": "#c6f6d5", "auditing": "#fefcbf"}


@dataclass
class OriginalData:
    """The round's original records (first N of a CSV), aligned with the release when they match it."""

    source: str
    qi: np.ndarray[Any, np.dtype[np.float64]]
    confidential: np.ndarray[Any, np.dtype[np.float64]]
    #: For every original record, the release row holding its confidential values (-1: not released).
    release_row: np.ndarray[Any, np.dtype[np.intp]]


@dataclass
class RunDirectory:
    """The parsed outputs of one run."""

    path: Path
    columns: tuple[str, ...]
    release: np.ndarray[Any, np.dtype[np.float64]]
    manifest: dict[str, Any]
    audit: dict[str, Any]
    report: dict[str, Any]
    #: (time, node, event) of the trace's events, in file order.
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)

    @property
    def parameters(self) -> dict[str, Any]:
        inner = self.manifest.get("manifest", self.manifest)
        return dict(inner) if isinstance(inner, Mapping) else {}

    def names(self, key: str) -> tuple[str, ...]:
        value = self.parameters.get(key)
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        if isinstance(value, Sequence):
            return tuple(str(name) for name in value)
        return ()

    @property
    def qi_names(self) -> tuple[str, ...]:
        names = self.names("qi")
        return names if names and set(names) <= set(self.columns) else ()

    @property
    def confidential_names(self) -> tuple[str, ...]:
        names = self.names("confidential")
        if names and set(names) <= set(self.columns):
            return names
        return tuple(c for c in self.columns if c not in self.qi_names) if self.qi_names else ()

    def column(self, name: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        return np.asarray(self.release[:, self.columns.index(name)], dtype=np.float64)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a JSON object")
    return value


def load_run_directory(directory: str | Path) -> RunDirectory:
    """Read a run directory; a missing directory or file is an `InputError` naming it."""
    path = Path(directory)
    if not path.is_dir():
        raise InputError(f"{path}: no such run directory (the --out of coutil run or coutil simulate)")
    for name in RUN_FILES:
        if not (path / name).is_file():
            raise InputError(f"{path}: no {name} (a run directory holds {', '.join(RUN_FILES)})")
    table = read_csv_table(path / "release.csv")
    release = load_csv(path / "release.csv") if table.rows else None
    run = RunDirectory(
        path=path,
        columns=tuple(table.header),
        release=release.values if release is not None else np.zeros((0, len(table.header))),
        manifest=_read_json(path / "manifest.json"),
        audit=_read_json(path / "audit.json"),
        report=_read_json(path / "report.json"),
    )
    with (path / "trace.jsonl").open(encoding="utf-8", errors="replace") as trace:
        for number, line in enumerate(trace):
            if number >= MAX_TRACE_LINES:
                break
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a truncated last line (an interrupted run) is not worth failing the page
            if isinstance(record, dict) and isinstance(record.get("at"), int | float):
                run.events.append((float(record["at"]), str(record.get("node", "")), record))
    return run


def find_original(run: RunDirectory, data: str | Path | None) -> tuple[OriginalData | None, str]:
    """The round's original records, or None and why not."""
    qi, confidential = run.qi_names, run.confidential_names
    if not qi or not confidential:
        return None, "the manifest names no QI or confidential columns of the release"
    subjects = int(run.report.get("subjects") or run.release.shape[0])
    candidate = Path(data) if data is not None else default_data_path()
    if data is not None and not candidate.is_file():
        raise InputError(f"--data {candidate}: no such file")
    try:
        dataset = load_csv(candidate, list(qi + confidential))
    except InputError as exc:
        if data is not None:
            raise
        return None, f"not the shipped survey ({exc}); pass --data FILE.csv"
    if dataset.n < subjects:
        return None, f"{candidate} has {dataset.n} records, fewer than the round's {subjects} subjects"
    values = dataset.values[:subjects]
    original = OriginalData(str(candidate), values[:, : len(qi)], values[:, len(qi):],
                            _match_release(run, values[:, len(qi):]))
    matched = int((original.release_row >= 0).sum())
    if matched != run.release.shape[0]:
        where = "the shipped survey" if data is None else str(candidate)
        return None, (f"the release does not come from the first {subjects} records of {where} "
                      f"({matched} of {run.release.shape[0]} released records found); pass --data FILE.csv")
    return original, ""


def _match_release(run: RunDirectory, confidential: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[
        Any, np.dtype[np.intp]]:
    """For every original record, a release row with exactly its confidential values (each row used once)."""
    rows: dict[tuple[float, ...], list[int]] = {}
    released = np.column_stack([run.column(name) for name in run.confidential_names]) if run.release.size else None
    if released is not None:
        for index, row in enumerate(released):
            rows.setdefault(tuple(float(v) for v in row), []).append(index)
    found = np.full(confidential.shape[0], -1, dtype=np.intp)
    for index, row in enumerate(confidential):
        candidates = rows.get(tuple(float(v) for v in row))
        if candidates:
            found[index] = candidates.pop()
    return found


def information_loss(run: RunDirectory, original: OriginalData) -> dict[str, float]:
    """SSE/SST (%) and IL1s of the released QIs and of centralized MDAV (same k) on the same records."""
    k = int(run.parameters.get("k", 5))
    released = original.release_row >= 0
    qi_original = original.qi[released]
    qi_release = np.column_stack([run.column(name) for name in run.qi_names])[original.release_row[released]]
    central = mdav(qi_original, k) if qi_original.shape[0] >= k else None
    result = {
        "records": float(qi_original.shape[0]),
        "release_sse_sst_percent": sse_sst_percent_pair(qi_original, qi_release),
        "release_il1s": il1s(qi_original, qi_release),
    }
    if central is not None:
        result["mdav_sse_sst_percent"] = sse_sst_percent_pair(qi_original, central.masked())
        result["mdav_il1s"] = il1s(qi_original, central.masked())
    return result


# -- figures -------------------------------------------------------------------------------------------


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise InputError("coutil report draws its figures with matplotlib: install coutil[plot]") from None
    matplotlib.use("Agg")  # before pyplot: no display needed
    import matplotlib.pyplot as plt

    return plt


def _png(figure: Any, rect: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0)) -> str:
    buffer = io.BytesIO()
    figure.tight_layout(rect=rect)
    figure.savefig(buffer, format="png", dpi=DPI)
    figure.clf()
    _pyplot().close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _axes(plt: Any, size: tuple[float, float] = FIGURE_SIZE, columns: int = 1) -> tuple[Any, Any]:
    figure, axes = plt.subplots(1, columns, figsize=size)
    for ax in np.atleast_1d(axes):
        ax.spines["top"].set_visible(False)
        ax.spines["right"].set_visible(False)
        ax.tick_params(labelsize=8)
    return figure, axes


def phase_spans(run: RunDirectory) -> list[tuple[str, float, float]]:
    """(phase, start, end) in seconds from the round's start: from the collector's phase events in the trace,
    else from report.json's wall times laid end to end."""
    collector = [(at, e) for at, node, e in run.events if node.startswith("collector") and e.get("event") == "phase"]
    if collector:
        start = min(at for at, _, _ in run.events)
        end = max(at for at, _, _ in run.events)
        spans = []
        for index, (at, event) in enumerate(collector):
            until = collector[index + 1][0] if index + 1 < len(collector) else end
            spans.append((str(event.get("phase")), at - start, until - start))
        return [s for s in spans if s[0] not in ("done", "aborted") or s[2] > s[1]]
    walls = run.report.get("wall_times")
    spans, clock = [], 0.0
    if isinstance(walls, Mapping):
        for phase, seconds in walls.items():
            if phase in ("setup", "run", "done") or not isinstance(seconds, int | float):
                continue
            spans.append((str(phase), clock, clock + float(seconds)))
            clock += float(seconds)
    return spans


def _trace_clock(run: RunDirectory) -> str:
    """What the trace's times are: wall-clock over MQTT, virtual time in memory (`coutil simulate`)."""
    dropped = run.report.get("dropped")
    simulated = isinstance(dropped, Mapping) and ("loss" in dropped or "partition" in dropped)
    return "virtual time of the simulation" if simulated else "wall clock"


def _timeline_figure(run: RunDirectory) -> str | None:
    spans = phase_spans(run)
    if not spans and not run.events:
        return None
    plt = _pyplot()
    clock = _trace_clock(run)
    figure, ax = _axes(plt, (8.6, 3.3))
    width = max((end for _, _, end in spans), default=0.0) or 1.0
    for phase, start, end in spans:
        ax.axvspan(start, end, color=PHASE_COLOURS.get(phase, "#edf2f7"), alpha=0.9, lw=0)
        if (end - start) / width >= 0.06:  # a label per phase wide enough to hold one
            ax.text((start + end) / 2, 1.01, phase, transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize=8, color="#4a5568")
    origin = min((at for at, _, _ in run.events), default=0.0)
    curves = (("registration_accepted", "registered", ACCENT), ("grouped", "grouped", "#38a169"),
              ("verdict_accepted", "verdict received", WARN))
    subjects = int(run.report.get("subjects") or 0)
    for kind, label, colour in curves:
        times = sorted(at - origin for at, node, e in run.events
                       if e.get("event") == kind and (kind != "grouped" or not node.startswith("collector")))
        if times:
            ax.step(times, np.arange(1, len(times) + 1), where="post", color=colour, lw=1.6, label=label)
    if subjects:
        ax.set_ylim(0, subjects * 1.08)
    ax.set_xlabel(f"seconds since the round started ({clock})", fontsize=8)
    ax.set_ylabel("subjects", fontsize=8)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    return _png(figure)


def _traffic_figure(traffic: Mapping[str, Any]) -> str | None:
    metrics = [("sent_messages", "sent msgs", 1.0), ("received_messages", "received msgs", 1.0),
               ("total_bytes", "total kB", 1e-3)]
    shown = [(label, float(traffic[key]["mean"]) * scale, float(traffic[key]["max"]) * scale)
             for key, label, scale in metrics
             if isinstance(traffic.get(key), Mapping) and {"mean", "max"} <= set(traffic[key])]
    if not shown:
        return None
    plt = _pyplot()
    figure, ax = _axes(plt, (8.6, 2.6))
    positions = np.arange(len(shown))
    ax.barh(positions + 0.2, [m for _, m, _ in shown], height=0.38, color=ACCENT, label="mean")
    ax.barh(positions - 0.2, [x for _, _, x in shown], height=0.38, color=MUTED, label="max")
    for position, (_, mean, most) in zip(positions, shown, strict=True):
        ax.text(mean, position + 0.2, f" {mean:,.1f}", va="center", fontsize=8)
        ax.text(most, position - 0.2, f" {most:,.0f}", va="center", fontsize=8)
    ax.set_yticks(positions, [label for label, _, _ in shown])
    ax.set_xlim(0, max(x for _, _, x in shown) * 1.15 or 1)
    ax.invert_yaxis()
    ax.set_xlabel("per subject", fontsize=8)
    ax.legend(fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2)
    return _png(figure)


def _integer_ticks() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _verdicts_figure(distances: Sequence[int], reasons: Counter[str]) -> str | None:
    plt = _pyplot()
    if distances:
        figure, ax = _axes(plt)
        # Integer-aligned bins of equal width: d is an integer, often a multiple of the group size apart.
        low, high = min(distances), max(distances)
        width = max(1, math.ceil((high - low + 1) / 50))
        edges = np.arange(low - 0.5, high + width + 0.5, width)
        ax.hist(distances, bins=edges, color=ACCENT, edgecolor="white", linewidth=0.4)
        ax.yaxis.set_major_locator(_integer_ticks())
        ax.set_xlabel("permutation distance d of the subject's record in the release", fontsize=8)
        ax.set_ylabel("subjects", fontsize=8)
        return _png(figure)
    if not reasons:
        return None
    figure, ax = _axes(plt, (8.6, max(1.8, 0.6 + 0.4 * len(reasons))))
    labels = sorted(reasons, key=lambda r: -reasons[r])
    ax.barh(labels, [reasons[r] for r in labels], color=[ACCENT if r == "ok" else WARN for r in labels])
    ax.invert_yaxis()
    ax.set_xlabel("subjects", fontsize=8)
    return _png(figure)


def _marginals_figure(run: RunDirectory, original: OriginalData) -> str:
    plt = _pyplot()
    names = run.qi_names
    columns = min(len(names), 4)
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(8.6, 2.6 * rows), squeeze=False)
    released = original.release_row >= 0
    for index, name in enumerate(names):
        ax = axes[index // columns][index % columns]
        before = original.qi[released, index]
        after = run.column(name)
        edges = np.histogram_bin_edges(np.concatenate([before, after]), bins=30)
        ax.hist(before, bins=edges, color=MUTED, label="original")
        ax.hist(after, bins=edges, histtype="step", color=ACCENT, linewidth=1.5, label="release")
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.spines["top"].set_visible(False)
        ax.spines["right"].set_visible(False)
    for index in range(len(names), rows * columns):
        axes[index // columns][index % columns].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", ncol=2, fontsize=8, frameon=False)
    return _png(figure, rect=(0.0, 0.0, 1.0, 0.9))


# -- the page ------------------------------------------------------------------------------------------


def _distances(audit: Mapping[str, Any]) -> list[int]:
    """Every verdict's permutation distance d, or [] when the verdicts do not carry it."""
    verdicts = audit.get("verdicts")
    values = []
    if isinstance(verdicts, list):
        for verdict in verdicts:
            d = verdict.get("permutation_distance") if isinstance(verdict, Mapping) else None
            if isinstance(d, int | float) and not isinstance(d, bool):
                values.append(int(d))
    if values:
        return values
    distribution = audit.get("permutation_distance_distribution")
    if isinstance(distribution, Mapping):
        for d, count in distribution.items():
            if str(d).lstrip("-").isdigit() and isinstance(count, int):
                values.extend([int(d)] * count)
    return values


def _verdict_counts(audit: Mapping[str, Any]) -> tuple[int, int, Counter[str]]:
    """(verdicts, accepted, reasons)."""
    verdicts = audit.get("verdicts")
    reasons: Counter[str] = Counter()
    accepted = 0
    if isinstance(verdicts, list):
        for verdict in verdicts:
            if isinstance(verdict, Mapping):
                reasons[str(verdict.get("reason", "?"))] += 1
                accepted += bool(verdict.get("accept"))
        return len(verdicts), accepted, reasons
    stored = audit.get("reasons")
    if isinstance(stored, Mapping):
        reasons.update({str(r): int(c) for r, c in stored.items() if isinstance(c, int)})
    return sum(reasons.values()), int(audit.get("accepted") or 0), reasons


def _table(rows: Sequence[tuple[str, str]]) -> str:
    return "<table>" + "".join(
        f"<tr><th>{html.escape(what)}</th><td>{html.escape(value)}</td></tr>" for what, value in rows) + "</table>"


def _img(png: str | None, alt: str) -> str:
    if png is None:
        return f'<p class="note">No data for this figure ({html.escape(alt)}).</p>'
    return f'<img src="data:image/png;base64,{png}" alt="{html.escape(alt)}">'


STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1a202c; margin: 0;
       background: #f7fafc; }
main { max-width: 900px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #e2e8f0; padding-bottom: 4px; }
.sub { color: #4a5568; margin: 0 0 16px; }
.verdict { padding: 10px 14px; border-radius: 6px; font-weight: 600; margin: 12px 0; }
.ok { background: #c6f6d5; color: #22543d; } .bad { background: #fed7d7; color: #742a2a; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { background: white; border: 1px solid #e2e8f0; border-radius: 6px; padding: 8px 12px; flex: 1 1 0;
        min-width: 84px; }
.card b { display: block; font-size: 20px; } .card span { color: #4a5568; font-size: 12px; }
table { border-collapse: collapse; background: white; margin: 8px 0; }
th, td { border: 1px solid #e2e8f0; padding: 4px 10px; text-align: left; font-weight: normal; }
th { color: #4a5568; background: #f7fafc; } td { font-variant-numeric: tabular-nums; }
img { max-width: 100%; background: white; border: 1px solid #e2e8f0; border-radius: 6px; display: block; }
.note { color: #4a5568; font-style: italic; }
footer { color: #718096; font-size: 12px; margin-top: 32px; }
"""


def _mapping(value: object) -> dict[str, Any]:
    """A JSON object of the run's files, or {} when the field is absent or of another type."""
    return {str(key): item for key, item in value.items()} if isinstance(value, Mapping) else {}


def _seconds(value: object) -> str:
    return f"{float(value):.2f} s" if isinstance(value, int | float) else "n/a"


def render_html(run: RunDirectory, original: OriginalData | None, why_no_data: str) -> tuple[str, dict[str, Any]]:
    """The page and a JSON-able description of what it shows."""
    report = run.report
    subjects = int(report.get("subjects") or 0)
    released = int(run.release.shape[0])
    excluded_map = _mapping(report.get("excluded"))
    excluded = sum(int(v) for v in excluded_map.values() if isinstance(v, int))
    verdicts, accepted, reasons = _verdict_counts(run.audit)
    complaining = verdicts - accepted
    k = run.parameters.get("k", "?")
    completed = bool(report.get("completed"))
    worked = completed and released == subjects and complaining == 0 and verdicts > 0
    walls = _mapping(report.get("wall_times"))
    total = walls.get("run")
    loss = information_loss(run, original) if original is not None else None
    images: list[str] = []

    def img(png: str | None, alt: str) -> str:
        if png is not None:
            images.append(alt)
        return _img(png, alt)

    headline = (f"The round completed: {released} of {subjects} subjects released, every verdict accepting."
                if worked else
                f"The round {'completed' if completed else 'did not complete'}: {released} of {subjects} "
                f"subjects released, {excluded} excluded, {complaining} complaining.")
    cards = [("subjects", f"{subjects:,}"), ("released", f"{released:,}"), ("excluded", f"{excluded:,}"),
             ("complaining", f"{complaining:,}"), ("k", str(k)), ("groups", f"{int(report.get('groups') or 0):,}"),
             ("round time", _seconds(total))]
    summary_rows = [
        ("round id", str(report.get("round_id", run.manifest.get("round_id", "?")))),
        ("protocol", str(run.parameters.get("protocol", "?"))),
        ("quasi-identifiers", ", ".join(run.qi_names) or "?"),
        ("confidential", ", ".join(run.confidential_names) or "?"),
        ("excluded by reason", ", ".join(f"{r}: {c}" for r, c in excluded_map.items()) or "none"),
        ("verdicts by reason", ", ".join(f"{r}: {c}" for r, c in sorted(reasons.items())) or "none"),
    ]
    if loss is not None and original is not None:
        summary_rows.append(("original data", f"{original.source} (first {subjects} records)"))
        central = loss.get("mdav_sse_sst_percent")
        summary_rows.append(("information loss (QIs, SSE/SST)",
                             f"release {loss['release_sse_sst_percent']:.3f} %"
                             + (f"; centralized MDAV, k = {k}: {central:.3f} %" if central is not None else "")))
        summary_rows.append(("IL1s (QIs)", f"release {loss['release_il1s']:.4f}"
                             + (f"; centralized MDAV {loss['mdav_il1s']:.4f}" if "mdav_il1s" in loss else "")))
    else:
        summary_rows.append(("information loss", f"not computed: original data not available ({why_no_data})"))

    phase_names = {"run": "whole round", "done": "closing (done)", "outputs": "writing outputs"}
    phase_rows = [(phase_names.get(str(phase), str(phase)), _seconds(seconds)) for phase, seconds in walls.items()
                  if phase != "setup"]
    traffic = _mapping(report.get("traffic_per_subject"))
    traffic_rows = [(str(metric), f"mean {float(v['mean']):,.1f} / max {float(v['max']):,.0f}")
                    for metric, v in traffic.items() if isinstance(v, Mapping) and {"mean", "max"} <= set(v)]
    rejections = _mapping(report.get("rejections"))
    dropped = _mapping(report.get("dropped"))
    traffic_rows.append(("rejections (re-sends seen twice are 'duplicate')",
                         ", ".join(f"{r}: {c}" for r, c in rejections.items()) or "none"))
    traffic_rows.append(("messages dropped", ", ".join(f"{w}: {c}" for w, c in dropped.items()) or "none")
                        if dropped else ("messages dropped", "none recorded"))

    distances = _distances(run.audit)
    if distances:
        verdict_text = (f"<p>Each subject audits the release: d is the distance, in ranks, between her record and "
                        f"its match in the release (median {int(np.median(distances))}, min {min(distances)}, "
                        f"max {max(distances)}; {len(distances)} verdicts).</p>")
    else:
        verdict_text = ("<p>Each subject audits the release on her own device; her verdict says only whether she "
                        "accepts it or why she complains (protocol v2: her permutation distance d and the "
                        "plausibility of her match stay with her). Counts of accepts and reasons.</p>")

    if original is not None:
        marginals = img(_marginals_figure(run, original), "QI marginals: original and release")
        marginals_text = ("<p>Histograms of each quasi-identifier over the released records: the original values "
                          "(grey) and the released group centroids (blue line).</p>")
    else:
        marginals = ""
        marginals_text = f'<p class="note">Original data not available ({html.escape(why_no_data)}).</p>'

    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>coutil round report: {html.escape(str(run.path.name))}</title><style>{STYLE}</style></head>
<body><main>
<h1>coutil round report</h1>
<p class="sub">{html.escape(str(run.path))}</p>
<section id="summary"><h2>Summary</h2>
<div class="verdict {'ok' if worked else 'bad'}">{html.escape(headline)}</div>
<div class="cards">{''.join(f'<div class="card"><b>{html.escape(v)}</b><span>{html.escape(c)}</span></div>'
                            for c, v in cards)}</div>
{_table(summary_rows)}
</section>
<section id="timeline"><h2>Phase timeline</h2>
<p>The collector's phases (shaded) and how many subjects had registered, been grouped and returned a verdict.</p>
{img(_timeline_figure(run), "phase timeline")}
{'<p>Wall-clock seconds per phase (report.json):</p>' + _table(phase_rows) if phase_rows else ''}
</section>
<section id="traffic"><h2>Per-subject traffic</h2>
{img(_traffic_figure(traffic), "per-subject traffic")}
{_table(traffic_rows)}
</section>
<section id="verdicts"><h2>Verdicts</h2>
{verdict_text}
{img(_verdicts_figure(distances, reasons), "verdicts")}
</section>
<section id="marginals"><h2>QI marginals before and after</h2>
{marginals_text}
{marginals}
</section>
<footer>Written by <code>coutil report</code> from {', '.join(RUN_FILES)}. Self-contained: figures are
embedded PNGs.</footer>
</main></body></html>
"""
    described = {
        "sections": list(SECTIONS),
        "images": len(images),
        "figures": images,
        "subjects": subjects,
        "released": released,
        "excluded": excluded,
        "complaining": complaining,
        "k": k,
        "round_ok": worked,
        "original_data": original.source if original is not None else None,
        "original_data_missing": why_no_data or None,
        "information_loss": loss,
        "permutation_distance": bool(distances),
    }
    return page, described


def write_html_report(directory: str | Path, out: str | Path | None = None,
                      data: str | Path | None = None) -> dict[str, Any]:
    """Render ``directory`` to ``out`` (default ``directory/report.html``); returns what was written."""
    _pyplot()  # fail first, in one line, when matplotlib is missing
    run = load_run_directory(directory)
    original, why = find_original(run, data)
    page, described = render_html(run, original, why)
    target = Path(out) if out is not None else run.path / "report.html"
    if not target.parent.is_dir():
        raise InputError(f"-o {target}: no directory {target.parent}")
    # Atomically: a reader never sees half a page.
    handle, temporary = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(page)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return {"report": str(target), "bytes": len(page.encode("utf-8")), "run_directory": str(run.path), **described}

