"""The Tephra IDL, loaded once with thriftpy2 (``tephra.TTransactionServer`` etc.)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import thriftpy2

__all__ = ["IDL_PATH", "tephra"]

IDL_PATH = Path(__file__).with_name("tephra.thrift")

tephra: Any = thriftpy2.load(str(IDL_PATH), module_name="tephra_thrift")
"""The generated module: structs, exceptions, enums and the ``TTransactionServer`` service."""
