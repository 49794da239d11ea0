"""One round file for every runner: ``[round]``, ``[data]``, ``[network]``, ``[faults]``, plus overrides.

``coutil run --config F.toml``, ``coutil simulate --config F.toml`` and ``coutil collector serve
--config F.toml`` read the same file::

    [round]                # coutil.protocol.config.RoundConfig (qi/confidential default: the shipped survey's)
    k = 5
    [data]                 # one source; none at all: the shipped survey
    csv = "data.csv"       #   a CSV file (relative paths: relative to the TOML file) ...
    rows = 500             #   ... its first N records (optional)
    # subjects = 200       #   ... or N synthetic records (coutil.round.simulation.synthetic_dataset)
    [network]              # coutil.net.memory.NetworkModel: latency, jitter, loss, duplicate
    [faults]               # coutil.round.simulation.FaultPlan: vanish_fraction, vanish_state, vanish_window
    [adversary]            # coutil.adversary.plan: collector = "NAME", [[adversary.subjects]] strategy, rows/fraction,
                           #   broker = "NAME" (the in-memory bus only)

``[network]`` and ``[faults]`` describe a simulated network: only the in-memory driver honours them;
so does ``[adversary] broker`` (a deviating broker is a strategy of the in-memory bus).
A runner that cannot honour a table it is given refuses the file (`RoundSpec.require`), never
ignores it. ``--set key=value`` overrides one key (``k=3`` means ``round.k=3``; ``data.rows=100``,
``network.loss=0.1``); values are TOML values (``qi=["a","b"]``) or, failing that, strings
(``qi=a,b``). Command-line options (``--k``, ``--qi``, ``--data``, ``--subjects``) are overrides too.
The file is turned into a `RoundConfig` once; later changes (local timing) use `dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from coutil.adversary.plan import AdversaryPlan, parse_adversary
from coutil.errors import InputError
from coutil.fileio import read_toml
from coutil.net.memory import NetworkModel
from coutil.protocol.config import MAX_QI_MAGNITUDE, RoundConfig
from coutil.round.simulation import FaultPlan, synthetic_dataset
from coutil.sdc.dataset import Dataset, load_csv

#: The shipped synthetic survey (10,000 fictitious respondents; simulations/make_default_dataset.py).
DEFAULT_QI = ("age", "height_cm", "weight_kg", "hours_worked")
DEFAULT_CONFIDENTIAL = ("income", "savings", "medical_spend")
#: Records of the shipped survey a round uses when nothing says how many.
DEFAULT_SURVEY_ROWS = 200

TABLES = ("round", "data", "network", "faults", "adversary")
#: The tables only a simulated network can honour.
SIMULATED_TABLES = ("network", "faults")

#: The RoundConfig fields `local_swarm_timing` chooses.
TIMING_FIELDS = ("step_timeout", "retry_interval", "audit_window", "register_window")

#: From this many subjects on, ``coutil run`` hosts them in worker processes by default.
AUTO_WORKERS_FROM = 1000


def check_qi_magnitude(data: Dataset, config: RoundConfig) -> None:
    """A collector refuses a registered QI value beyond `MAX_QI_MAGNITUDE` (SPEC §7.3): a record with one
    cannot take part, so a round over it is an input error, not a round that waits for her."""
    qi = data.select(list(config.qi)).values
    beyond = np.flatnonzero(np.any(np.abs(qi) > MAX_QI_MAGNITUDE, axis=1))
    if beyond.size:
        raise InputError(f"{data.source}: record {int(beyond[0]) + 1} has a QI value beyond {MAX_QI_MAGNITUDE:g} "
                         f"in magnitude ({beyond.size} record(s)); a collector refuses such a registration")


def default_data_path() -> Path:
    return Path(str(resources.files("coutil") / "data" / "survey.csv"))


@dataclass(frozen=True)
class DataSource:
    """Where a round's records come from: a CSV (default: the shipped survey) or synthetic records."""

    csv: Path | None = None
    #: The first N records of the CSV (None: all; the shipped survey: `DEFAULT_SURVEY_ROWS`).
    rows: int | None = None
    #: N synthetic records instead of a CSV.
    synthetic: int | None = None

    def load(self, config: RoundConfig, seed: int) -> Dataset:
        """The records (synthetic ones drawn with ``seed``); checked against k."""
        if self.synthetic is not None:
            data = synthetic_dataset(self.synthetic, config, seed)
        else:
            path = self.csv if self.csv is not None else default_data_path()
            rows = self.rows if self.rows is not None or self.csv is not None else DEFAULT_SURVEY_ROWS
            data = load_csv(path, list(config.columns))
            if rows is not None:
                if rows > data.n:
                    raise InputError(f"{rows} subjects asked for: {path} has only {data.n} records "
                                     "(pass --data FILE.csv with at least that many)")
                data = Dataset(data.names, data.values[:rows], data.source, data.ordinal)
        if data.n < config.k:
            raise InputError(f"{data.n} subjects cannot form a group of k = {config.k}")
        check_qi_magnitude(data, config)
        return data


