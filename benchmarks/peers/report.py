"""Results: the JSON file, the comparison against peers and limits, markdown and plots.

Pure functions over ``Record``s except ``write_results`` / ``read_results`` (files, in
the result-file format of ``benchmarks.common``) and
``plot`` (PNG files; matplotlib is imported there and only there, from the ``bench``
extra).

Ratios always read the same way, whatever the unit:

* ``vs_peer`` > 1 means txms is ahead of the best *durable* peer (one whose every
  acknowledged write is fsynced: Redis with ``appendfsync always``, PostgreSQL);
  for rates it is txms / peer, for times (latency, read cost) peer / txms;
* ``vs_limit`` is the share of the physical limit txms reaches (1.0 = at the limit): for
  rates txms / limit, for times limit / txms. With several limits for one point (raw
  LevelDB and raw HTTP for publish) the limit is the tighter one; a transactional
  publish is held to the limits of the plain publish of the same batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import write_report

__all__ = [
    "Record",
    "Results",
    "Row",
    "compare",
    "markdown",
    "overheads",
    "plot",
    "read_results",
    "series",
    "write_results",
]

TXMS = "txms"
#: the systems whose figures are compared with the best peer, each in its own column
COMPARED = ("txms", "txms-rpc")
FORMAT_VERSION = 1
#: a figure measured while other processes used this much CPU on average is marked
DISTURBED_CPUS = 0.25


@dataclass(frozen=True)
class Record:
    """One measurement of one system at one point of one workload."""

    workload: str
    params: dict[str, Any]
    system: str
    value: float
    unit: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def higher_is_better(self) -> bool:
        return self.unit.endswith("/s")

    @property
    def point(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """The workload and its parameters: what makes records comparable."""
        return self.workload, tuple(self.params.items())

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "params": self.params,
            "system": self.system,
            "value": self.value,
            "unit": self.unit,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        return cls(
            str(data["workload"]),
            dict(data["params"]),
            str(data["system"]),
            float(data["value"]),
            str(data["unit"]),
            dict(data.get("extra", {})),
        )


@dataclass(frozen=True)
class Results:
    """A run: ``meta`` (when, machine, settings, versions), ``systems`` (name -> kind,
    description, durable) and the records in the order they were measured."""

    meta: dict[str, Any]
    systems: dict[str, dict[str, Any]]
    records: list[Record]


def write_results(path: Path, results: Results) -> None:
    """One JSON document: the meta fields (``benchmark``, ``when``, ``machine`` from
    ``benchmarks.common.new_report``, then the run's own), ``systems`` and ``records``."""
    document = {
        "benchmark": "peers",
        **results.meta,
        "format": FORMAT_VERSION,
        "systems": results.systems,
        "records": [r.to_json() for r in results.records],
    }
    write_report(path, document)


def read_results(path: Path) -> Results:
    document = json.loads(path.read_text())
    if document.get("benchmark") != "peers" or document.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path} is not a peers benchmark result (format {FORMAT_VERSION})")
    records = [Record.from_json(r) for r in document.pop("records")]
    systems = document.pop("systems")
    document.pop("format")
    return Results(document, systems, records)


# -- comparison -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One point of one workload, every system's value, and txms against the others."""

    workload: str
    params: dict[str, Any]
    unit: str
    values: dict[str, float]
    best_peer: str | None
    limit: str | None
    vs_peer: float | None
    vs_limit: float | None
    #: systems whose figure was measured while other processes used the machine
    disturbed: frozenset[str] = frozenset()
    #: each of ``COMPARED`` measured here against the best peer (``vs_peer`` is "txms")
    vs_peers: dict[str, float | None] = field(default_factory=dict)


def _speed(txms: float, other: float, higher_is_better: bool) -> float | None:
    """How many times better txms is than ``other`` (> 1: txms ahead)."""
    if higher_is_better:
        return txms / other if other else None
    return other / txms if txms else None


#: a workload whose limit is another's at the same point: a transactional publish cannot
#: beat a plain write of the same batch
_LIMIT_FROM = {"tx_publish": "publish"}


