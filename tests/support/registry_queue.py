"""The queue the registry failure tests push (a fixture)."""

from __future__ import annotations

import pytest

from support.qtools import copy_demo_queue


@pytest.fixture
def queue(tmp_path):
    q = copy_demo_queue(tmp_path / "q")
    (q / "targets.lock").unlink()
    return q
