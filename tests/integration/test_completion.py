"""Shell completion: the generated bash script, loaded in a real bash, completes
commands, sub-commands, options and choices; the zsh script is generated from the same
parser and passes zsh's syntax check when zsh is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

bash = shutil.which("bash")
pytestmark = pytest.mark.skipif(bash is None, reason="bash is not installed")


def completions(prog: str, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` after ``prog``."""
    script = subprocess.run(
        [sys.executable, "-m", f"{prog}.cli", "completion", "bash"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    line = " ".join((prog, *words))
    driver = "\n".join(
        [
            script,
            f"COMP_WORDS=({line})" if words[-1] else f"COMP_WORDS=({line} '')",
            f"COMP_CWORD={len(words)}",
            f"COMP_LINE='{line}'",
            f"COMP_POINT={len(line)}",
            # The function `complete` registered for the program, called as bash would.
            f"fn=$(complete -p {prog} | sed -E 's/.* -F ([^ ]+) .*/\\1/')",
            f'"$fn" {prog} "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"',
            'printf "%s\\n" "${COMPREPLY[@]}"',
        ]
    )
    result = subprocess.run(
        [bash or "bash", "--norc", "--noprofile"],
        input=driver, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return sorted(result.stdout.split())


def test_tms_commands_complete() -> None:
    assert completions("tms", "to") == ["top", "topics"]
    assert completions("tms", "topics", "") == [
        "create", "delete", "get", "list", "stats", "update",
    ]  # fmt: skip
    assert "--from-start" in completions("tms", "export", "ns", "t", "out.avro", "--from")
    assert completions("tms", "tail", "ns", "t", "--output", "") == ["json", "table"]
    assert completions("tms", "completion", "") == ["bash", "zsh"]


def test_txn_commands_complete() -> None:
    assert completions("txn", "trun") == ["truncate-invalid-tx", "truncate-invalid-tx-before"]
    assert "--server" in completions("txn", "status", "--")


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_is_valid_zsh() -> None:
    script = subprocess.run(
        [sys.executable, "-m", "tms.cli", "completion", "zsh"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert script.startswith("#compdef tms")
    subprocess.run(["zsh", "-n"], input=script, text=True, timeout=60, check=True)
