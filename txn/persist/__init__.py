"""Durable state of the transaction manager: edits, snapshots, storage and the WAL."""
