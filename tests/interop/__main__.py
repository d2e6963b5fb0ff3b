"""Independent clients against ``txn serve``: Apache Thrift's compiler generates Tephra
clients from the IDL in Python and Java, and each runs the scenarios (``scenarios.py``,
``Scenarios.java``) against a real server on loopback port 0 with its state on disk.

Needs Debian's ``thrift-compiler`` and ``libthrift-java`` (``make interop-deps``) and a
JDK. Run: ``make interop`` (= ``python -m tests.interop``). Exit status 0 when every
client passed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.integration.procs import ServerProcess

HERE = Path(__file__).parent
IDL = HERE.parent.parent / "txn" / "rpc" / "tephra.thrift"
JAVA_CLASSPATH = os.environ.get(
    "THRIFT_JAVA_CLASSPATH",
    "/usr/share/java/thrift.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar",
)


def _run(*command: str | Path) -> None:
    print("+", " ".join(str(c) for c in command), flush=True)
    subprocess.run([str(c) for c in command], check=True)


def missing_tools() -> list[str]:
    """What generating and running the clients needs and this machine lacks."""
    tools = [tool for tool in ("thrift", "javac", "java") if shutil.which(tool) is None]
    return tools + [jar for jar in JAVA_CLASSPATH.split(":") if not Path(jar).exists()]


def generate(out: Path, *java: Path) -> tuple[Path, Path]:
    """Python and compiled Java clients from our IDL under Tephra's file name, with no
    Python namespace (so the Python package is ``transaction``, as from Tephra's own),
    the ``java`` sources compiled beside them: (Python dir, Java classes dir)."""
    out.mkdir(parents=True, exist_ok=True)
    idl = out / "transaction.thrift"
    lines = IDL.read_text().splitlines(keepends=True)
    idl.write_text("".join(line for line in lines if not line.startswith("namespace py")))
    gen = out / "gen"
    gen.mkdir()
    _run("thrift", "--gen", "py", "--gen", "java:generated_annotations=suppress", "-out", gen, idl)
    classes = out / "classes"
    sources = sorted(str(p) for p in gen.rglob("*.java"))
    _run("javac", "-nowarn", "-d", classes, "-cp", JAVA_CLASSPATH, *sources, *java)
    return gen, classes


def main() -> int:
    missing = missing_tools()
    if missing:
        print(f"missing {', '.join(missing)}: run `make interop-deps` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="txms-interop-") as tmp:
        gen, classes = generate(Path(tmp), HERE / "Scenarios.java")
        server = ServerProcess(Path(tmp) / "state")
        host, port = server.start()
        try:
            for mode in ("pure", "accelerated"):
                _run(sys.executable, "-m", "tests.interop.scenarios", gen, host, str(port), mode)
            _run("java", "-cp", f"{classes}:{JAVA_CLASSPATH}", "Scenarios", host, str(port))
        finally:
            code = server.terminate()
        if code != 0:
            print(f"txn serve exited with {code}:\n{''.join(server.output)}", file=sys.stderr)
            return 1
    print("interop: every generated client passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
