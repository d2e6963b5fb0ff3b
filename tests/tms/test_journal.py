"""``Journal``: every change made through it since ``clear`` is taken back by ``undo``,
newest first, and ``clear`` keeps the changes made before it."""

from __future__ import annotations

from tms.journal import Journal


def test_undo_takes_back_every_change_since_clear() -> None:
    rows: dict[str, object] = {"kept": 1, "changed": 2, "dropped": 3}
    members = {"x"}
    journal = Journal()
    journal.put(rows, "before", 0)
    journal.clear()  # the change above is kept
    journal.put(rows, "changed", 20)
    journal.put(rows, "changed", 200)  # twice: back to the first value
    journal.put(rows, "new", None)  # a None value is still a new key
    journal.drop(rows, "dropped")
    journal.drop(rows, "absent")
    journal.add(members, "y")
    journal.add(members, "x")  # already there: stays after undo
    journal.undo()
    assert rows == {"kept": 1, "changed": 2, "dropped": 3, "before": 0}
    assert members == {"x"}
    journal.undo()  # nothing more to take back
    assert rows == {"kept": 1, "changed": 2, "dropped": 3, "before": 0}
