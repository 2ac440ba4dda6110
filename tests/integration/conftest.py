"""Fixtures of the integration tests."""

from __future__ import annotations

import pytest

from tests.integration.prefect_server import postgres_database


@pytest.fixture
def database():
    """A fresh PostgreSQL database for one test, dropped afterwards (:func:`postgres_database`)."""
    with postgres_database() as url:
        yield url
