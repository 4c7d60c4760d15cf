"""The `lock` verb: verify the series on an image, pin it, keep its bytes for a later rebase."""
from __future__ import annotations

from ..engine.plan import plan_lock
from ..fs.types import Source
from ..queue.lock import Lock
from ..queue.queue import Queue
from ..store import remember


def lock_queue(queue: Queue, source: Source, ref: str) -> Lock:
    """The lock pinning `queue` to `source`; every base and result goes to the store (rebase merges from them)."""
    plan = plan_lock(queue, source, ref)
    remember(queue.root, plan.contents)
    return plan.lock
