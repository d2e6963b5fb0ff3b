"""``ServerConfig`` refuses a setting of the wrong type with a clear error: a TOML file can
hold anything, and a string such as ``"no"`` is truthy."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from txn.config import ServerConfig
from txn.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('sync_helper = "no"', "sync_helper must be true or false, got 'no'"),
        ("sync_helper = 0", "sync_helper must be true or false, got 0"),
        ('send_thread = "yes"', "send_thread must be true or false"),
        ('sync_helpers = "2"', "sync_helpers must be an integer, got '2'"),
        ("sync_helpers = true", "sync_helpers must be an integer, got True"),
        ("commit_delay_us = 2.5", "commit_delay_us must be an integer"),
        ('idle_timeout_s = "10"', "idle_timeout_s must be a number"),
        ("port = 1.5", "port must be an integer"),
        ("host = 127", "host must be a string"),
        ("tls_cert = 1", "tls_cert must be a string"),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused(setting: str, message: str) -> None:
    values: dict[str, Any] = tomllib.loads(setting)
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(")):
        ServerConfig(**values)


def test_settings_of_the_right_types_are_taken() -> None:
    config = ServerConfig(
        **tomllib.loads(
            "sync_helper = false\nsync_helpers = 2\nidle_timeout_s = 10\nframe_timeout_s = 0.5\n"
            'host = "::1"\ntls_cert = "c.pem"\ntls_key = "k.pem"\n'
        )
    )
    assert config.sync_helper is False
    assert config.sync_helpers == 2
    assert config.idle_timeout_s == 10
    assert config.tls_cert == "c.pem"
