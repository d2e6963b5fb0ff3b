"""Both command lines: every command, option and positional has help text, and
``--version`` answers (the conventions of ``txn.clikit``)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

import pytest

from tms.cli import build_parser as tms_parser
from txn.cli import build_parser as txn_parser
from txn.clikit import undocumented, walk


@pytest.mark.parametrize("build", [tms_parser, txn_parser], ids=["tms", "txn"])
def test_every_option_and_command_has_help(build: object) -> None:
    parser = build()  # type: ignore[operator]
    assert undocumented(parser) == []


def test_the_walk_sees_every_command() -> None:
    paths = {" ".join(path) for path, _parser in walk(tms_parser())}
    assert {"topics stats", "top", "export", "import", "metrics", "completion", "serve"} <= paths


def test_a_missing_help_is_found() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cmd = sub.add_parser("cmd", help="documented")
    cmd.add_argument("--quiet", action="store_true")
    sub.add_parser("bare")
    assert undocumented(parser) == ["bare", "cmd --quiet"]


@pytest.mark.parametrize("prog", ["tms", "txn"])
def test_version(prog: str) -> None:
    module = "tms.cli" if prog == "tms" else "txn.cli"
    result = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert result.stdout == f"{prog} {version('txms')}\n"
