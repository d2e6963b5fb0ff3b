"""The fenced code blocks of README.md and docs/*.md, with their test markers.

A block runs as written unless the line right above its fence says otherwise:
``<!-- doc-test: skip (reason) -->`` (not run; the reason is required),
``<!-- doc-test: continue -->`` (runs in the names of the document's previous block),
``<!-- doc-test: spark -->`` / ``<!-- doc-test: spark continue -->`` (run by the Spark
tests, in one process with a Spark session).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
STACK_URL = "http://127.0.0.1:15166"
TX_ADDRESS = "127.0.0.1:15165"
RPC_URL = "tms://127.0.0.1:15167"

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!-- doc-test: (.+?) -->\s*$")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    marker: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def skipped(self) -> bool:
        return self.marker.startswith("skip")

    @property
    def continues(self) -> bool:
        return self.marker.endswith("continue")

    @property
    def spark(self) -> bool:
        return self.marker.startswith("spark")


def blocks(document: Path) -> list[Block]:
    lines = document.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        end = i + 1
        while not lines[end].startswith("```"):
            end += 1
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(
            Block(document, i + 1, match.group(1), marker.group(1) if marker else "", code)
        )
        i = end + 1
    return found


def substitute(code: str, url: str, tx_address: str, rpc_url: str = RPC_URL) -> str:
    """The block with the default addresses replaced by those of a test's servers."""
    return code.replace(STACK_URL, url).replace(TX_ADDRESS, tx_address).replace(RPC_URL, rpc_url)
