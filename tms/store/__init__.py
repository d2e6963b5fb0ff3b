"""Storage: an ordered key-value contract (``kv``), its backends (``memory``,
``leveldb``), and the message, payload and metadata tables built on it (``tables``)."""