def compare(records: Iterable[Record], systems: Mapping[str, Mapping[str, Any]]) -> list[Row]:
    """A row per point, in the order points were first measured."""
    groups: dict[tuple[str, tuple[tuple[str, Any], ...]], list[Record]] = {}
    for record in records:
        groups.setdefault(record.point, []).append(record)
    peers = {n for n, m in systems.items() if m["kind"] == "peer" and m["durable"]}
    limits = {n for n, m in systems.items() if m["kind"] == "limit"}
    rows = []
    for group in groups.values():
        first = group[0]
        better = first.higher_is_better
        values = {r.system: r.value for r in group}
        pick = max if better else min
        peer_values = {n: v for n, v in values.items() if n in peers}
        best_peer = pick(peer_values, key=peer_values.__getitem__) if peer_values else None
        limit_values = {n: v for n, v in values.items() if n in limits}
        if not limit_values and first.workload in _LIMIT_FROM:
            borrowed = groups.get((_LIMIT_FROM[first.workload], first.point[1]), [])
            limit_values = {r.system: r.value for r in borrowed if r.system in limits}
        # the tighter bound: the lowest ceiling on a rate, the highest floor under a time
        tight = min if better else max
        limit = tight(limit_values, key=limit_values.__getitem__) if limit_values else None
        txms = values.get(TXMS)
        vs_peer = vs_limit = None
        if txms is not None and best_peer is not None:
            vs_peer = _speed(txms, values[best_peer], better)
        if txms is not None and limit is not None:
            vs_limit = _speed(txms, limit_values[limit], better)
        disturbed = frozenset(
            r.system for r in group if r.extra.get("other_cpus", 0.0) >= DISTURBED_CPUS
        )
        vs_peers = {
            name: _speed(values[name], values[best_peer], better) if best_peer else None
            for name in COMPARED
            if name in values
        }
        rows.append(
            Row(
                first.workload,
                first.params,
                first.unit,
                values,
                best_peer,
                limit,
                vs_peer,
                vs_limit,
                disturbed,
                vs_peers,
            )
        )
    return rows


def overheads(records: Iterable[Record]) -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
    """Transactional over plain publish rate, per system and point ((system, params) ->
    ratio), where both were measured."""
    plain: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    tx: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    for r in records:
        key = (r.system, tuple(sorted(r.params.items())))
        if r.workload == "publish":
            plain[key] = r.value
        elif r.workload == "tx_publish":
            tx[key] = r.value
    return {k: v / plain[k] for k, v in tx.items() if plain.get(k)}


def series(
    records: Iterable[Record], workload: str, x: str, where: Mapping[str, Any] | None = None
) -> dict[str, list[tuple[Any, float]]]:
    """For a plot: per system, (params[x], value) of the workload's records whose other
    params match ``where``, sorted by x."""
    out: dict[str, list[tuple[Any, float]]] = {}
    for r in records:
        if r.workload != workload or x not in r.params:
            continue
        if where and any(r.params.get(k) != v for k, v in where.items()):
            continue
        out.setdefault(r.system, []).append((r.params[x], r.value))
    return {name: sorted(points) for name, points in out.items()}


# -- markdown ---------------------------------------------------------------------------------

_TITLES = {
    "publish": "Durable publish (messages/s)",
    "pipelined": "Durable publish, one message per request, requests in flight (messages/s)",
    "tx_publish": "Transactional publish, 100-byte messages (messages/s)",
    "tx_cycle": "Transaction cycles (durable transactions/s)",
    "consume": "Consume from the start of a topic (messages/s)",
    "tail": "Consume at the tail: the newest messages, from a cursor (messages/s)",
    "latency": "Publish -> consumer latency at a fixed offered rate (p99, ms)",
    "growth": "Read cost as the topic grows (ms per 1,000 messages)",
    "queue": "Work queue: enqueue + receive + ack, competing workers (messages/s)",
}
_PARAM_NAMES = {
    "message_bytes": "bytes",
    "batch": "batch",
    "producers": "producers",
    "clients": "clients",
    "topic_messages": "topic",
    "page": "page",
    "rate": "rate/s",
    "at": "read at",
    "window": "in flight",
    "connections": "connections",
    "workers": "workers",
}


