"""The error tree's wire mapping: every class registered under its own code, and a code
read back from an answer giving the class it came from."""

from __future__ import annotations

import gc
import json

import pytest

from tms.client.http import error_from_response
from tms.client.transport import Reply
from tms.errors import (
    ERROR_CODES,
    TmsError,
    TmsInvalidArgumentError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
    error_for,
)


def _tree(cls: type[TmsError]) -> list[type[TmsError]]:
    found = [cls]
    for sub in cls.__subclasses__():
        found.extend(_tree(sub))
    return found


def test_every_class_is_registered_under_its_own_code() -> None:
    classes = _tree(TmsError)
    assert {cls.code: cls for cls in classes} == ERROR_CODES
    assert len(ERROR_CODES) == len(classes), "every class has a code of its own"


@pytest.mark.parametrize("cls", _tree(TmsError), ids=lambda cls: cls.__name__)
def test_each_answer_maps_back_to_its_class(cls: type[TmsError]) -> None:
    body = json.dumps({"error": cls.code, "message": "what happened"}).encode()
    reply = Reply(cls.status, "", {"Content-Type": "application/json"}, body)
    error = error_from_response(reply, topic="ns:t")
    assert type(error) is cls
    assert str(error) == "what happened"


def test_a_taken_code_is_refused_and_changes_nothing() -> None:
    before = dict(ERROR_CODES)
    with pytest.raises(TypeError, match="TopicNotFoundError"):

        class ClashingError(TmsError):
            code = TopicNotFoundError.code

    gc.collect()  # the half-made class, still among TmsError's subclasses until collected
    assert before == ERROR_CODES
    assert set(_tree(TmsError)) == set(before.values())


def test_answers_without_a_known_code_go_by_status() -> None:
    assert type(error_for(None, "m", status=404, topic="t")) is TopicNotFoundError
    assert type(error_for("made_up", "m", status=409)) is TopicAlreadyExistsError
    assert type(error_for(None, "m", status=400)) is TmsInvalidArgumentError
    assert type(error_for(None, "m", status=502)) is TmsError
    garbage = Reply(502, "Bad Gateway", {}, b"<html>proxy</html>")
    error = error_from_response(garbage)
    assert type(error) is TmsError and "proxy" in str(error)
