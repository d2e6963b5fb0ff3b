"""The conventions of both command lines (``txn`` and ``tms``), in one module, for every
command added to them.

* **Output.** A command that lists things takes ``--output table|json``
  (``add_output_options``) and hands its records to ``emit``. ``table`` is aligned
  columns for people, each value rendered by its column's kind (times, sizes, durations,
  rates, payloads: below). ``json`` is one JSON document for programs: a listing is an
  array of objects, keys in camelCase as in the REST API, times in milliseconds since
  the epoch, sizes in bytes, payloads base64. A stream (``tms tail``) prints one line per
  record: a table row without header, or one JSON object per line.
* **Times** are shown as ISO-8601 with milliseconds in the local time zone with its
  offset (``2024-05-01T12:00:00.123+02:00``), or in UTC (``…Z``) with ``--utc``. Times
  are read (``parse_time``) as milliseconds since the epoch or as ISO-8601 (local time
  unless it carries an offset or ``Z``).
* **Durations** are read as ``90``, ``90s``, ``15m``, ``12h``, ``7d``
  (``parse_duration``: seconds) and shown in the largest whole unit (``7d``, ``90m``).
* **Payloads** in text are UTF-8 with every control character and undecodable byte
  escaped (``\\n``, ``\\x1b``, ``\\xff``; a backslash doubled), so a payload can break
  neither the line structure nor the terminal; ``--payload hex`` shows hex instead.
* **Mutating commands say what they did**, one line on stdout, past tense:
  ``created topic demo:events (ttl 7d)``.
* **Long operations** show a progress bar with its rate on stderr (``progress``) when
  stderr is a terminal or with ``--progress``; never with ``--no-progress``.
* **Errors** are one line on stderr, ``PROG: message``, exit status 1 (``guarded``); bad
  usage is exit status 2 (argparse); Ctrl-C is 130, without a traceback.
* **Every option and positional has help text**; the tests walk every parser
  (``walk``) and fail on one without.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TextIO

__all__ = [
    "Column",
    "Style",
    "add_completion_command",
    "add_output_options",
    "add_payload_option",
    "add_progress_options",
    "add_version_option",
    "completion_script",
    "emit",
    "emit_object",
    "escape_payload",
    "format_bytes",
    "format_duration",
    "format_rate",
    "format_time",
    "guarded",
    "one_line",
    "parse_duration",
    "parse_time",
    "progress",
    "render",
    "said",
    "walk",
]

KINDS = ("text", "int", "time", "bytes", "duration", "rate", "payload", "hex")


def add_version_option(parser: argparse.ArgumentParser, prog: str) -> None:
    """``--version``: ``PROG VERSION`` of the installed txms distribution."""
    try:
        installed = version("txms")
    except PackageNotFoundError:  # running from a source tree that was never installed
        installed = "unknown"
    parser.add_argument(
        "--version",
        action="version",
        version=f"{prog} {installed}",
        help="print the version and exit",
    )


def add_output_options(parser: argparse.ArgumentParser, *, times: bool = True) -> None:
    """``--output table|json`` (and ``--utc`` when the output has times)."""
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="table: aligned columns for people (default); json: for programs",
    )
    if times:
        parser.add_argument(
            "--utc", action="store_true", help="show times in UTC instead of local time"
        )


def add_payload_option(parser: argparse.ArgumentParser) -> None:
    """``--payload text|hex`` for commands that show payloads in text."""
    parser.add_argument(
        "--payload",
        choices=("text", "hex"),
        default="text",
        help="how payloads show in table output: text (UTF-8, anything else escaped; "
        "default) or hex",
    )


def add_progress_options(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` (default: when stderr is a terminal)."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar with rates on stderr (default: when stderr is a terminal)",
    )


# -- values -----------------------------------------------------------------------------


def format_time(ms: int | None, *, utc: bool = False) -> str:
    """ISO-8601 with milliseconds: local time with its offset, or UTC with ``Z``."""
    if ms is None:
        return "-"
    seconds, millis = divmod(int(ms), 1000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=millis * 1000)
    if utc:
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return moment.astimezone().isoformat(timespec="milliseconds")


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from ``text``: an integer (already milliseconds) or
    ISO-8601 (local time unless it carries an offset or ``Z``). ``ValueError`` else."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (milliseconds since the epoch, or ISO-8601 such as "
            "2024-05-01T12:00:00 or 2024-05-01T10:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a naive time is local time
    return round(moment.timestamp() * 1000)


_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def parse_duration(text: str) -> int:
    """Whole seconds from ``90``, ``90s``, ``15m``, ``12h`` or ``7d``; ``ValueError``
    for anything else (zero and negative included)."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", text)
    if match is None or int(match.group(1)) <= 0:
        raise ValueError(f"not a duration: {text!r} (e.g. 90, 90s, 15m, 12h, 7d)")
    factor = dict(_UNITS).get(match.group(2) or "s", 1)
    return int(match.group(1)) * factor


