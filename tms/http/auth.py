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

``read`` covers getting and listing topics and polling; ``write`` publishing, storing and
rolling back; ``admin`` creating, updating and deleting topics. With no authorizer the
service is open to anonymous callers; with one, every route but ``/ping`` needs a valid
``Authorization: Bearer <token>`` (401 otherwise) and a matching grant (403 otherwise).
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
        """The principal of an ``Authorization`` header value."""
        if not authorization or not authorization.startswith("Bearer "):
            raise UnauthenticatedError("a bearer token is required")
        offered = authorization[len("Bearer ") :].strip()
        for token, principal in self._tokens.items():
            if hmac.compare_digest(token.encode(), offered.encode()):
                return principal
        raise UnauthenticatedError("the bearer token is not valid")

    def check(
        self, principal: str, namespace: str, topic: str | None, permission: Permission
    ) -> None:
        if not any(g.allows(principal, namespace, topic, permission) for g in self._grants):
            target = f"{namespace}:{topic}" if topic else namespace
            raise ForbiddenError(f"{principal} may not {permission.value} {target}")
