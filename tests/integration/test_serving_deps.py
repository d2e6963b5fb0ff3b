"""Serving needs none of the optional extras: the standalone stack (what `make run`
starts, after installing only the package's own dependencies) and the `tms` and `txn`
commands work in a process where every module of the dev, spark, zope and bench extras
is made unimportable. (`make run` from a fresh clone: README.md, "Quick start".)"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tms.client import MessagingClient
from tms.model import TopicId
from tms.standalone import Launched

ROOT = Path(__file__).parents[2]
# import names of the extras' distributions (and what they bring along)
EXTRA_MODULES = {
    "pytest": ["pytest", "_pytest", "pytest_timeout"],
    "pytest-timeout": ["pytest_timeout"],
    "hypothesis": ["hypothesis"],
    "mypy": ["mypy"],
    "ruff": ["ruff"],
    "thrift": ["thrift"],
    "transaction": ["transaction"],
    "trustme": ["trustme"],
    "selenium": ["selenium"],
    "pyspark": ["pyspark", "py4j"],
    "pyarrow": ["pyarrow"],
    "numpy": ["numpy"],
    "redis[hiredis]": ["redis", "hiredis"],
    "psycopg[binary]": ["psycopg"],
    "matplotlib": ["matplotlib"],
}

BLOCKER = """
import importlib.abc, sys
BLOCKED = set({blocked!r})
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{{name}} is not installed (an optional extra)")
        return None
sys.meta_path.insert(0, Blocker())
"""


def _blocked_modules() -> list[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    modules = []
    for requirements in extras.values():
        for requirement in requirements:
            name = requirement.split(">")[0].split("<")[0].split("=")[0].strip()
            assert name in EXTRA_MODULES, f"say which modules {name} provides"
            modules += EXTRA_MODULES[name]
    return sorted(set(modules))


def _env_without_extras(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import the extras (a sitecustomize on the path)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=_blocked_modules()))
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def test_the_blocker_blocks(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import pyspark"],
        env=_env_without_extras(tmp_path), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1 and "optional extra" in result.stderr


def test_the_stack_and_the_commands_work_without_the_extras(tmp_path: Path) -> None:
    env = _env_without_extras(tmp_path)
    saved = os.environ.copy()
    os.environ.update(env)  # Launched starts its child with this process's environment
    try:
        stack = Launched(tmp_path / "data")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    with stack:
        bin_dir = Path(sys.executable).parent
        for command in (
            [str(bin_dir / "tms"), "--url", stack.url, "topics", "create", "demo", "events"],
            [str(bin_dir / "tms"), "--url", stack.url, "publish", "demo", "events", "hi"],
            [str(bin_dir / "tms"), "--url", stack.url, "tail", "demo", "events",
             "--from-start", "--count", "1", "--tx-server", stack.tx_address],
            [str(bin_dir / "txn"), "status", "--server", stack.tx_address],
        ):  # fmt: skip
            result = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=60, check=False
            )
            assert result.returncode == 0, (command, result.stderr)
        with MessagingClient(stack.url) as client:
            assert [m.payload for m in client.poll(TopicId("demo", "events")).messages] == [b"hi"]