@dataclass(frozen=True)
class RoundSpec:
    """A round file with its overrides applied: what any runner needs to run a round."""

    config: RoundConfig
    data: DataSource
    network: NetworkModel
    faults: FaultPlan
    #: The file it came from (None: options only), for messages.
    path: Path | None = None
    #: ``[round]`` keys the file or an override set (local timing leaves them alone).
    fixed_round_keys: frozenset[str] = frozenset()
    #: The tables the file or an override gave.
    tables: frozenset[str] = frozenset()
    #: Who deviates (``[adversary]``, `coutil.adversary`): None for an honest round.
    adversary: AdversaryPlan | None = None

    def require(self, runner: str, *, simulated_network: bool, deviations: bool = False) -> None:
        """Refuse tables ``runner`` cannot honour (a real network has no ``[network]`` model; only
        the round runners, ``deviations``, build deviating nodes from ``[adversary]``)."""
        if self.adversary is not None and not deviations:
            where = str(self.path) if self.path is not None else "--set"
            raise InputError(f"{where}: [adversary] makes nodes deviate, which {runner} does not do: remove the "
                             "table (coutil simulate and coutil run honour it)")
        if simulated_network:
            return
        if self.adversary is not None and self.adversary.broker is not None:
            where = str(self.path) if self.path is not None else "--set"
            raise InputError(f"{where}: [adversary] broker = {self.adversary.broker!r} needs the in-memory bus, which "
                             f"{runner} does not use (it runs on a real broker): use coutil simulate")
        given = [t for t in SIMULATED_TABLES if t in self.tables]
        if given:
            where = str(self.path) if self.path is not None else "--set"
            raise InputError(f"{where}: [{'], ['.join(given)}] describe(s) a simulated network, which {runner} "
                             "cannot honour (it runs on a real broker): remove the table(s) or use coutil simulate")

    def for_local_swarm(self, subjects: int) -> RoundConfig:
        """The config for a round whose ``subjects`` subjects all run on this machine (``coutil run``).

        Registration closes once all of them registered (unless ``expected_subjects`` is set), and
        the timing grows with their number (`local_swarm_timing`) except where the file or an
        override sets it. The values in force are recorded in the manifest.
        """
        changes: dict[str, Any] = {k: v for k, v in local_swarm_timing(subjects).items()
                                   if k not in self.fixed_round_keys}
        if "expected_subjects" not in self.fixed_round_keys and self.config.expected_subjects == 0:
            changes["expected_subjects"] = subjects
        try:
            return dataclasses.replace(self.config, **changes)
        except InputError as exc:
            raise (InputError(f"{self.path}: {exc}") if self.path is not None else exc) from None


def local_swarm_timing(subjects: int) -> dict[str, float]:
    """Protocol timing for ``subjects`` subjects hosted on this one machine (``coutil run``).

    The defaults (20 s steps, 2 s re-sends, 60 s audit) suit subjects on their own devices. When
    one machine hosts them all, every group's messages queue behind everyone else's: at 10^4
    subjects a step of the shuffle waits tens of seconds for the CPU, a 20 s step timeout
    excluded every member as silent, and 2 s re-sends multiplied the load (measured: the round
    released nothing). So the step timeout grows by 12 ms per subject, the first re-send by 0.5 ms
    and the audit window by 30 ms (at 10^4: 120 s, 5 s, 300 s), and from 50,000 subjects on the
    registration window by 0.6 ms (at 10^5: 60 s; registration took 34-40 s there, and one run left
    64,891 subjects outside the 30 s default). Timeouts only bound how long a truly silent member is
    waited for; an honest swarm finishes long before them (registration closes as soon as the
    expected subjects are in).
    """
    timing = {
        "step_timeout": max(20.0, 0.012 * subjects),
        "retry_interval": max(2.0, 0.0005 * subjects),
        "audit_window": max(60.0, 0.03 * subjects),
    }
    if subjects > 50_000:
        timing["register_window"] = 6 * subjects / 10_000
    return timing


def auto_workers(subjects: int, external_broker: bool) -> int:
    """Worker processes for ``subjects`` subjects hosted on this machine: none for a small round
    (starting them costs a second or two) or with the embedded broker (a process of its own that
    needs a core: 2,000 subjects took 29 s in one process, 40 s with two workers), else two when
    the machine has two cores or more (over mosquitto, 2,000 subjects: 22.3 s in one process,
    14.9 s with two workers; 10^4: 162 s, 113 s)."""
    cores = os.cpu_count() or 1
    if subjects < AUTO_WORKERS_FROM or cores < 2 or not external_broker:
        return 0
    return 2


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(","))
    if not names or any(not n for n in names):
        raise InputError(f"bad column list {text!r}: expected comma-separated names")
    return names


