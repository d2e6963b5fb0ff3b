"""The table of operations is complete: every entry has what the server does with it (a
write's operation and answer, or a read's handler), a permission, and a place in
docs/rpc.md."""

from __future__ import annotations

from pathlib import Path

from tms.http.auth import Permission
from tms.rpc.backend import Backend
from tms.rpc.ops import HELLO, OPS

DOC = (Path(__file__).parents[3] / "docs" / "rpc.md").read_text()


def test_every_operation_has_a_handler_and_a_permission() -> None:
    for op in OPS:
        if op is HELLO:
            assert op.permission is None
            continue
        if op.write is None:
            assert callable(getattr(Backend, op.handler)), op
        else:
            assert callable(op.answer), op
        assert isinstance(op.permission, Permission), op


def test_every_operation_is_documented() -> None:
    for op in OPS:
        assert f"| {op.code} | `{op.name}` |" in DOC, op.name
        assert op.request.__name__ in DOC and op.response.__name__ in DOC, op.name
