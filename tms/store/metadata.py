"""``MetadataTable``: one row per topic, with the design's generation lifecycle.

A topic's generation is positive while it exists; deleting it negates the generation (its
data, of that generation and older, awaits cleanup); creating it again takes the next
one. Every change is a read followed by a write that the store refuses if it recovered
from a failure in between (``KeyValueStore`` epochs): the read may be stale. With
several instances on one store, only the topic's owner changes its row, under the
owner's ``fence`` (``tms.store.kv``), so the read and the write cannot interleave with
another instance's change either.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from tms.codec import keys
from tms.codec.values import decode_metadata, encode_metadata
from tms.errors import TopicAlreadyExistsError, TopicNotFoundError
from tms.model import TopicId, TopicMetadata
from tms.store.kv import Fence, KeyValueStore

__all__ = ["MetadataTable"]


class MetadataTable:
    """See the module docstring. Thread-safe."""

    def __init__(self, kv: KeyValueStore, name: bytes) -> None:
        self._kv = kv
        self._name = name
        self.store = kv.table(name)
        self._lock = threading.Lock()

    def _read(self, topic: TopicId) -> TopicMetadata | None:
        value = self.store.get(keys.metadata_key(topic))
        if value is None:
            return None
        return TopicMetadata(topic, decode_metadata(value))

    def _put(self, metadata: TopicMetadata, epoch: int, fence: Fence | None) -> None:
        """Write a row computed from a read at ``epoch`` (refused if the store recovered
        since: the read may be stale), under the owner's ``fence`` if given."""
        key = keys.metadata_key(metadata.topic)
        value = encode_metadata(metadata.properties)
        self._kv.write([(self._name, key, value)], epoch=epoch, fence=fence)

    def create(
        self, topic: TopicId, properties: dict[str, str], fence: Fence | None = None
    ) -> TopicMetadata:
        """Create (generation 1, or one above a deleted topic's); 409 if it exists."""
        with self._lock:
            epoch = self.store.epoch
            current = self._read(topic)
            generation = 1
            if current is not None:
                if current.exists:
                    raise TopicAlreadyExistsError(topic)
                generation = -current.generation + 1
            metadata = TopicMetadata(topic, {**properties, "generation": str(generation)})
            self._put(metadata, epoch, fence)
            return metadata

    def update(
        self, topic: TopicId, properties: dict[str, str], fence: Fence | None = None
    ) -> TopicMetadata:
        """Replace every property, keeping the generation; 404 if absent or deleted."""
        with self._lock:
            epoch = self.store.epoch
            current = self._read(topic)
            if current is None or not current.exists:
                raise TopicNotFoundError(topic)
            metadata = TopicMetadata(topic, {**properties, "generation": str(current.generation)})
            self._put(metadata, epoch, fence)
            return metadata

    def delete(self, topic: TopicId, fence: Fence | None = None) -> TopicMetadata:
        """Negate the generation (other properties stay, for cleanup); 404 if absent."""
        with self._lock:
            epoch = self.store.epoch
            current = self._read(topic)
            if current is None or not current.exists:
                raise TopicNotFoundError(topic)
            deleted = current.with_generation(-current.generation)
            self._put(deleted, epoch, fence)
            return deleted

    def get_any(self, topic: TopicId) -> TopicMetadata:
        """The topic's row, deleted or not; 404 if it never existed."""
        current = self._read(topic)
        if current is None:
            raise TopicNotFoundError(topic)
        return current

    def get(self, topic: TopicId) -> TopicMetadata:
        current = self._read(topic)
        if current is None or not current.exists:
            raise TopicNotFoundError(topic)
        return current

    def list_topics(self, namespace: str) -> list[TopicId]:
        """Existing topics of a namespace, in key order."""
        prefix = keys.namespace_prefix(namespace)
        return [m.topic for m in self._scan(prefix) if m.exists]

    def scan_all(self) -> list[TopicMetadata]:
        """Every topic row, deleted ones included (cleanup)."""
        return list(self._scan(b""))

    def _scan(self, prefix: bytes) -> Iterator[TopicMetadata]:
        for key, value in self.store.scan(
            prefix, keys.stop_key_for_prefix(prefix) if prefix else None
        ):
            yield TopicMetadata(keys.topic_id_from_metadata_key(key), decode_metadata(value))
