"""`rebase --boot`: after each step, the patch's modules imported with the new image's own Python.

The probe machinery is `imgquilt boot`'s (verbs.boot.probe_changes in rootfs.sandbox): the base is the
new image with the rebased queue so far over it, the patched tree that plus this patch's results. A
module that fails on the patched tree and imports on the base stops the rebase like a Python
finding: a conflict of kind `boot`, the result in the work tree, to be fixed and `--continue`d (the
probe runs again on the resolution) or `--skip`ped. Each probed section records its probes (`boot`
in the report). A module that cannot be told (it fails on the base too, no interpreter, ...) never
stops the rebase.
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import RebaseConflict
from ..queue.hunks import ABSENT
from ..queue.patchfile import Patch
from ..store import ObjectStore
from .boot import NewImage, result_bytes, step_trees
from .report import CONFLICT, UPSTREAM
from .state import CarriedSection, RebaseState


def _probe(st: RebaseState, store: ObjectStore, patch: Patch, sections: list[CarriedSection], image: NewImage,
           todo: list[int]) -> dict[int, list]:
    """Per section index: the probes of its module (and the modules importing it), verbs.boot.Probe."""
    from ..rootfs.sandbox import Sandbox, Staged
    from ..verbs.boot import Change, boot_env, config_of, probe_changes, user_of

    before, after, _, _, named = step_trees(st, store, patch, sections, image, todo)
    where = {named[st.paths[sections[i].old_path]]: i for i in todo}
    changes = [Change(rp, before.get(rp) is not None, after.get(rp) is not None, (patch.name,))
               for rp, i in where.items() if rp in after and after[rp] != before.get(rp)]
    if not changes:
        return {}
    with _new_root(image) as (root, config):
        env, cwd, user = config_of(config) if config is not None else (None, "/", "")
        base = [Staged(rp, data) for rp, data in before.items() if data is not None]
        patched = [Staged(rp, data) for rp, data in after.items() if data is not None]
        with Sandbox(root, patched, cwd=cwd, user=user_of(user, root), base_staged=base) as box:
            probes = probe_changes(box, boot_env(env, ()), changes, importers=5)
    out: dict[int, list] = {}
    by_module = {p.module: where[p.path] for p in probes if p.path in where and p.module}
    for p in probes:
        i = where.get(p.path, by_module.get(p.importer_of))
        if i is not None:
            out.setdefault(i, []).append(p)
    return out


class _new_root:
    """The new image's filesystem (materialized in the shared cache) or root, and its config bytes."""

    def __init__(self, image: NewImage) -> None:
        self.image = image
        self._cm = None

    def __enter__(self):
        from ..rootfs.source import RootfsSource
        from ..verbs.materialize import materialized

        src = self.image.source
        if isinstance(src, RootfsSource):
            return src.root, None
        img = src.image  # type: ignore[attr-defined]
        self._cm = materialized(img)
        return self._cm.__enter__(), img.config_bytes

    def __exit__(self, *exc):
        if self._cm is not None:
            return self._cm.__exit__(*exc)
        return None


def _failures(probes) -> list[str]:
    from ..verbs.boot import FAILS

    return [f"{p.module}: {p.patched.failure.render()}" for p in probes
            if p.verdict == FAILS and p.patched is not None and p.patched.failure is not None]


def boot_step(root, st: RebaseState, store: ObjectStore, patch: Patch, sections: list[CarriedSection],
              image: NewImage) -> list[CarriedSection]:
    """The sections with their probes recorded; one whose module fails to boot becomes a conflict of
    kind `boot`, its result in the work tree. Nothing is probed when the patch conflicts already."""
    if not st.boot or any(cs.outcome.state == CONFLICT for cs in sections):
        return sections
    from .work_files import put_work

    todo = [i for i, cs in enumerate(sections) if cs.outcome.state != UPSTREAM and cs.outcome.path.endswith(".py")]
    if not todo:
        return sections
    out = list(sections)
    for i, probes in _probe(st, store, patch, sections, image, todo).items():
        cs = out[i]
        oc = replace(cs.outcome, boot=tuple(p.json() for p in probes))
        failed = _failures(probes)
        if failed:
            data = result_bytes(store, patch, cs)
            work = put_work(root, st, oc.path, data)
            oc = replace(oc, state=CONFLICT, conflict="boot", work=work, new_patched=None,
                         detail="carried, but it fails to boot on the new image: " + "; ".join(failed))
            cs = replace(cs, ours_sha=store.put(data or b""), theirs_sha=oc.new_base if oc.new_base != ABSENT else None)
        out[i] = replace(cs, outcome=oc)
    return out


def refuse_boot(st: RebaseState, store: ObjectStore, patch: Patch, before: list[CarriedSection],
                resolved: list[CarriedSection], image: NewImage) -> list[CarriedSection]:
    """A resolution of a `boot` conflict must boot: probed again (RebaseConflict when it still fails);
    the sections come back with their probes as they are now."""
    redo = [i for i, s in enumerate(before) if s.outcome.state == CONFLICT and s.outcome.conflict == "boot"]
    if not st.boot or not redo:
        return resolved
    todo = [i for i in redo if resolved[i].outcome.path.endswith(".py") and resolved[i].outcome.state != CONFLICT]
    found = _probe(st, store, patch, resolved, image, todo) if todo else {}
    left = [f"{before[i].outcome.work}: on the new image: {'; '.join(_failures(found[i]))}" for i in todo
            if _failures(found.get(i, []))]
    if left:
        raise RebaseConflict(f"{patch.name} still fails to boot:\n" + "\n".join(f"  - {x}" for x in left),
                             hint="Edit the file(s), then `imgquilt rebase --continue`; or `imgquilt rebase --skip`, "
                                  "or `imgquilt rebase --abort`.")
    out = list(resolved)
    for i in todo:
        out[i] = replace(out[i], outcome=replace(out[i].outcome, boot=tuple(p.json() for p in found.get(i, []))))
    return out
