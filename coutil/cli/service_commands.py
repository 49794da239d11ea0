"""`coutil collector serve|export` and `coutil subject join|swarm`: the deployed roles.

``collector serve`` runs rounds against a broker (`coutil.collector.serve`), committing everything it
acknowledges to SQLite (`coutil.collector.service`); it prints one JSON line per round event on stderr (structured logs,
never a confidential value). ``subject join`` takes one person through the current round and prints
her audit verdict; ``subject swarm`` hosts many simulated subjects in one process (the docker
``subjects`` service).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.text import Text

from coutil.cli.common import OneLineErrorsCommand, OneLineErrorsGroup, emit_json, err_console, parse_collector_key
from coutil.errors import ComplaintError, InputError, RoundIncompleteError
from coutil.fileio import same_path

collector_app = typer.Typer(help="The collector service.", no_args_is_help=True, cls=OneLineErrorsGroup)
subject_app = typer.Typer(help="Subject nodes.", no_args_is_help=True, cls=OneLineErrorsGroup)

BrokerOption = Annotated[str, typer.Option("--broker", help="mqtt\\[s]://\\[user:pass@]host:port")]
CaFileOption = Annotated[Path | None, typer.Option("--ca-file", help="CA certificate (PEM) that signed the broker's "
                                                   "TLS certificate, for mqtts:// (default: the system's CAs).",
                                                   show_default=False)]


def _address(broker: str, ca_file: Path | None) -> Any:
    from coutil.net.mqtt import parse_broker_url

    if ca_file is not None and ca_file.is_dir():
        # parse_broker_url only checks for a regular file, and would say a directory "does not exist".
        raise InputError(f"--ca-file {ca_file}: is a directory, not a CA certificate file (PEM)")
    return parse_broker_url(broker, ca_file=str(ca_file) if ca_file is not None else None)


def _shown(text: object) -> Text:
    """A stored or user-given string as rich shows it: no markup ("[/]" in a verdict reason is text, not a
    closing tag rich refuses) and no control character (an escape sequence would drive the terminal)."""
    raw = str(text)
    return Text("".join(c if c.isprintable() else repr(c)[1:-1] for c in raw))


@collector_app.command("serve", cls=OneLineErrorsCommand)
def serve_command(
    broker: BrokerOption,
    db: Annotated[Path, typer.Option("--db", help="SQLite database (created if missing; WAL mode).")],
    ca_file: CaFileOption = None,
    config: Annotated[Path | None, typer.Option("--config", help="Round TOML (a \\[round] table).",
                                                show_default=False)] = None,
    sets: Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE",
                                                   help="Override one key of the round file "
                                                   "(k=3, round.register_window=60; repeatable).",
                                                   show_default=False)] = None,
    qi: Annotated[str | None, typer.Option("--qi", help="QI columns (default: the shipped survey's).",
                                           show_default=False)] = None,
    confidential: Annotated[str | None, typer.Option("--confidential", help="Confidential columns.",
                                                     show_default=False)] = None,
    k: Annotated[int | None, typer.Option("--k", help="Minimum group size.", show_default=False)] = None,
    register_window: Annotated[float | None, typer.Option("--register-window", help="Seconds of registration.",
                                                          show_default=False)] = None,
    expected: Annotated[int | None, typer.Option("--expected", help="Close registration once this many "
                                                 "subjects registered.", show_default=False)] = None,
    rounds: Annotated[int, typer.Option("--rounds", help="Rounds to run before exiting (0: forever).")] = 1,
    allow_k1: Annotated[bool, typer.Option("--allow-k1", help="Accept k = 1 (no anonymity).")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="Least level logged (JSON lines on stderr): "
                                           "debug, info, warning or error.")] = "info",
    as_json: Annotated[bool, typer.Option("--json", help="At the end, print the rounds' outcomes as one JSON "
                                          "object on stdout.")] = False,
) -> None:
    """Run rounds over BROKER; every acknowledged registration and verdict is committed to --db first.

    Exit 0 only when every round it ran completed with a release; 4 when one aborted (too few
    subjects, deadline) or released nothing; 5 when a subject rejected a release; 6 for the broker.
    """
    from coutil.collector.logs import configure
    from coutil.collector.serve import serve_rounds
    from coutil.round.setup import load_round_spec

    configure(log_level)
    address = _address(broker, ca_file)
    spec = load_round_spec(config, sets=tuple(sets or ()), qi=qi, confidential=confidential, k=k,
                           round_overrides={"register_window": register_window, "expected_subjects": expected},
                           allow_k1=allow_k1)
    spec.require("coutil collector serve", simulated_network=False)
    if rounds < 0:
        raise InputError(f"bad --rounds {rounds}: expected 0 (forever) or more")
    served = serve_rounds(address, db, spec.config, rounds=rounds)
    problems = [r.problem for r in served if r.problem is not None]
    complaints = sum(r.verdicts - r.accepted for r in served if r.problem is None)
    if as_json:
        emit_json({"rounds": [r.as_dict() for r in served], "completed": sum(1 for r in served if r.problem is None),
                   "problems": problems})
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RoundIncompleteError(problems[0] + more)
    if complaints:
        raise ComplaintError(f"{complaints} subject(s) rejected the release")


DbOption = Annotated[Path, typer.Option("--db", help="The collector's SQLite database (readable while the "
                                          "service runs: WAL).")]
RoundOption = Annotated[str | None, typer.Option("--round", help="Round id in hex (a unique prefix is enough; "
                                                 "default: the newest round).", show_default=False)]


def _refuse_database_files(outputs: dict[str, Path], db: Path) -> None:
    """`InputError` for an output onto a file of the database beside it, even with --force (documented for
    the database alone): the secret is the collector's signing identity (a new one could never re-announce
    its rounds), the -wal file holds its latest commits and the -shm file indexes them; a lock file replaced
    under a running service would let a second one start."""
    from coutil.collector.service import lock_path, secret_path

    companions = {"the collector's secret file": secret_path(db), "the service's lock file": lock_path(db),
                  "the database's write-ahead log": db.with_name(db.name + "-wal"),
                  "the database's shared-memory index": db.with_name(db.name + "-shm")}
    for option, path in outputs.items():
        for what, companion in companions.items():
            if same_path(path, companion):
                raise InputError(f"{option} {path} is {what} of --db {db}: writing there would destroy it; "
                                 "choose another output")


def _open_store(db: Path) -> Any:
    from coutil.collector.storage import CollectorStore

    try:
        if not db.exists():
            raise InputError(f"{db}: no such database")
    except OSError as exc:  # `Path.exists` raises for a directory this user may not search (EACCES)
        raise InputError(f"{db}: cannot read the collector database ({exc.strerror or exc}: {db.parent} must be "
                         "searchable by this user)") from None
    return CollectorStore(db, read_only=True)  # these commands only read: never a write into the operator's file


@collector_app.command("rounds", cls=OneLineErrorsCommand)
def rounds_command(
    db: DbOption,
    as_json: Annotated[bool, typer.Option("--json", help="Print {\"rounds\": [...]} as one JSON object.")] = False,
) -> None:
    """List the rounds of a collector database: phase, counts and duration (no confidential value)."""
    from rich.table import Table

    from coutil.collector.operations import round_summary

    with _open_store(db) as store:
        rows = [round_summary(store.load_round(r.round_id)) for r in store.rounds()]
    if as_json:
        emit_json({"db": str(db), "rounds": rows})
        return
    # Every cell is a Text: the phase and k come from the database (any string, in a damaged or forged one)
    # and the title holds a path; rich would read "[...]" in them as markup.
    table = Table(title=_shown(f"rounds in {db}"))
    for column in ("round", "phase", "k", "registered", "excluded", "released", "accepted / verdicts", "duration s"):
        table.add_column(column, justify="left" if column in ("round", "phase") else "right")
    for row in rows:
        released = "-" if row["released_rows"] is None else str(row["released_rows"])
        table.add_row(*(_shown(cell) for cell in (
            str(row["round"])[:16], row["phase"], row["k"], row["registered"], row["excluded"], released,
            f"{row['accepted']} / {row['verdicts']}", f"{row['duration_s']:.1f}")))
    err_console.print(table if rows else _shown(f"{db}: no round yet"))


@collector_app.command("status", cls=OneLineErrorsCommand)
def status_command(
    db: DbOption,
    round_hex: RoundOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as one JSON object.")] = False,
) -> None:
    """One round in detail: parameters, phases with their times, exclusions and complaints by reason."""
    from coutil.collector.operations import find_round, round_status

    with _open_store(db) as store:
        status = round_status(find_round(store, round_hex))
    if as_json:
        emit_json(status)
        return
    lines = [
        f"round {status['round']}: {status['phase']} (k = {status['k']}, collector key {status['collector_key']})",
        f"registered {status['registered']}, groups {status['groups']}, excluded {status['excluded']}, "
        f"released rows {status['released_rows'] if status['released_rows'] is not None else '-'}",
        f"verdicts {status['verdicts']}: {status['accepted']} accept, {status['complaints']} complain",
    ]
    durations = status["phase_durations_s"]
    if isinstance(durations, dict) and durations:
        lines.append("phases: " + ", ".join(f"{p} {d:.1f} s" for p, d in durations.items()))
    for title, key in (("exclusions", "exclusions_by_reason"), ("complaints", "complaints_by_reason"),
                       ("messages rejected or ignored", "messages_rejected_by_reason")):
        counts = status[key]
        if isinstance(counts, dict) and counts:
            lines.append(f"{title}: " + ", ".join(f"{reason} {count}" for reason, count in counts.items()))
    # The reasons are stored strings (a complaint's reason is whatever the subject signed): shown as text.
    err_console.print(Text("\n").join(_shown(line) for line in lines), highlight=False)


def _transcript_signer(db: Path, collector_key: bytes) -> Callable[[bytes], bytes] | None:
    """The collector's transcript signature with the service's identity (its secret beside the database), None when
    that secret is missing or is another collector's."""
    from coutil.collector.service import identity_from_secret, load_secret
    from coutil.protocol import crypto

    secret = load_secret(db)
    if secret is None:
        return None
    identity = identity_from_secret(secret)
    if identity.public != collector_key:
        return None
    return lambda statement: crypto.sign_transcript(identity, statement)