def _number(value: float, unit: str) -> str:
    if unit.endswith("/s"):
        return f"{value:,.0f}"
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}\u00d7"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _param(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown(results: Results) -> str:
    """A table per workload: the point, every system's value, txms against the best
    durable peer and against the limit (and, for transactional publish, each system's
    transactional / plain ratio)."""
    rows = compare(results.records, results.systems)
    tx_over = overheads(results.records)
    order = [n for n in results.systems if any(n in r.values for r in rows)]
    out: list[str] = []
    for workload, title in _TITLES.items():
        mine = [r for r in rows if r.workload == workload]
        if not mine:
            continue
        names = [n for n in order if any(n in r.values for r in mine)]
        params = list(mine[0].params)
        compared = [n for n in COMPARED if n in names and n != TXMS]
        head = (
            [_PARAM_NAMES.get(p, p) for p in params]
            + names
            + ["txms vs best peer", *(f"{n} vs best peer" for n in compared), "txms / limit"]
        )
        if workload == "tx_publish":
            head += [f"{n} tx/plain" for n in names]
        out += [f"### {title}", "", "| " + " | ".join(head) + " |"]
        out.append("|" + "|".join(["---:"] * len(head)) + "|")
        for row in mine:
            cells = [_param(row.params[p]) for p in params]
            cells += [
                _number(row.values[n], row.unit) + (" †" if n in row.disturbed else "")
                if n in row.values
                else "—"
                for n in names
            ]
            peer = f"{_ratio(row.vs_peer)} ({row.best_peer})" if row.best_peer else "—"
            cells += [peer, *(_ratio(row.vs_peers.get(n)) for n in compared)]
            cells.append(_share(row.vs_limit))
            if workload == "tx_publish":
                key_params = tuple(sorted(row.params.items()))
                cells += [_share(tx_over.get((n, key_params))) for n in names]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    if any(row.disturbed for row in rows):
        out.append(
            f"† measured while other processes on the machine used {DISTURBED_CPUS} CPU or"
            " more on average (the figure is likely low)."
        )
        out.append("")
    return "\n".join(out)


# -- plots ------------------------------------------------------------------------------------

_COLORS = {
    "txms": "#1f77b4",
    "txms-rpc": "#9467bd",
    "txms-lean": "#6baed6",
    "redis-always": "#d62728",
    "redis-everysec": "#ff9896",
    "postgres": "#2ca02c",
    "plyvel": "#7f7f7f",
    "http-echo": "#bcbd22",
}


def _lines(
    ax: Any,
    records: list[Record],
    workload: str,
    x: str,
    where: Mapping[str, Any],
    *,
    categorical: bool = False,
) -> None:
    """One line per system; x on a log scale with a tick at every measured x (or, if
    ``categorical``, evenly spaced labels)."""
    ticks: set[Any] = set()
    for name, points in series(records, workload, x, where).items():
        xs = [f"{p[0]:,}" if categorical else p[0] for p in points]
        ticks.update(p[0] for p in points)
        style = "--" if name in ("plyvel", "http-echo") else "-"
        ax.plot(xs, [p[1] for p in points], style, marker="o", label=name, color=_COLORS.get(name))
    if not categorical and ticks:
        ax.set_xscale("log")
        ax.set_xticks(sorted(ticks), [f"{t:,}" for t in sorted(ticks)])
        ax.minorticks_off()
    _log_y(ax)
    ax.set_title(", ".join(f"{_PARAM_NAMES.get(k, k)} {v}" for k, v in where.items()), fontsize=9)
    ax.grid(True, alpha=0.3)


