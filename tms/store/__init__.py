"""Storage: an ordered key-value contract (``kv``), its engines (``memory``, ``leveldb``),
and the tables built on it (``tables``, ``metadata``)."""