@collector_app.command("export", cls=OneLineErrorsCommand)
def export_command(
    db: DbOption,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Release CSV to write.",
                                                show_default=False)] = None,
    round_hex: RoundOption = None,
    verdicts: Annotated[Path | None, typer.Option("--verdicts", help="Write the verdicts (accept/complain counts "
                                                  "and reasons, per subject id) as JSON here.",
                                                  show_default=False)] = None,
    manifest: Annotated[Path | None, typer.Option("--manifest", help="Write the round's parameters (the "
                                                  "transparency manifest) as JSON here.", show_default=False)] = None,
    transcript: Annotated[Path | None, typer.Option("--transcript", help="Write the signed transcript an auditor "
                                                    "checks (announce, roster, assignments, release, verdicts) as "
                                                    "JSON here.", show_default=False)] = None,
    with_registrations: Annotated[bool, typer.Option("--with-registrations", help="Put the registrations (every "
                                                     "subject's exact QIs) in the transcript too: only for an "
                                                     "auditor entrusted with them.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Write an output even if it is the database.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was exported as JSON.")] = False,
) -> None:
    """Export a stored round: its release (CSV), verdicts, manifest and transcript (readable while the service runs)."""
    import json

    from coutil.collector.operations import export_transcript, find_round, verdict_summary
    from coutil.fileio import refuse_overwriting_inputs, write_text_atomic

    outputs = {"--output": output, "--verdicts": verdicts, "--manifest": manifest, "--transcript": transcript}
    if all(path is None for path in outputs.values()):
        raise InputError("collector export: nothing to export: give -o/--output, --verdicts, --manifest or "
                         "--transcript")
    given = {k: v for k, v in outputs.items() if v is not None}
    refuse_overwriting_inputs(given, {"--db": db}, force=force)
    _refuse_database_files(given, db)
    with _open_store(db) as store:
        stored = find_round(store, round_hex, with_release=output is not None and round_hex is None)
        info: dict[str, object] = {"round": stored.round_id.hex(), "phase": stored.phase}
        # Before anything is written: an unreadable secret (exit 2) left the release, verdicts and manifest written
        # and no transcript (found by an attacker playing the unlucky operator; outputs are whole or not at all).
        sign = _transcript_signer(db, stored.collector_key) if transcript is not None else None
        if output is not None:
            if stored.release_csv is None:
                raise InputError(f"{db}: round {stored.round_id.hex()} has no release (phase {stored.phase})")
            store.export_release(stored.round_id, output)
            info["output"] = str(output)
            info["rows"] = stored.release_csv.count("\n") - 1
    info["verdicts"] = len(stored.verdicts)
    if verdicts is not None:
        write_text_atomic(verdicts, json.dumps(verdict_summary(stored), indent=2) + "\n")
        info["verdicts_file"] = str(verdicts)
    if manifest is not None:
        write_text_atomic(manifest, json.dumps({"round": stored.round_id.hex(), "parameters": stored.params},
                                               indent=2) + "\n")
        info["manifest_file"] = str(manifest)
    if transcript is not None:
        info["transcript"] = {"file": str(transcript),
                              **export_transcript(stored, transcript, include_registrations=with_registrations,
                                                  sign=sign)}
        if sign is None:
            err_console.print(_shown(f"warning: {transcript}: unsigned (no collector secret for this database's key "
                                     "beside it); an auditor fails an unsigned transcript of a round committed to a "
                                     "signed one"))
    if as_json:
        emit_json(info)
    else:
        written = [str(p) for p in (output, verdicts, manifest, transcript) if p is not None]
        err_console.print(_shown(f"round {info['round']}: wrote {', '.join(written)}"))


