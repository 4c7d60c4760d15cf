"""The CLI rebase tests' Python 3.11 site-packages path."""

from __future__ import annotations

from support.rebase_queue import (
    SITE311,
    WEIGHTS,
)

W311 = f"{SITE311}/{WEIGHTS}"
