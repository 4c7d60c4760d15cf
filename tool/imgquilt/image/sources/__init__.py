"""Where images come from: one module per transport, plus the index/manifest reading they share."""
from __future__ import annotations

from typing import Callable

# progress of registry downloads (cli/progress sets it): called with (what, total bytes) when a download
# starts, it returns a callback taking byte counts. Here, not in registry.py, so that setting it loads
# no registry client (a warm local audit never imports httpx).
on_download: Callable[[str, int], Callable[[int], None]] | None = None

