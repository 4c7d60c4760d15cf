"""Where images come from: one module per transport, plus the index/manifest reading they share."""
from __future__ import annotations

from typing import Callable

# progress of registry downloads: called with (what, total bytes) when a download starts, it returns a
# callback taking byte counts. Given to an image source (ImageSource.watch_downloads), which hands it to
# its registry layers: no module holds it.
OnDownload = Callable[[str, int], Callable[[int], None]]

