"""Starting the servers as a user does: the standalone stack (``make run``) and ``tms
serve`` with auth and TLS, the open-file limit raised and said, and every start-up error
a user can cause as one line on stderr with a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tls import make_pki
from tms.client import MessagingClient
from tms.errors import UnauthenticatedError
from tms.model import TopicId
from tms.standalone import Launched

AUTH = """
[[tokens]]
token = "s3cret"
principal = "alice"

[[grants]]
principal = "alice"
namespace = "*"
topic = "*"
permissions = ["read", "write", "admin"]
"""


def run(*argv: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_second_stack_on_the_same_data_directory_says_so_in_one_line(tmp_path: Path) -> None:
    with Launched(tmp_path):
        result = run("-m", "tms.standalone", "--data-dir", str(tmp_path),
                     "--tx-port", "0", "--http-port", "0", "--rpc-port", "0")  # fmt: skip
    assert_one_line_error(result, "txms:", "in use by another process")


@pytest.mark.parametrize("which", ["--tx-port", "--http-port"])
def test_a_port_in_use_says_so_in_one_line(tmp_path: Path, taken_port: int, which: str) -> None:
    ports = {"--tx-port": "0", "--http-port": "0", "--rpc-port": "0", which: str(taken_port)}
    result = run("-m", "tms.standalone", "--data-dir", str(tmp_path),
                 *(x for kv in ports.items() for x in kv))  # fmt: skip
    server = "transaction server" if which == "--tx-port" else "messaging service"
    assert_one_line_error(result, server, str(taken_port), "address already in use")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--auth", "/nonexistent/auth.toml"], ["cannot read the auth file"]),
        (["--tls-cert", "/nonexistent/cert.pem"], ["cannot load the TLS certificate"]),
    ],
)
def test_bad_auth_or_certificate_files_stop_the_stack_in_one_line(
    tmp_path: Path, extra: list[str], words: list[str]
) -> None:
    result = run("-m", "tms.standalone", "--data-dir", str(tmp_path / "data"),
                 "--tx-port", "0", "--http-port", "0", "--rpc-port", "0", *extra)  # fmt: skip
    assert_one_line_error(result, *words)
    assert not (tmp_path / "data").exists()  # refused before any state was made


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tms.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("make_args", "words"),
    [
        (lambda p, port: ["--port", str(port)], ["cannot listen", "address already in use"]),
        (lambda p, port: ["--config", _config(p, "[http]\nmax_wait: 1\n")], ["cannot read"]),
        (lambda p, port: ["--config", _config(p, "[http]\nmax_wiat_ms = 5\n")], ["max_wiat_ms"]),
        (lambda p, port: ["--config", _config(p, "[tms]\ndefault_ttl_s = 'x'\n")], ["[tms]"]),
        (
            lambda p, port: ["--config", _config(p, "[tms]\nleveldb_write_buffer_mb = 0\n")],
            ["leveldb_write_buffer_mb", "1 to 1024"],
        ),
        (lambda p, port: ["--config", _config(p, "[web]\n")], ["unknown sections"]),
        (lambda p, port: ["--auth", "/nonexistent.toml"], ["cannot read the auth file"]),
        (lambda p, port: ["--tls-key", "k.pem"], ["needs its certificate"]),
        (lambda p, port: ["--tls-cert", "/nonexistent.pem"], ["cannot load the TLS"]),
    ],
)
def test_tms_serve_start_errors_are_one_line(
    tmp_path: Path, taken_port: int, make_args: object, words: list[str]
) -> None:
    extra = make_args(tmp_path, taken_port)  # type: ignore[operator]
    result = run("-m", "tms.cli", "--log-level", "WARNING", "serve",
                 "--data-dir", str(tmp_path / "tms"), *extra)  # fmt: skip
    assert_one_line_error(result, "tms:", *words)


def _soft_limit_of(pid: int) -> tuple[str, str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError("no open-file limit")


def started_with_soft_limit_256(until: str, *argv: str) -> tuple[list[str], tuple[str, str]]:
    """Start ``python argv`` with a soft open-file limit of 256; read its output up to a
    line containing ``until``; return those lines and its (soft, hard) limit then."""
    proc = subprocess.Popen(
        ["sh", "-c", 'ulimit -S -n 256 && exec "$@"', "sh", sys.executable, *argv],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if until in line:
                break
        return lines, _soft_limit_of(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
        if proc.stdout is not None:
            proc.stdout.close()


HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
needs_room = pytest.mark.skipif(HARD <= 256, reason="the hard limit is too low")


@needs_room
def test_the_stack_raises_its_open_file_limit_and_says_so(tmp_path: Path) -> None:
    lines, limits = started_with_soft_limit_256(
        "Ctrl-C", "-m", "tms.standalone", "--data-dir", str(tmp_path),
        "--tx-port", "0", "--http-port", "0", "--rpc-port", "0",
    )  # fmt: skip
    assert limits == (str(HARD), str(HARD))
    said = [line for line in lines if "open-file limit" in line]
    assert said == [f"  open-file limit raised from 256 to {HARD} (the hard limit)\n"]


@needs_room
def test_tms_serve_logs_its_open_file_limit(tmp_path: Path) -> None:
    lines, limits = started_with_soft_limit_256(
        "listening on", "-m", "tms.cli", "serve", "--data-dir", str(tmp_path), "--port", "0"
    )
    assert limits == (str(HARD), str(HARD))
    assert sum("open-file limit raised from 256" in line for line in lines) == 1


def test_the_stack_with_auth_and_tls(tmp_path: Path) -> None:
    # Given the stack started as `make run AUTH=... TLS_CERT=... TLS_KEY=...` does
    pki = make_pki(tmp_path / "pki")
    auth = tmp_path / "auth.toml"
    auth.write_text(AUTH)
    extra = ["--auth", str(auth), "--tls-cert", str(pki.cert_file), "--tls-key", str(pki.key_file)]
    with Launched(tmp_path / "data", *extra) as stack:
        # Then it serves HTTPS, and only to callers with a token
        assert stack.url.startswith("https://")
        topic = TopicId("demo", "events")
        with (
            MessagingClient(stack.url, ca_bundle=pki.ca_file) as anonymous,
            pytest.raises(UnauthenticatedError),
        ):
            anonymous.create_topic(topic)
        with MessagingClient(stack.url, token="s3cret", ca_bundle=pki.ca_file) as alice:
            alice.create_topic(topic)
            alice.publish(topic, [b"hello"])
            assert [m.payload for m in alice.poll(topic).messages] == [b"hello"]
        banner = "".join(stack.lines) + "".join(stack.startup)
        assert "export TMS_TOKEN=" in banner and "export TMS_CA_BUNDLE=" in banner


@pytest.mark.parametrize(
    ("text", "words"),
    [("[server]\nportt = 1\n", ["portt"]), ("[txn]\nnope = 1\n", ["nope"]), ("[x]\n", ["x"])],
)
def test_txn_serve_config_errors_are_one_line(tmp_path: Path, text: str, words: list[str]) -> None:
    config = tmp_path / "txn.toml"
    config.write_text(text)
    result = run("-m", "txn", "serve", "--in-memory", "--port", "0", "--config", str(config))
    assert_one_line_error(result, "txn:", *words)


def test_make_run_passes_its_variables_to_the_stack() -> None:
    root = Path(__file__).parents[2]
    variables = {
        "DATA_DIR": "/srv/d", "TX_PORT": "25165", "HTTP_PORT": "25166", "RPC_PORT": "25167",
        "CONFIG": "c.toml",
        "AUTH": "a.toml", "TLS_CERT": "c.pem", "TLS_KEY": "k.pem",
    }  # fmt: skip
    result = subprocess.run(
        ["make", "-n", "-s", "run", *(f"{k}={v}" for k, v in variables.items())],
        cwd=root, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    command = " ".join(result.stdout.split("tms.standalone", 1)[1].replace("\\\n", " ").split())
    assert command == (
        "--data-dir '/srv/d' --tx-port 25165 --http-port 25166 --rpc-port 25167 --config 'c.toml' "
        "--auth 'a.toml' --tls-cert 'c.pem' --tls-key 'k.pem'"
    )
