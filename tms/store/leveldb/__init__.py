"""The embedded default backend: LevelDB through plyvel."""

from tms.store.leveldb.db import LevelDBStore

__all__ = ["LevelDBStore"]
