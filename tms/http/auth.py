"""Bearer-token authentication and per-namespace/topic authorization.

Configured from a TOML file::

    [[tokens]]
    token = "s3cret"
    principal = "alice"

    [[grants]]
    principal = "alice"
    namespace = "default"      # or "*"
    topic = "*"                # or a topic name
    permissions = ["read", "write", "admin"]

``read`` covers getting and listing topics, polling and bounds; ``write`` publishing,
storing, rolling back and commit markers; ``admin`` creating, updating, deleting and
inspecting topics; ``metrics`` reading ``/metrics``, which spans every namespace, so it
needs a grant on namespace ``"*"`` and topic ``"*"`` (``admin`` there includes it). With no
authorizer the service is open to anonymous callers; with one, every request but
``GET /ping`` needs a valid ``Authorization: Bearer <token>`` (401 otherwise) and, where
its route names a permission (``tms.http.routes``), a matching grant (403 otherwise).
"""

from __future__ import annotations

import enum
import hmac
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tms.errors import ForbiddenError, TmsInvalidArgumentError, UnauthenticatedError

__all__ = ["Authorizer", "Grant", "Permission"]


class Permission(enum.Enum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    METRICS = "metrics"


@dataclass(frozen=True, slots=True)
class Grant:
    principal: str
    namespace: str
    topic: str
    permissions: frozenset[Permission]

    def allows(
        self, principal: str, namespace: str, topic: str | None, permission: Permission
    ) -> bool:
        return (
            self.principal == principal
            and self.namespace in ("*", namespace)
            and (self.topic == "*" or (topic is not None and self.topic == topic))
            and permission in self.permissions
        )


class Authorizer:
    def __init__(self, tokens: dict[str, str], grants: Iterable[Grant]) -> None:
        if not tokens:
            raise TmsInvalidArgumentError("authentication needs at least one token")
        self._tokens = dict(tokens)
        self._grants = list(grants)

    @classmethod
    def from_file(cls, path: str | Path) -> Authorizer:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise TmsInvalidArgumentError(f"cannot read the auth file {path}: {exc}") from exc
        tokens: dict[str, str] = {}
        for entry in data.get("tokens", []):
            token, principal = entry.get("token"), entry.get("principal")
            if not isinstance(token, str) or not token or not isinstance(principal, str):
                raise TmsInvalidArgumentError(f"{path}: every token needs 'token' and 'principal'")
            tokens[token] = principal
        grants = []
        for entry in data.get("grants", []):
            try:
                perms = frozenset(Permission(p) for p in entry["permissions"])
                grants.append(
                    Grant(
                        entry["principal"],
                        entry.get("namespace", "*"),
                        entry.get("topic", "*"),
                        perms,
                    )
                )
            except (KeyError, ValueError, TypeError) as exc:
                raise TmsInvalidArgumentError(f"{path}: bad grant {entry!r}: {exc}") from exc
        return cls(tokens, grants)

    def authenticate(self, authorization: str | None) -> str:
        """The principal of an ``Authorization`` header value; ``UnauthenticatedError`` for
        anything else, whatever its bytes (the server hands over undecodable header bytes
        as lone surrogates)."""
        if not authorization or not authorization.startswith("Bearer "):
            raise UnauthenticatedError("a bearer token is required")
        try:
            offered = authorization[len("Bearer ") :].strip().encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UnauthenticatedError("the bearer token is not valid") from exc
        found = None
        for token, principal in self._tokens.items():
            # Every token is compared, so the time taken does not tell which one matched.
            if hmac.compare_digest(token.encode(), offered):
                found = principal
        if found is None:
            raise UnauthenticatedError("the bearer token is not valid")
        return found

    def grants_for(self, principal: str) -> list[Grant]:
        """The grants of ``principal`` (what the console shows it may do)."""
        return [g for g in self._grants if g.principal == principal]

    def check(
        self, principal: str, namespace: str, topic: str | None, permission: Permission
    ) -> None:
        """``ForbiddenError`` unless a grant of ``principal`` allows ``permission`` on the
        topic (``topic`` None: on the namespace as a whole, which needs topic ``"*"``)."""
        if not any(g.allows(principal, namespace, topic, permission) for g in self._grants):
            target = f"{namespace}:{topic}" if topic else namespace
            raise ForbiddenError(f"{principal} may not {permission.value} {target}")

    def check_service(self, principal: str, permission: Permission) -> None:
        """``ForbiddenError`` unless ``principal`` holds ``permission`` (or ``admin``) on
        every namespace and topic: for what spans the whole service, like metrics."""
        wanted = (permission, Permission.ADMIN)
        if not any(g.allows(principal, "*", "*", p) for g in self._grants for p in wanted):
            raise ForbiddenError(
                f"{principal} may not read {permission.value}: that needs a grant of "
                f"'{permission.value}' or 'admin' on namespace '*' and topic '*'"
            )