def _verdict_words(verdict: Any, names: tuple[str, ...]) -> str:
    if verdict is None:
        return "no verdict: the round did not reach the audit"
    parts = [
        "ACCEPT" if verdict.accept else f"REJECT ({verdict.reason})",
        "your record is in the release" if verdict.included else "your record is NOT in the release",
        f"permutation distance d = {verdict.permutation_distance}",
        "diversity v (variance of the release values within rank distance d of yours): "
        + ", ".join(f"{name} {value:.6g}" for name, value in zip(names, verdict.variances, strict=True)),
        f"k-anonymous: {'yes' if verdict.k_anonymous else 'no'}",
        f"match plausible as a random one: {'yes' if verdict.plausible else 'no'} (p = {verdict.p_value:.3f})",
    ]
    if verdict.centroid_is_own_qi:
        parts.append("WARNING: your group's QI centroid is exactly your own QIs (every other member registered your "
                     "QIs): unless such duplicates are common in this survey, your group may be identities made to "
                     "isolate you (Sybils; protocol/SPEC.md section 3)")
    return "\n".join(parts)


def _earlier_evidence(path: Path, data: Path) -> list[Any]:
    """What ``path`` (`subject join --evidence`) already holds, kept beside this round's: her earlier rounds' proofs.

    Checked before she waits for a round. Found by an attacker of a subject's host across restarts: a second
    `subject join` with the same --evidence (her host restarted, or the collector aborted its round after a crash
    and she joined its next one) replaced the file at the end, and her proof of the first round's equivocation,
    its only copy, was gone; --evidence naming her --data file overwrote her record with JSON, and a directory
    failed only after the round, her verdict unprinted and her proof lost. Evidence of another round is only
    "not taken" by `coutil verify`, never counted against a collector."""
    from coutil.fileio import present, same_path
    from coutil.round.evidence import read_evidence

    if same_path(path, data):
        raise InputError(f"--evidence {path} is the input --data {data}: it would be overwritten; choose another file")
    try:
        if path.is_dir():
            raise InputError(f"--evidence {path}: is a directory, not a file")
        if not present(path) or (path.is_file() and path.stat().st_size == 0):
            return []
    except OSError as exc:  # a directory this user may not search (EACCES): `Path.exists` raises
        raise InputError(f"--evidence {path}: cannot be written ({exc.strerror or exc})") from None
    try:
        return read_evidence(path)
    except InputError as exc:
        raise InputError(f"--evidence {exc} (it would be replaced: choose another file)") from None


