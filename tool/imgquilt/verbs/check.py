"""The `check` verb: lint the queue (every profile's chain too) and, with an image or a profile,
verify the series as apply would."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ImgquiltError, QueueProblems, UsageError
from .refs import Progress


@dataclass(frozen=True)
class CheckResult:
    """The lint of a queue (and, with an image, the verification apply would make).

    `error` is the error the CLI exits with when `ok` is False (QueueProblems: 6, drift: 3, ...).
    """

    problems: tuple[str, ...]
    patches: tuple[str, ...]
    error: ImgquiltError | None = None
    profiles: tuple[str, ...] = ()  # the profiles verified on their images (--profile)
    unchecked: tuple[str, ...] = ()  # patches written with --no-python-check (`Python-Check: skipped`)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class CheckRequest:
    """`imgquilt check` as asked (api.check's keywords): `profile` None, NAME or "all"; `boot` (the
    CLI's --boot, run after a sound check by the boot verb)."""

    queue: str | os.PathLike[str] | None = None
    image: str | None = None
    platform: str | None = None
    progress: Progress | None = None
    profile: str | None = None
    allow_unselected: bool = False
    strict: bool = False
    boot: bool = False


def refuse_check(req: CheckRequest) -> None:
    """What `check` refuses once the queue is sound: `--boot` boots one image."""
    from .fanout import select

    if req.boot and select(req.profile).every_profile:
        raise UsageError("`check --boot` boots one image; use `imgquilt boot --profile all` for every profile.")


def check(req: CheckRequest, stale_results: Callable[..., Any]) -> CheckResult:
    """Lint the queue; with an image or a profile, also verify (api.check says the rest).
    `stale_results`: the offline test of each section's body (work.rehash.stale_results; the work
    tree sits above the verbs, so it is handed down, as queue.check takes it)."""
    from ..errors import UnselectedPatches
    from ..queue.check import lint_queue
    from .refs import queue_root

    image, platform, progress, profile, strict = req.image, req.platform, req.progress, req.profile, req.strict
    root = queue_root(req.queue)
    lint = lint_queue(root, stale_results)
    unselected = [] if req.allow_unselected else list(lint.unselected)
    problems = [*lint.problems, *lint.selections, *unselected]
    unchecked = tuple(p.name for p in lint.patches if p.header.python_unchecked)
    if strict:
        problems += [
            f"{n}: never Python-checked (`Python-Check: skipped`: refreshed or rebased with --no-python-check)"
            for n in unchecked
        ]
    failure: ImgquiltError | None = None
    if unselected and not lint.selections:
        failure = UnselectedPatches(
            f"The queue has {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems),
            hint="A guard no profile selects is usually a typo (`imgquilt guard PATCH +NAME` to correct it); declare a "
            "profile that selects it (`imgquilt lock --profile NAME --image REF --select GUARD`), or accept it with "
            "`imgquilt check --allow-unselected`.",
            problems=problems,
        )
    elif lint.selections:
        from ..errors import ProfileChainBroken

        failure = ProfileChainBroken(
            f"The queue has {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems),
            hint="A profile's patch depends on a patch that profile does not select: select that patch in the profile "
            "too (`imgquilt guard PATCH ...`), or give the profile its own patch built on its own chain.",
            problems=problems,
        )
    elif problems:
        failure = QueueProblems(problems)
        if strict and unchecked:
            failure.hint = (
                "--strict refuses a patch written with --no-python-check: push it and `imgquilt refresh` "
                "(the checks run, and the field goes), or, once it is checked by other means, "
                "`imgquilt header NAME --unset Python-Check`."
            )
    names = [p.name for p in lint.patches]
    if (image or profile) and not problems:
        from ..engine.plan import plan_apply
        from ..pycheck import Checks
        from .fanout import Selection, fan_out
        from .profiles import resolve
        from .refs import load_queue, open_ref, pick_ref
        from .restore import image_bytes

        python = Checks()  # the check as apply would run it, without the screen and the cache (as before)
        q = load_queue(root)
        chosen = [c.profile or resolve(q, None) for c in fan_out(Selection(profile), q)]  # one platform: as given
        if image and len(chosen) > 1:
            raise UsageError("--profile all verifies each profile on the image it pins; give no --image with it.")
        failed: list[tuple[str | None, ImgquiltError]] = []
        for r in chosen:
            try:
                plan_apply(
                    r.queue,
                    open_ref(pick_ref(image, r.lock, root), platform, root=root, progress=progress),
                    r.lock,
                    python=python,
                    image_bytes=image_bytes(root, r.lock, platform, progress),
                )
            except ImgquiltError as exc:  # the refusal apply would meet, with its exit code
                failed.append((r.name, exc))
        for name, exc in failed:
            found = getattr(exc, "problems", None)
            lines = [p.render() for p in found] if found else [exc.message]
            problems += [f"profile {name}: {x}" if name else x for x in lines]
        if failed:
            failure = failed[0][1]
            if profile is not None:
                failure.message = "\n".join(f"Profile {n}: {e.message}" for n, e in failed)
        return CheckResult(tuple(problems), tuple(names), failure, tuple(r.name for r in chosen if r.name), unchecked)
    return CheckResult(tuple(problems), tuple(names), failure, unchecked=unchecked)
