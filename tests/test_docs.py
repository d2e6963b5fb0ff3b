"""Every code block of README.md and docs/*.md runs as written, against the real servers
(started here on port 0, their addresses put in place of the defaults); the blocks that
cannot run here say why (``tests/docblocks.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.docblocks import DOCUMENTS, ROOT, STACK_URL, TX_ADDRESS, Block, blocks, substitute
from tests.servers import running_stack
from tms.http.auth import Authorizer
from tms.standalone import try_commands

ALL = [b for document in DOCUMENTS for b in blocks(document)]
RUNNABLE = ("python", "sh")
PYTHON_DOCS = sorted(
    {b.document for b in ALL if b.language == "python" and not (b.skipped or b.spark)}
)
README_SHELL = [b for b in ALL if b.document.name == "README.md" and b.language == "sh"]

RUNNER = """
import json, sys
namespace = None
for name, code, continues in json.load(sys.stdin):
    if not continues or namespace is None:
        namespace = {"__name__": "__main__"}
    exec(compile(code, name, "exec"), namespace)
"""


def test_every_block_is_run_or_says_why_not() -> None:
    for block in ALL:
        assert block.language, f"{block.name}: say the block's language"
        if block.skipped:
            assert "(" in block.marker, f"{block.name}: a skipped block says why"
        if block.language == "sh":  # the one shell block that runs is README's "try it"
            assert block.skipped or block in README_SHELL, f"{block.name}: sh is for commands"
    assert [b for b in README_SHELL if not b.skipped], "README's try-it block runs"


@pytest.mark.parametrize("document", PYTHON_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(document: Path, tmp_path: Path) -> None:
    code_blocks = [
        b for b in blocks(document) if b.language == "python" and not (b.skipped or b.spark)
    ]
    work = tmp_path / "work"
    work.mkdir()
    with running_stack(tmp_path / "stack") as stack:
        program = [
            (b.name, substitute(b.code, stack.url, stack.tx_address, stack.rpc_url), b.continues)
            for b in code_blocks
        ]
        result = subprocess.run(
            [sys.executable, "-c", RUNNER],
            input=json.dumps(program),
            cwd=work,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert result.returncode == 0, result.stderr


def test_readme_try_it_block_is_what_the_stack_prints() -> None:
    [block] = [b for b in README_SHELL if not b.skipped]
    commands = [line.split("  #")[0].rstrip() for line in block.code.splitlines()]
    assert commands == try_commands(STACK_URL, TX_ADDRESS)


def test_readme_try_it_block_runs(tmp_path: Path) -> None:
    [block] = [b for b in README_SHELL if not b.skipped]
    bin_dir = str(Path(sys.executable).parent) + "/"
    with running_stack(tmp_path / "stack") as stack:
        script = substitute(block.code, stack.url, stack.tx_address).replace(".venv/bin/", bin_dir)
        result = subprocess.run(
            ["bash", "-e", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "created topic demo:events (ttl 7d)",
        "published 2 messages to demo:events",
    ]
    assert [line.split(maxsplit=2)[2] for line in lines[2:4]] == ["hello", "world"]  # tail
    assert "status                      OK" in lines  # txn status


def test_toml_blocks_parse_and_the_auth_example_loads(tmp_path: Path) -> None:
    tomls = [b for b in ALL if b.language == "toml"]
    assert tomls
    for block in tomls:
        tomllib.loads(block.code)
        if "[[tokens]]" in block.code:
            path = tmp_path / "auth.toml"
            path.write_text(block.code)
            Authorizer.from_file(path)


def _spark_blocks() -> list[Block]:
    return [b for b in ALL if b.spark]


def test_spark_blocks_are_left_to_the_spark_tests() -> None:
    assert _spark_blocks(), "tests/spark/test_doc_blocks.py runs them"