@subject_app.command("join", cls=OneLineErrorsCommand)
def join_command(
    broker: BrokerOption,
    data: Annotated[Path, typer.Option("--data", help="CSV holding your record (a header row).")],
    row: Annotated[int, typer.Option("--row", help="Which data row is you (1-based).")] = 1,
    collector_key: Annotated[str | None, typer.Option("--collector-key", help="Pin the collector's key (hex); "
                                                      "default: trust the announced key.",
                                                      show_default=False)] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the round.")] = 600.0,
    min_k: Annotated[int, typer.Option("--min-k", help="Your own floor on k: do not take part in a round "
                                       "announced with a smaller k.")] = 2,
    ca_file: CaFileOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as one JSON object.")] = False,
    evidence: Annotated[Path | None, typer.Option(
        "--evidence", help="Write her evidence here, however the round ended (JSON, for `coutil "
        "verify --evidence`): her receipt (the announce and the first roster she received), her verdict with the "
        "collector's signed verdict_ack, and her proof if the collector equivocated to her (two roster roots, or two "
        "different shuffle_starts of one run). Written as soon as she holds it; what the file "
        "already holds (her earlier rounds' evidence) is kept beside it.",
        show_default=False)] = None,
) -> None:
    """Take one subject through the current round and print her audit verdict.

    Returns as soon as the round is over for her (verdict acknowledged, excluded, or the collector
    ended the round); exit 4 without a verdict (excluded, the round aborted, the collector stopped
    answering), 5 when she rejects the release.
    """
    from coutil.protocol.equivocation import EquivocationEvidence, RosterReceipt
    from coutil.protocol.states import SubjectState
    from coutil.round.evidence import VerdictEvidence, write_evidence
    from coutil.round.subjects import RoundWatch, fetch_announce, host_subjects, make_subjects
    from coutil.sdc.dataset import read_csv_table, table_to_dataset

    # What the command line says is checked before waiting for a round (up to --timeout): a mistyped file
    # or row is an input error now, not "no round announced" minutes later. Her columns are the announce's.
    if min_k < 1:
        raise InputError(f"bad --min-k {min_k}: expected a positive number")
    expected_key = parse_collector_key(collector_key)
    address = _address(broker, ca_file)
    table = read_csv_table(data)
    earlier = _earlier_evidence(evidence, data) if evidence is not None else []
    if not 1 <= row <= table.n:
        raise InputError(f"bad --row {row}: {data} has {table.n} data rows")
    announced = asyncio.run(fetch_announce(address, timeout=min(timeout, 60.0), expected_key=expected_key))
    dataset = table_to_dataset(table, list(announced.qi_names + announced.confidential_names))
    values = dataset.values[row - 1]
    q = len(announced.qi_names)
    (node,) = make_subjects(announced, [(values[:q].tolist(), values[q:].tolist())], min_k=min_k)
    if not as_json:
        err_console.print(f"round {announced.round_id.hex()} by collector {announced.collector_key.hex()}")

    def held() -> list[Any]:
        pair, proof, receipt = node.verdict_evidence(), node.equivocation_evidence(), node.roster_receipt()
        return [*([VerdictEvidence(*pair)] if pair is not None else []),
                *([EquivocationEvidence(*proof)] if proof is not None else []),
                *([RosterReceipt(*receipt)] if receipt is not None else [])]

    written: list[Any] = []

    def keep_evidence() -> None:
        # Written as soon as it changes (a receipt, a proof, an acknowledged verdict), not only at the end: a host
        # that dies mid-round (kill -9, power loss) lost her proof, its only copy. Best effort here; the final
        # write below reports a failure.
        nonlocal written
        items = held()
        if evidence is not None and items != written:
            with contextlib.suppress(InputError):
                write_evidence(evidence, dict.fromkeys([*earlier, *items]))
                written = items

    watch = RoundWatch(announced, on_progress=keep_evidence if evidence is not None else None)
    try:
        asyncio.run(host_subjects([node], address, timeout=timeout, watch=watch))
    finally:  # however her host stopped (an outage, Ctrl-C included): what she holds is kept
        proof = node.equivocation_evidence()
        if evidence is not None:
            write_evidence(evidence, dict.fromkeys([*earlier, *held()]))
    if proof is not None:
        err_console.print(f"[red]the collector equivocated in this round[/] (two roster roots, or two different "
                          "shuffle_starts of one run): proof kept"
                          f"{f' in {evidence}' if evidence is not None else ' (give --evidence FILE to keep it)'}; "
                          "any auditor checks it: coutil verify --evidence FILE --collector-key "
                          f"{announced.collector_key.hex()}")
    audit = node.audit
    # A complaint without an audit: she took no part (a roster of her own, SPEC §4 group) and said so.
    complaint = node.verdict if audit is None and node.verdict is not None and not node.verdict.accept else None
    problem: str | None = None
    if audit is None and complaint is None:
        if node.state in (SubjectState.EXCLUDED, SubjectState.DONE):
            problem = f"you were excluded from round {announced.round_id.hex()}: your record is not in the release"
        elif node.state == SubjectState.INCOMPATIBLE:
            problem = (f"round {announced.round_id.hex()} asks for what you do not take part in (incompatible: "
                       f"k below your --min-k {min_k}, other attributes, or parameters this coutil cannot take)")
        else:
            problem = f"no verdict ({node.state}): {watch.describe()}"
    result = {
        "round": announced.round_id.hex(),
        "collector_key": announced.collector_key.hex(),
        "state": node.state,
        "ended_by": watch.ended_by,
        "equivocation_proof": proof is not None,
        "problem": problem,
        "verdict": ({"accept": False, "reason": complaint.reason, "included": False} if complaint is not None
                    else None) if audit is None else {
            "accept": audit.accept, "reason": audit.reason, "included": audit.included,
            "k_anonymous": audit.k_anonymous, "permutation_distance": audit.permutation_distance,
            "p_value": audit.p_value, "plausible": audit.plausible,
            "variances": dict(zip(announced.qi_names + announced.confidential_names, audit.variances, strict=True)),
            "centroid_is_own_qi": audit.centroid_is_own_qi,
        },
    }
    if as_json:
        emit_json(result)
    elif complaint is not None:
        print(f"you took no part and complained: {complaint.reason} (SPEC §7.3 verdict reasons)")
    else:
        print(_verdict_words(audit, announced.qi_names + announced.confidential_names))
    if problem is not None:
        raise RoundIncompleteError(problem)
    if complaint is not None:
        raise ComplaintError(f"you complained about round {announced.round_id.hex()} ({complaint.reason})")
    if audit is not None and not audit.accept:
        raise ComplaintError(f"you rejected the release of round {announced.round_id.hex()} ({audit.reason})")


