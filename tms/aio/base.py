"""What ``Producer`` and ``Consumer`` share: the messaging client and the transaction
client they use, made from a URL and an address or handed in (and then not closed)."""

from __future__ import annotations

from typing import Any

from tms.aio.client import AsyncMessagingClient
from tms.aio.txclient import AsyncTxClient
from tms.errors import TmsInvalidArgumentError

__all__ = ["Clients"]


class Clients:
    """``client``: made from ``url`` (with ``options``) unless given; ``tx_client``: made
    from an address, given, or None. ``close_clients`` closes what was made here."""

    def __init__(
        self,
        url: str | None,
        tx_server: str | tuple[str, int] | AsyncTxClient | None,
        client: AsyncMessagingClient | None,
        options: dict[str, Any],
    ) -> None:
        if (url is None) == (client is None):
            raise TmsInvalidArgumentError("give a url or a client")
        self.client = client if client is not None else AsyncMessagingClient(str(url), **options)
        self._owns_client = client is None
        self.tx_client: AsyncTxClient | None
        if tx_server is None or isinstance(tx_server, AsyncTxClient):
            self.tx_client = tx_server
            self._owns_tx = False
        else:
            self.tx_client = AsyncTxClient(tx_server)
            self._owns_tx = True

    async def close_clients(self) -> None:
        if self._owns_client:
            await self.client.close()
        if self._owns_tx and self.tx_client is not None:
            await self.tx_client.close()
