"""The `lock` verb: verify the series on an image, pin it, keep its bytes for a later rebase."""
from __future__ import annotations

from ..engine.plan import plan_lock
from ..fs.types import Source
from ..queue.lock import Lock
from ..queue.queue import Queue
from ..store import remember


def lock_queue(queue: Queue, source: Source, ref: str, *, python_check: bool = True) -> Lock:
    """The lock pinning `queue` to `source`; every base and result goes to the store (rebase merges from them)."""
    from ..outputs import python_checker

    screen, memo = python_checker() if python_check else (None, None)
    plan = plan_lock(queue, source, ref, python_check=python_check, python_memo=memo, python_screen=screen)
    remember(queue.root, plan.contents)
    return plan.lock