def parse_set(items: Sequence[str]) -> dict[str, dict[str, object]]:
    """``--set`` items (``key=value``, ``table.key=value``) as tables of overrides."""
    tables: dict[str, dict[str, object]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"bad --set {item!r}: expected key=value (e.g. k=3, data.rows=100, network.loss=0.1)")
        table, dot, name = key.rpartition(".")
        table = table if dot else "round"
        if table not in TABLES:
            raise InputError(f"bad --set {item!r}: unknown table {table!r} (known: {', '.join(TABLES)})")
        try:
            value: object = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text.strip()
        tables.setdefault(table, {})[name] = value
    return tables


def _read_toml(path: Path) -> dict[str, Any]:
    return read_toml(path)


def _dataclass_from(cls: type[Any], table: Mapping[str, Any], where: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return cls(**table)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}") from None


def _positive_int(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{where} must be a positive integer, got {value!r}")
    return value


def load_round_spec(
    path: str | Path | None = None,
    *,
    sets: Sequence[str] = (),
    qi: str | None = None,
    confidential: str | None = None,
    k: int | None = None,
    data: str | Path | None = None,
    subjects: int | None = None,
    round_overrides: Mapping[str, object] | None = None,
    allow_k1: bool = False,
) -> RoundSpec:
    """The round file at ``path`` (or none) with the command line's overrides; errors are `InputError`s.

    ``subjects`` is the number of synthetic records when the file asks for synthetic ones, else the
    number of CSV rows. ``round_overrides`` are further ``[round]`` keys (None values are skipped).
    k = 1 is refused unless ``allow_k1``: it releases every record as it is, with every verdict accepting.
    """
    p = Path(path) if path is not None else None
    doc = _read_toml(p) if p is not None else {}
    where = str(p) if p is not None else "round config"
    unknown = sorted(set(doc) - set(TABLES))
    if unknown:
        raise InputError(f"{where}: unknown table(s) {', '.join(unknown)} (known: {', '.join(TABLES)})")
    for name, table in doc.items():
        if not isinstance(table, dict):
            raise InputError(f"{where}: {name} must be a table ([{name}])")
    tables = {name: dict(doc.get(name, {})) for name in TABLES}
    present = {name for name in TABLES if name in doc}
    round_table = tables["round"]
    file_round_keys = set(round_table)
    options: dict[str, object] = {"qi": _names(qi) if qi is not None else None,
                                  "confidential": _names(confidential) if confidential is not None else None,
                                  "k": k, **(round_overrides or {})}
    round_table.update({key: value for key, value in options.items() if value is not None})
    for table, values in parse_set(sets).items():
        tables[table].update(values)
        present.add(table)
    round_table.setdefault("qi", DEFAULT_QI)
    round_table.setdefault("confidential", DEFAULT_CONFIDENTIAL)
    try:
        config = RoundConfig.from_mapping(round_table)
    except InputError as exc:
        # RoundConfig's messages begin "round config: ...": named after the file when there is one.
        raise (InputError(f"{p}: {exc}") if p is not None else exc) from None
    if config.k == 1 and not allow_k1:
        raise InputError(f"{where}: k = 1 releases every record unchanged (groups of one: no anonymity at all); "
                         "pass --allow-k1 if that is what you mean")
    source = _data_source(tables["data"], p, where, data, subjects)
    network = _dataclass_from(NetworkModel, tables["network"], f"{where} [network]")
    faults = _dataclass_from(FaultPlan, tables["faults"], f"{where} [faults]")
    adversary = parse_adversary(tables["adversary"], where) if "adversary" in present else None
    if adversary is not None and adversary.empty:
        adversary = None
    fixed = frozenset(file_round_keys | {key for key in round_table if key not in file_round_keys
                                         and key not in ("qi", "confidential")})
    return RoundSpec(config, source, network, faults, p, fixed, frozenset(present), adversary)


def _data_source(table: Mapping[str, Any], path: Path | None, where: str, data: str | Path | None,
                 subjects: int | None) -> DataSource:
    unknown = sorted(set(table) - {"csv", "rows", "subjects"})
    if unknown:
        raise InputError(f"{where} [data]: unknown key(s) {', '.join(unknown)}; known: csv, rows, subjects")
    if "csv" in table and "subjects" in table:
        raise InputError(f"{where} [data]: give csv (with rows) or subjects (synthetic records), not both")
    rows = table.get("rows")
    synthetic = table.get("subjects")
    csv: Path | None = None
    if data is not None:
        csv, synthetic = Path(data), None
    elif "csv" in table:
        csv = Path(str(table["csv"]))
        csv = csv if csv.is_absolute() or path is None else path.parent / csv
    if subjects is not None:
        if synthetic is not None:
            synthetic = subjects
        else:
            rows = subjects
    if rows is not None:
        rows = _positive_int(rows, f"{where} [data] rows (or --subjects)")
    if synthetic is not None:
        synthetic = _positive_int(synthetic, f"{where} [data] subjects (or --subjects)")
    return DataSource(csv, rows, synthetic)
