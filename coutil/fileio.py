"""Atomic output files and directories: a crash or Ctrl-C never leaves a partial or clobbered output.

Every file coutil writes (CSV, JSON, trace, figure, exported release) goes through `atomic_write`:
the bytes go to a temporary file beside the target (same directory, so same file system), which is
flushed and fsynced, then renamed over the target with `os.replace` (atomic on POSIX). Until the
rename the target is either absent or the old complete file. Temporary names start with ``.`` and
end in ``.tmp`` (``.release.csv.k3j9x2.tmp``): hidden, and never mistaken for an output.

`staged_directory` does the same for a directory of outputs (a round's ``--out``): everything is
written into a temporary directory beside it, which replaces the old directory whole once complete.

`refuse_overwriting_inputs` is the check that an output path is not one of the command's inputs
(``-o data.csv`` on ``data.csv``), which the commands skip with ``--force``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from coutil.errors import InputError

TEMP_SUFFIX = ".tmp"


def _umask() -> int:
    # os.umask has no read-only form: set and restore (mkstemp's 0600 must become the usual mode).
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temp_prefix(target: Path) -> str:
    return f".{target.name}."


def fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not possible everywhere (some file systems refuse): best effort.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; on success it replaces ``path`` atomically.

    ``mode`` is ``"w"`` (text, ``encoding``/``newline`` as for `open`) or ``"wb"``. On any exception
    (KeyboardInterrupt included) the temporary file is removed and ``path`` is left as it was.
    Parent directories are created. `OSError` is raised as `InputError` naming the file.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode {mode!r} (expected 'w' or 'wb')")
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{target}: cannot write: it is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent)
    except OSError as exc:
        raise InputError(f"{target}: cannot write ({exc.strerror or exc})") from None
    temp = Path(temp_name)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        if mode == "wb":
            handle: IO[Any] = os.fdopen(fd, "wb")
        else:
            handle = os.fdopen(fd, "w", encoding=encoding, newline=newline)
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        if isinstance(exc, OSError):
            raise InputError(f"{target}: cannot write ({exc.strerror or exc})") from None
        raise
    fsync_directory(target.parent)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (`atomic_write`)."""
    with atomic_write(path, newline="") as handle:
        handle.write(text)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (`atomic_write`)."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)


@contextlib.contextmanager
def staged_directory(path: str | Path, *, replaceable: Iterable[str] | None = None) -> Iterator[Path]:
    """A temporary directory beside ``path``, which replaces ``path`` whole when the block succeeds.

    On any exception (KeyboardInterrupt included) the temporary directory is removed and ``path``
    is left untouched. An existing ``path`` is replaced whole (nothing of an older run survives in
    it), but only if it holds nothing beyond the names in ``replaceable`` (when given): a directory
    holding anything else is refused with `InputError` rather than deleted.
    """
    target = Path(path)
    check_replaceable_directory(target, replaceable)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent))
    except OSError as exc:
        raise InputError(f"{target}: cannot create the output directory ({exc.strerror or exc})") from None
    try:
        os.chmod(staging, 0o777 & ~_umask())
        yield staging
        check_replaceable_directory(target, replaceable)
        old: Path | None = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".old" + TEMP_SUFFIX, dir=target.parent))
            os.replace(target, old / "previous")
        os.replace(staging, target)
        fsync_directory(target.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_replaceable_directory(target: Path, replaceable: Iterable[str] | None) -> None:
    """`InputError` unless ``target`` is absent, or a directory holding only names in ``replaceable``."""
    if not target.exists():
        return
    if not target.is_dir():
        raise InputError(f"{target}: exists and is not a directory")
    if replaceable is None:
        return
    allowed = set(replaceable)
    try:
        others = sorted(name for name in os.listdir(target) if name not in allowed)
    except OSError as exc:
        raise InputError(f"{target}: cannot read the output directory ({exc.strerror or exc})") from None
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise InputError(f"{target}: holds files that are not outputs of a round ({shown}); it would be replaced "
                         "whole: choose another output directory")


def same_path(a: Path, b: Path) -> bool:
    """Whether two paths name one file (through links too; by resolved path when either is missing)."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def _inside(child: Path, directory: Path) -> bool:
    try:
        child.resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True


def refuse_overwriting_inputs(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None], *,
                              force: bool = False, directories: Iterable[str] = ()) -> None:
    """`InputError` (exit 2) when an output path is one of the inputs (or, for an output directory
    named in ``directories``, holds one), unless ``force``. Keys are the options' names."""
    if force:
        return
    as_directory = set(directories)
    for out_name, out_path in outputs.items():
        if out_path is None:
            continue
        for in_name, in_path in inputs.items():
            if in_path is None:
                continue
            clash = _inside(in_path, out_path) if out_name in as_directory else same_path(out_path, in_path)
            if clash:
                what = "holds" if out_name in as_directory else "is"
                raise InputError(f"{out_name} {out_path} {what} the input {in_name} {in_path}: it would be "
                                 "overwritten; choose another output (or pass --force)")


def present(path: Path) -> bool:
    """Whether ``path`` names something, a symbolic link included (a loop, or one to nothing): `Path.exists`
    answers False for those, which would take a file the user gave for one that is absent."""
    return path.exists() or path.is_symlink()


def read_regular_bytes(path: str | Path) -> bytes:
    """The bytes of ``path``, which must be a regular file (symbolic links followed).

    `OSError` (its ``strerror`` one line) for anything else: missing, a symbolic link loop, a directory, or a
    FIFO, socket or device, which is refused before a byte is read: a FIFO opened without O_NONBLOCK waits for
    a writer, and a read of one or of a device may never end (found fuzzing `coutil verify`: it hung).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
            raise OSError(errno.EINVAL, f"not a regular file ({kind})", str(path))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as handle:
            fd = -1  # closed with the handle
            return handle.read()
    finally:
        if fd >= 0:
            os.close(fd)


def read_toml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """A TOML file's document; every way it can be unreadable is a one-line `InputError` naming it."""
    p = Path(path)
    try:
        with p.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a {what}") from None
    except PermissionError:
        raise InputError(f"{path}: cannot read the {what} (permission denied)") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text (TOML) file") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