def format_duration(seconds: int | float | None) -> str:
    """``7d``, ``90m``, ``45s``: the largest unit that divides the value; ``1.5s``
    below a minute when not whole."""
    if seconds is None:
        return "-"
    if seconds != int(seconds):
        return f"{seconds:.3g}s"
    whole = int(seconds)
    for unit, size in _UNITS:
        if whole and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def format_bytes(n: int | float | None) -> str:
    """``512 B``, ``1.5 KiB``, ``20 MiB``."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_rate(per_s: float | None, unit: str = "/s") -> str:
    """``0``, ``12.5/s``, ``3.4k/s``."""
    if per_s is None or math.isnan(per_s):
        return "-"
    if per_s == 0:
        return "0"
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= size:
            return f"{per_s / size:.3g}{suffix}{unit}"
    return f"{per_s:.3g}{unit}"


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_payload(data: bytes) -> str:
    """The payload as text: UTF-8, with control and format characters, undecodable
    bytes and backslashes escaped (one line, inert in a terminal)."""
    out: list[str] = []
    for ch in data.decode("utf-8", "surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as surrogateescape keeps it
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs"):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Style:
    """How values render in table output (from the command's options)."""

    utc: bool = False
    payload: str = "text"

    @classmethod
    def of(cls, args: argparse.Namespace) -> Style:
        return cls(utc=bool(getattr(args, "utc", False)), payload=getattr(args, "payload", "text"))


def render(value: Any, kind: str, style: Style) -> str:
    """One value as a table cell, by its column's kind."""
    if value is None:
        return "-"
    if kind == "time":
        return format_time(int(value), utc=style.utc)
    if kind == "bytes":
        return format_bytes(value)
    if kind == "duration":
        return format_duration(value)
    if kind == "rate":
        return format_rate(float(value))
    if kind == "payload":
        data = value if isinstance(value, bytes) else base64.b64decode(value)
        return data.hex() if style.payload == "hex" else escape_payload(data)
    if kind == "int":
        return f"{int(value):,}" if isinstance(value, int) else str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return escape_payload(str(value).encode())


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: its ``header``, the record ``key`` it shows, the ``kind`` that
    renders it (one of ``KINDS``), and whether it is right-aligned (numbers are)."""

    header: str
    key: str
    kind: str = "text"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown column kind {self.kind!r}")

    @property
    def right(self) -> bool:
        return self.kind in ("int", "bytes", "rate", "duration")


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def table_lines(
    records: Sequence[Mapping[str, Any]], columns: Sequence[Column], style: Style, *, header: bool
) -> list[str]:
    """The table's lines: a header (unless ``header`` is False) and one line per record."""
    cells = [[render(r.get(c.key), c.kind, style) for c in columns] for r in records]
    widths = [len(c.header) if header else 0 for c in columns]
    for row in cells:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    rows = [[c.header for c in columns], *cells] if header else cells
    for row in rows:
        parts = [
            cell.rjust(w) if col.right else cell.ljust(w)
            for cell, w, col in zip(row, widths, columns, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


def emit(
    args: argparse.Namespace,
    records: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    *,
    out: TextIO | None = None,
    stream: bool = False,
) -> None:
    """Print ``records``: as a table of ``columns`` or (``--output json``) as JSON: one
    array, or with ``stream`` one object per line and no table header."""
    out = out or sys.stdout
    if getattr(args, "output", "table") == "json":
        if stream:
            for record in records:
                print(json.dumps(_jsonable(record)), file=out, flush=True)
        else:
            print(json.dumps(_jsonable(list(records)), indent=2), file=out)
        return
    for line in table_lines(records, columns, Style.of(args), header=not stream):
        print(line, file=out, flush=stream)


def emit_object(
    args: argparse.Namespace,
    record: Mapping[str, Any],
    fields: Sequence[Column],
    *,
    out: TextIO | None = None,
) -> None:
    """Print one object: ``field  value`` lines, or (``--output json``) a JSON object.
    Keys of ``record`` without a column follow in the table as plain text."""
    out = out or sys.stdout
    if getattr(args, "output", "table") == "json":
        print(json.dumps(_jsonable(dict(record)), indent=2), file=out)
        return
    style = Style.of(args)
    shown = {c.key for c in fields}
    rows = [(c.header, render(record.get(c.key), c.kind, style)) for c in fields]
    rows += [(k, render(v, "text", style)) for k, v in record.items() if k not in shown]
    width = max((len(name) for name, _ in rows), default=0)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}", file=out)


def said(text: str, *, out: TextIO | None = None) -> None:
    """What a mutating command did, in one line on stdout."""
    print(text, file=out or sys.stdout, flush=True)


# -- progress ---------------------------------------------------------------------------


def progress(
    args: argparse.Namespace, *, desc: str, unit: str = "msg", total: int | None = None
) -> Any:
    """A tqdm bar on stderr with counts and rates (``unit/s``), shown when the command's
    ``--progress`` says so, by default when stderr is a terminal. Use as a context
    manager; ``update(n)`` after each step."""
    from tqdm import tqdm  # noqa: PLC0415 - only long operations pay for the import

    wanted = getattr(args, "progress", None)
    enabled = sys.stderr.isatty() if wanted is None else bool(wanted)
    return tqdm(
        desc=desc,
        unit=unit,
        total=total,
        disable=not enabled,
        file=sys.stderr,
        mininterval=0.2,
        dynamic_ncols=True,
    )


# -- errors -----------------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its class name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def guarded(prog: str, errors: tuple[type[BaseException], ...], command: Callable[[], int]) -> int:
    """Run ``command``; one of ``errors`` becomes ``PROG: message`` on stderr and exit
    status 1, Ctrl-C exit status 130, both without a traceback."""
    try:
        return command()
    except errors as exc:
        print(f"{prog}: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


# -- completion -------------------------------------------------------------------------


def add_completion_command(
    commands: Any, prog: str, build_parser: Callable[[], argparse.ArgumentParser]
) -> None:
    """``PROG completion bash|zsh``: print the completion script of ``build_parser()``
    (generated by shtab from the parser, so every command and option completes)."""
    cmd = commands.add_parser(
        "completion",
        help="print the bash or zsh completion script",
        description=f"Print a completion script: 'source <({prog} completion bash)' in "
        f"~/.bashrc; for zsh, write it to a file named _{prog} in a directory of $fpath.",
    )
    cmd.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete in")

    def run(args: argparse.Namespace) -> int:
        print(completion_script(build_parser(), args.shell))
        return 0

    cmd.set_defaults(handler=run, client=False)


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The script completing ``parser``'s commands and options in ``shell``."""
    import shtab  # noqa: PLC0415 - only the completion command needs it

    script: str = shtab.complete(parser, shell=shell)
    return script


# -- parsers ----------------------------------------------------------------------------


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser under ``parser`` (itself first) with its command path."""
    yield path, parser
    for action in parser._actions:  # argparse keeps sub-parsers here and nowhere else
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """``command --option`` for every option, positional and sub-command of every parser
    under ``parser`` that has no help text."""
    missing: list[str] = []
    for path, sub in walk(parser):
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {a.dest for a in action._choices_actions if a.help}
                missing += [" ".join((*path, n)) for n in action.choices if n not in helped]
                continue
            if action.help in (None, "") and action.help is not argparse.SUPPRESS:
                name = "/".join(action.option_strings) or action.dest
                missing.append(" ".join((*path, name)))
    return missing


def choices_of(values: Iterable[str]) -> str:
    """``a, b or c``."""
    items = list(values)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]