def _log_y(ax: Any) -> None:
    """A log y axis labelled in plain numbers (1,000 rather than 10^3), no minor labels."""
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(
        ticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    )
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def plot(results: Results, out_dir: Path, prefix: str = "peers") -> list[Path]:
    """PNG figures (publish, reads, latency, transactions, growth); the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = results.records
    s = results.meta.get("settings", {})
    written: list[Path] = []
    out_dir.mkdir(parents=True, exist_ok=True)

    def save(fig: Any, name: str, title: str) -> None:
        fig.suptitle(title)
        handles, labels = [], []
        for ax in fig.axes:
            for h, lbl in zip(*ax.get_legend_handles_labels(), strict=True):
                if lbl not in labels:
                    handles.append(h)
                    labels.append(lbl)
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 7), fontsize=8)
        fig.tight_layout(rect=(0, 0.06, 1, 0.95))
        path = out_dir / f"{prefix}-{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    sizes, batches = s.get("message_bytes", []), s.get("batches", [])
    if any(r.workload == "publish" for r in records) and sizes and batches:
        fig, axes = plt.subplots(
            len(sizes), len(batches), figsize=(4 * len(batches), 3.2 * len(sizes)), squeeze=False
        )
        for i, size in enumerate(sizes):
            for j, batch in enumerate(batches):
                ax = axes[i][j]
                _lines(ax, records, "publish", "producers", {"message_bytes": size, "batch": batch})
                ax.set_xlabel("producers")
                ax.set_ylabel("messages/s")
        save(fig, "publish", "Durable publish throughput")

    if any(r.workload in ("consume", "tail") for r in records):
        fig, axes = plt.subplots(
            1, 1 + len(sizes), figsize=(4.5 * (1 + len(sizes)), 3.6), squeeze=False
        )
        _lines(axes[0][0], records, "consume", "message_bytes", {}, categorical=True)
        axes[0][0].set_title("from the start, 1,000 per read", fontsize=9)
        axes[0][0].set_xlabel("message bytes")
        for j, size in enumerate(sizes):
            _lines(axes[0][j + 1], records, "tail", "page", {"message_bytes": size})
            axes[0][j + 1].set_title(f"at the tail, {size:,}-byte messages", fontsize=9)
            axes[0][j + 1].set_xlabel("messages per read")
        for ax in axes[0]:
            ax.set_ylabel("messages/s")
        save(fig, "consume", "Consume throughput")

    latency = [r for r in records if r.workload == "latency"]
    if latency:
        points = list(dict.fromkeys(tuple(r.params.items()) for r in latency))
        fig, axes = plt.subplots(1, len(points), figsize=(4.5 * len(points), 3.6), squeeze=False)
        for ax, point in zip(axes[0], points, strict=True):
            mine = [r for r in latency if tuple(r.params.items()) == point]
            names = [r.system for r in mine]
            for k, (key, label) in enumerate(
                (("p50_ms", "p50"), ("value", "p99"), ("p999_ms", "p99.9"))
            ):
                values = [r.value if key == "value" else r.extra[key] for r in mine]
                ax.bar(
                    [i + (k - 1) * 0.27 for i in range(len(mine))],
                    values,
                    0.27,
                    label=label,
                    alpha=0.4 + 0.3 * k,
                    color="#444",
                )
            ax.set_xticks(range(len(mine)), names, rotation=30, fontsize=8)
            _log_y(ax)
            ax.set_ylabel("ms")
            ax.set_title(", ".join(f"{_PARAM_NAMES.get(k, k)} {v}" for k, v in point), fontsize=9)
        save(fig, "latency", "Publish -> consumer latency (p50, p99, p99.9)")

    if any(r.workload in ("tx_publish", "tx_cycle") for r in records):
        producers = s.get("tx_producers", [])
        fig, axes = plt.subplots(
            1, 1 + len(producers), figsize=(4.5 * (1 + len(producers)), 3.6), squeeze=False
        )
        for j, p in enumerate(producers):
            _lines(axes[0][j], records, "tx_publish", "batch", {"producers": p})
            axes[0][j].set_xlabel("messages per transaction")
            axes[0][j].set_ylabel("messages/s")
        _lines(axes[0][-1], records, "tx_cycle", "clients", {})
        axes[0][-1].set_title("transaction cycles", fontsize=9)
        axes[0][-1].set_xlabel("clients")
        axes[0][-1].set_ylabel("transactions/s")
        save(fig, "tx", "Transactional publish and transaction cycles")

    if any(r.workload == "growth" for r in records):
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), squeeze=False)
        for ax, at in zip(axes[0], ("tail", "middle"), strict=True):
            _lines(ax, records, "growth", "topic_messages", {"at": at})
            ax.set_xlabel("messages in the topic")
            ax.set_ylabel("ms per 1,000 messages read")
        save(fig, "growth", "Read cost as the topic grows")
    return written
