"""Clients of the messaging service: HTTP, transaction-aware publishing and fetching,
and a data manager for the ``transaction`` package."""

from tms.client.http import MarkersOutcome, MessagingClient, PollResult, RollbackToken

__all__ = ["MarkersOutcome", "MessagingClient", "PollResult", "RollbackToken"]
