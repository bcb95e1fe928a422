"""Every personal-data test runs with a fresh master key in the environment."""

from __future__ import annotations

import pytest

from reventless.store.keys import MasterKey


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> MasterKey:
    key = MasterKey.generate()
    monkeypatch.setenv("REVENTLESS_MASTER_KEY", key.text)
    monkeypatch.delenv("REVENTLESS_MASTER_KEY_FILE", raising=False)
    return key
