"""The ``tms`` command line."""

from __future__ import annotations

import argparse
from importlib.metadata import version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tms", description="txms messaging service")
    parser.add_argument("--version", action="version", version=f"tms {version('txms')}")
    parser.parse_args(argv)
    parser.print_help()
    return 0
