"""Small named fakes for the harness's own logic."""

from __future__ import annotations

from benchmarks.peers.base import Kind, SystemBase, Workload

#: the harness forks load workers, as the benchmarks do; newer Pythons warn when a
#: process that has threads forks
FORK_WARNING = "ignore:This process .* fork:DeprecationWarning"


class NamedSystem(SystemBase):
    """A system that only has a name, a kind and the workloads it takes part in: what
    the plan looks at."""

    def __init__(self, name: str, kind: Kind, workloads: frozenset[Workload]) -> None:
        self.name = name
        self.kind = kind
        self.workloads = workloads
