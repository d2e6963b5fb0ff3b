"""txms messaging: topics, transactional publishing and consumption (in progress)."""

__all__: list[str] = []