@subject_app.command("swarm", cls=OneLineErrorsCommand)
def swarm_command(
    broker: BrokerOption,
    count: Annotated[int, typer.Option("--count", help="Subjects hosted by this process.")] = 100,
    data: Annotated[Path | None, typer.Option("--data", help="CSV to draw records from (default: the shipped "
                                              "survey).", show_default=False)] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the round.")] = 600.0,
    shared_connection: Annotated[bool, typer.Option(
        "--shared-connection", help="Multiplex every hosted subject over one MQTT connection (much less "
        "traffic; impossible behind a per-subject ACL, which needs one connection per subject).")] = False,
    min_k: Annotated[int, typer.Option("--min-k", help="Every hosted subject's own floor on k: none takes part "
                                       "in a round announced with a smaller k.")] = 2,
    ca_file: CaFileOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a summary as one JSON object.")] = False,
) -> None:
    """Host COUNT simulated subjects (records drawn at random from --data) through the current round.

    Returns as soon as the round is over for every subject; exit 4 unless every one finished
    (verdict acknowledged) or when they did not take part (k below --min-k), 5 when one rejected the release.
    """
    from coutil.protocol.states import SubjectState
    from coutil.round.setup import default_data_path
    from coutil.round.subjects import RoundWatch, fetch_announce, host_subjects, make_subjects
    from coutil.sdc.dataset import read_csv_table, table_to_dataset

    if count < 1:
        raise InputError(f"bad --count {count}: expected a positive number")
    if min_k < 1:
        raise InputError(f"bad --min-k {min_k}: expected a positive number")
    address = _address(broker, ca_file)
    table = read_csv_table(data if data is not None else default_data_path())  # before waiting for a round
    announced = asyncio.run(fetch_announce(address, timeout=min(timeout, 120.0)))
    dataset = table_to_dataset(table, list(announced.qi_names + announced.confidential_names))
    rows = np.random.default_rng().choice(dataset.n, size=count, replace=count > dataset.n)
    q = len(announced.qi_names)
    nodes = make_subjects(announced, [(dataset.values[i, :q].tolist(), dataset.values[i, q:].tolist())
                                      for i in rows], min_k=min_k)
    watch = RoundWatch(announced)
    stats = asyncio.run(host_subjects(nodes, address, timeout=timeout, shared_connection=shared_connection,
                                      watch=watch))
    accepted = sum(1 for n in nodes if n.audit is not None and n.audit.accept)
    # A complaint without an audit (she took no part, SPEC §4 group) is a rejection too.
    rejected = sum(1 for n in nodes if (n.audit is not None and not n.audit.accept)
                   or (n.audit is None and n.verdict is not None and not n.verdict.accept))
    finished = sum(1 for n in nodes if n.finished)
    excluded = sum(1 for n in nodes if n.audit is None and n.verdict is None
                   and n.state in (SubjectState.EXCLUDED, SubjectState.DONE))
    incompatible = sum(1 for n in nodes if n.state == SubjectState.INCOMPATIBLE)
    problem: str | None = None
    if incompatible:
        problem = (f"round {announced.round_id.hex()} asks for what {incompatible}/{count} subjects do not take "
                   f"part in (incompatible: k = {announced.k} below --min-k {min_k}, other attributes, or "
                   "parameters this coutil cannot take)")
    elif finished < count:
        problem = (f"{finished}/{count} subjects finished ({excluded} excluded, "
                   f"{count - finished - excluded} still waiting): {watch.describe()}")
    summary = {"round": announced.round_id.hex(), "subjects": count, "accepted": accepted, "rejected": rejected,
               "finished": finished, "excluded": excluded, "incompatible": incompatible, "ended_by": watch.ended_by,
               "problem": problem,
               "network": stats.as_dict()}
    if as_json:
        emit_json(summary)
    else:
        err_console.print(f"{finished}/{count} subjects finished, {accepted} accepted the release")
    if problem is not None:
        raise RoundIncompleteError(problem)
    if rejected:
        raise ComplaintError(f"{rejected}/{count} subjects rejected the release of round {announced.round_id.hex()}")


def register(app: typer.Typer) -> None:
    app.add_typer(collector_app, name="collector")
    app.add_typer(subject_app, name="subject")
