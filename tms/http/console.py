"""The operations console: static files under ``/ui`` and ``GET /v1/console``, what the
page needs to know at login.

The page (``tms/console/``: plain ES modules, Preact + htm and uPlot vendored as files,
no build step) holds no data: everything it shows comes from the REST API with the
bearer token the user logged in with, so the API's access rules are the console's.
Its files are public (``/ui``, ``/ui/``, ``/ui/{name}``, ``/ui/vendor/{name}``); only
names of files in the package are served, with a Content-Security-Policy that lets the
page load nothing but its own files and talk to nothing but this service.

``GET /v1/console`` (any valid token) answers who the caller is, their grants (the page
hides what they may not do; the API refuses it anyway), the namespaces they may look
at, and the service's ``features``: a panel of the page is shown only when the feature
it needs is reported here (docs/console.md, "Adding a panel").
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from aiohttp import web

from tms.http.auth import Authorizer, Permission
from tms.service import MessagingService

__all__ = ["CONSOLE_DIR", "ConsoleApi"]

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_SERVICE_READ = (Permission.METRICS, Permission.ADMIN)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _import_map_hash(index: str) -> str:
    """The CSP source of the page's one inline script, its import map."""
    match = re.search(r'<script type="importmap">(.*?)</script>', index, re.DOTALL)
    if match is None:
        return ""
    digest = hashlib.sha256(match.group(1).encode()).digest()
    return f" 'sha256-{base64.b64encode(digest).decode()}'"


def _policy() -> str:
    index = (CONSOLE_DIR / "index.html").read_text(encoding="utf-8")
    return (
        "default-src 'self'; "
        f"script-src 'self'{_import_map_hash(index)}; "
        "style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )


class ConsoleApi:
    svc: MessagingService
    pool: ThreadPoolExecutor
    auth: Authorizer | None
    features: dict[str, bool]
    _csp: str | None = None

    def _file(self, directory: Path, name: str) -> web.Response:
        suffix = Path(name).suffix
        if not _NAME.fullmatch(name) or name.startswith(".") or suffix not in _TYPES:
            raise web.HTTPNotFound()
        path = directory / name
        if not path.is_file():
            raise web.HTTPNotFound()
        if self._csp is None:
            self._csp = _policy()
        return web.Response(
            body=path.read_bytes(),
            content_type=_TYPES[suffix],
            charset="utf-8" if suffix != ".png" else None,
            headers={
                "Content-Security-Policy": self._csp,
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-cache",
            },
        )

    async def console_redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def console_index(self, request: web.Request) -> web.Response:
        return self._file(CONSOLE_DIR, "index.html")

    async def console_file(self, request: web.Request) -> web.Response:
        return self._file(CONSOLE_DIR, request.match_info["name"])

    async def console_vendor(self, request: web.Request) -> web.Response:
        return self._file(CONSOLE_DIR / "vendor", request.match_info["name"])

    async def console_info(self, request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        return web.json_response(await loop.run_in_executor(self.pool, self._info, request))

    def _info(self, request: web.Request) -> dict[str, Any]:
        namespaces = sorted({m.topic.namespace for m in self.svc.all_topics()})
        try:
            service_version = version("txms")
        except PackageNotFoundError:
            service_version = "unknown"
        info: dict[str, Any] = {"version": service_version, "features": dict(self.features)}
        if self.auth is None:
            info.update(
                authentication=False,
                principal=None,
                grants=None,
                namespaces=namespaces,
                metrics=True,
            )
            return info
        principal = self.auth.authenticate(request.headers.get("Authorization"))
        grants = self.auth.grants_for(principal)
        visible = [n for n in namespaces if any(g.namespace in ("*", n) for g in grants)]
        info.update(
            authentication=True,
            principal=principal,
            grants=[
                {
                    "namespace": g.namespace,
                    "topic": g.topic,
                    "permissions": sorted(p.value for p in g.permissions),
                }
                for g in grants
            ],
            namespaces=visible,
            metrics=any(g.allows(principal, "*", "*", p) for g in grants for p in _SERVICE_READ),
        )
        return info
