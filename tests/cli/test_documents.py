"""imgquilt.cli.documents: every --json document has its renderer, and each renderer, given what the
real verbs return on a copy of the demo queue, gives a document its schema in docs/schemas accepts.

In process (no imgquilt process is started): the verbs run as the CLI calls them, and the documents
come from the one module the CLI renders them with. tests/test_schemas.py runs the commands
themselves and checks what they print.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from support.qtools import copy_demo_queue
from support.schemas import schema_names, validator

DEMO = "oci:examples/demo-image:latest"
CONFIG = "home/app/config.toml"
FIRST = "0001-which-skip-empty-path-elements.patch"
PORT_DIFF = '--- a/home/app/config.toml\n+++ b/home/app/config.toml\n@@ -3,2 +3,2 @@\n host = "0.0.0.0"\n-port = 8080\n+port = 9090\n'


def _renderers() -> dict[Callable[..., Any], str]:
    from imgquilt.cli.documents import DOCUMENTS

    return {fn: name for name, fns in DOCUMENTS.items() for fn in fns}


def test_every_schema_has_its_renderers_in_one_module() -> None:
    from imgquilt.cli import documents

    assert set(documents.DOCUMENTS) == schema_names()
    for name, fns in documents.DOCUMENTS.items():
        assert fns, name
        for fn in fns:
            assert inspect.getmodule(fn) is documents, (name, fn)


def test_no_result_type_renders_a_document_of_its_own() -> None:
    """The documents moved here: the verbs' result types keep only the forms of files imgquilt keeps."""
    from imgquilt.queue.lock import LockUpdate
    from imgquilt.rebase.port import Ported
    from imgquilt.rebase.report import RebaseReport
    from imgquilt.rebase.upstream import UpstreamDiff
    from imgquilt.verbs import attest, audit, history, platforms
    from imgquilt.verbs.boot import BootReport, CommandBoot, PatchBoot

    for cls in (LockUpdate, Ported, RebaseReport, UpstreamDiff):
        assert not hasattr(cls, "to_json"), cls
    for cls in (BootReport, CommandBoot, PatchBoot):
        assert not hasattr(cls, "json"), cls
    for module, name in (
        (audit, "report_json"),
        (history, "history_json"),
        (attest, "verification_json"),
        (platforms, "platforms_json"),
    ):
        assert not hasattr(module, name), name


def _build_rootfs(queue: Path, dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "examples/build_demo.py", "--rootfs", str(dest)], cwd=queue, check=True, capture_output=True
    )
    return dest


def _edit(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new))


def _ed25519_key(tmp: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem, pub = tmp / "key.pem", tmp / "key.pub"
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pem, pub


Rendered = list[tuple[str, str, Callable[..., Any], dict]]  # (schema, branch, renderer, document)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Iterator[Rendered]:
    """One session through the verbs on a copy of the demo queue, each result rendered as the CLI renders it."""
    from imgquilt import api
    from imgquilt.cache.usage import prune, report
    from imgquilt.cli import documents as d
    from imgquilt.cli.common import tree
    from imgquilt.queue.patchfile import Header
    from imgquilt.verbs.fleet import audit_fleet, fleet_document
    from imgquilt.verbs.platforms import apply_platforms, audit_platforms
    from imgquilt.work import header as header_verbs
    from imgquilt.work import importing, pop, push, refresh, rehash, series_edit, track, unrefreshed

    tmp = tmp_path_factory.mktemp("documents")
    q = copy_demo_queue(tmp / "queue")
    old, root, new = (_build_rootfs(q, tmp / n) for n in ("old", "root", "new"))
    _edit(new / "usr/bin/which", b"#! /bin/sh\n", b"#! /bin/sh\n# which 2.0\n")
    conflicted = _build_rootfs(q, tmp / "conflicted")
    _edit(conflicted / CONFIG, b"request_timeout_s = 30", b"request_timeout_s = 60")
    (tmp / "port.diff").write_text(PORT_DIFF)
    pem, pub = _ed25519_key(tmp)
    out: Rendered = []

    def doc(fn: Callable[..., Any], *args: Any, branch: str = "result", schema: str | None = None, **kw: Any) -> dict:
        got = fn(*args, **kw)
        out.append((schema or _renderers()[fn], branch, fn, got))
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(q)
        mp.delenv("IMGQUILT_QUEUE", raising=False)
        mp.setenv("IMGQUILT_EDITOR", "true")
        made = api.init(q)
        doc(d.init_doc, made.root, list(made.created))
        doc(d.check_doc, api.check(), True, [])
        doc(d.lock_doc, api.lock(image=DEMO))
        signed = api.apply(layer=tmp / "fix.tar.gz", output_image=f"oci:{tmp}/out:patched", attest=pem)
        doc(d.apply_doc, signed.result, signed.outputs, signed.profile, signed.boot)
        doc(d.verify_doc, api.verify(image=f"oci:{tmp}/out:patched", key=pub), f"oci:{tmp}/out:patched", False)
        doc(
            d.verify_doc,
            api.verify(image=f"oci:{tmp}/out:patched", key=pub, platform="all"),
            f"oci:{tmp}/out:patched",
            True,
        )
        in_place = api.apply(root=root)
        doc(d.apply_doc, in_place.result, in_place.outputs)
        doc(d.restored_doc, api.reverse(root=root), reverse=True, schema="apply")
        doc(d.restored_doc, api.restore(root=root, paths=[CONFIG]), schema="restore")
        api.apply(overlay=tmp / "overlay")
        # k8s first: a tuple led by a tool's name marks the test `tools` (support/markers.py)
        for fmt in ("k8s", "podman"):
            doc(d.overlay_args_doc, api.overlay_args(tmp / "overlay", fmt), fmt)
        audited = api.audit(image=f"oci:{tmp}/out:patched")
        doc(d.audit_doc, audited.report, audited.expect, audited.history)
        pending = api.audit(root=old, expect="pending", history=False)
        doc(d.audit_doc, pending.report, pending.expect)
        drifted = api.audit(root=old)  # expected live, found pending: the failure document carries the report
        assert drifted.error is not None
        out.append(
            (
                "audit",
                "failure",
                d.audit_doc,
                {**d.audit_doc(drifted.report, drifted.expect), **d.error_doc(drifted.error)},
            )
        )
        queue = api.load_queue()
        platform = audited.report.info.platform
        doc(d.audit_platforms_doc, DEMO, audit_platforms(queue, [platform], lambda p: api.open_ref(DEMO, p)), "live")
        results, written = apply_platforms(queue, [platform], lambda p: api.open_ref(DEMO, p), queue.lock(), None)
        doc(d.apply_platforms_doc, DEMO, results, written)
        fleet_refs = [DEMO, f"oci:{tmp}/out:patched", f"oci:{tmp}/no-such:image"]
        entries = audit_fleet(queue, fleet_refs, lambda ref: api.open_ref(ref), expect="live")
        assert [e.report is None for e in entries] == [False, False, True]
        fleet = [
            doc(d.fleet_image, e.report, "live", e.profile_by)
            if e.report is not None
            else doc(d.fleet_unreadable, e.ref, None, "live", e.error, branch="failure")
            for e in entries
        ]
        out.append(("audit", "fleet", d.fleet_image, fleet_document(fleet, "live")))
        booted = api.boot(root=old)
        doc(d.boot_doc, [booted], booted.failure() is None)

        # the quilt workflow
        doc(d.series_doc, tree(guard=False).series(), tree(guard=False).applied(), [])
        doc(d.applied_doc, tree(guard=False).applied())
        doc(d.unapplied_doc, tree(guard=False).unapplied())
        doc(d.top_doc, tree(guard=False).top())
        wt = tree()
        doc(d.push_doc, push.push(wt, None, count=2), wt.top())
        wt = tree()
        doc(d.pop_doc, pop.pop(wt, None), wt.top())
        wt = tree()
        push.push(wt, None, all=True)
        wt = tree()
        made_patch = series_edit.new(wt, "0007-port.patch", Header(b"").with_field("Description", "Serve on port 9090"))
        doc(
            d.new_doc,
            "0007-port.patch",
            wt.patches_dir / "0007-port.patch",
            wt.top(),
            made_patch.header,
            (),
            wt.lock_update,
        )
        wt = tree()
        top, added, already = track.add(wt, [CONFIG])
        doc(d.add_doc, top, added, already, {p: wt.work / wt.location(p) for p in added + already})
        _edit(q / ".imgquilt/work" / CONFIG, b"port = 8080", b"port = 9090")
        wt = tree()
        top, added, already = track.add(wt, [CONFIG])
        doc(d.edit_doc, top, added, already, {p: wt.work / wt.location(p) for p in added + already}, edited=False)
        doc(d.diff_doc, refresh.diff(tree(guard=False), None))
        wt = tree()
        r = refresh.refresh(wt, None)
        doc(d.refresh_doc, r, wt.patches_dir / r.name)
        name, header = header_verbs.header(tree(), None)
        doc(d.header_doc, name, header, False)
        wt = tree()
        changed = header_verbs.set_fields(wt, name, [("Status", "wip")]).header
        doc(d.header_doc, name, changed, changed.raw != header.raw, True, wt.lock_update)
        _edit(q / ".imgquilt/work" / CONFIG, b"port = 9090", b"port = 9091")
        doc(d.diff_doc, unrefreshed.diff_unrefreshed(tree(guard=False), None))
        doc(d.revert_doc, *unrefreshed.revert(tree(), [CONFIG]))
        doc(d.files_doc, *unrefreshed.files(tree(guard=False), None))
        doc(d.next_doc, unrefreshed.neighbour(tree(guard=False), 1))
        doc(d.previous_doc, unrefreshed.neighbour(tree(guard=False), -1))
        wt = tree()
        was, touched = series_edit.rename(wt, "0007-serve-on-9090.patch")
        doc(d.rename_doc, was, "0007-serve-on-9090.patch", touched, wt.lock_update)
        wt = tree()
        top, dropped = unrefreshed.remove(wt, [CONFIG])
        doc(d.remove_doc, top, [CONFIG], dropped, wt.lock_update)
        wt = tree()
        gone = series_edit.delete(wt, None, remove=True)
        doc(d.delete_doc, gone, True, wt.top(), wt.lock_update)
        series_edit.new(tree(), "0007-fold.patch", Header(b""))
        doc(d.fold_doc, *track.fold(tree(), PORT_DIFF.encode(), source=str(tmp / "port.diff")))
        refresh.refresh(tree(), None)
        pop.pop(tree(), None, all=True)
        series_edit.delete(tree(), "0007-fold.patch", remove=True)
        wt = tree()
        items = api.import_items([tmp / "port.diff"], name="0000-port.patch")
        placed: list = []
        imported = importing.import_patches(wt, items, placed=placed)
        doc(d.import_doc, imported, items, wt.patches_dir, wt.top(), placed, items.skipped, {}, wt.lock_update)
        series_edit.delete(tree(), "0000-port.patch", remove=True)
        _edit(
            q / "patches/0005-config-shared-expert-knob.patch",
            b'("1", "true", "yes", "on")',
            b'("1", "true", "yes", "y", "on")',
        )
        wt = tree()
        r = rehash.rehash(wt, ["0005-config-shared-expert-knob.patch"])
        doc(d.rehash_doc, r, wt.patches_dir / r.name)

        # rebase: stopped on a conflict, its status, aborted; then one that is done
        doc(d.rebase_none_doc)
        stopped = api.rebase(image=f"rootfs:{conflicted}", from_ref=DEMO)
        assert stopped.status == "stopped"
        doc(d.rebase_doc, api.rebase_status())
        from imgquilt.cli.rebase import _conflict_error

        out.append(
            ("rebase", "failure", d.rebase_doc, {**d.rebase_doc(stopped), **d.error_doc(_conflict_error(stopped))})
        )
        aborted = api.rebase_abort()
        doc(d.rebase_aborted_doc, aborted.report, list(aborted.restored))
        doc(d.upstream_doc, api.diff_upstream(patch=FIRST, image=f"rootfs:{new}", from_ref=DEMO), branch="upstream")
        doc(d.rebase_doc, api.rebase(image=f"rootfs:{new}", from_ref=DEMO))

        # profiles
        doc(d.lock_doc, api.lock(profile="p1", image=f"rootfs:{new}", env=["P1_MODE=on"]))
        doc(d.lock_profiles_doc, api.lock_profiles(), branch="all_profiles")
        doc(d.guard_list_doc, tree(guard=False).queue.entries())
        entry = next(e for e in tree(guard=False).queue.entries() if e.name == FIRST)
        doc(d.guard_doc, FIRST, entry.guards, False)
        wt = tree()
        popped = series_edit.select_profile(wt, "p1")
        doc(d.select_doc, wt.profile(), wt.guards(), wt.selected(), wt.series(), popped)
        series_edit.select_profile(tree(), None)
        doc(d.check_doc, api.check(profile="all"), True, [], True)
        doc(d.apply_profiles_doc, api.apply_profiles(layer=f"{tmp}/{{profile}}.tar"))
        audits = api.audit_profiles(root=new, expect="pending")
        doc(d.audit_profiles_doc, audits, "pending", [a.profile for a in audits if a.matches], True)
        p1 = api.audit(root=new, expect="pending", profile="p1")
        doc(d.audit_doc, p1.report, p1.expect)
        wt = tree()
        m = series_edit.move(wt, "0003-app-config-longer-timeouts.patch", after="0004-demosvc-healthcheck.patch")
        doc(d.move_doc, m, wt.root / "targets.lock", wt.top())
        wt = tree()
        name, was, now = series_edit.set_guards(wt, "0002-demo-tool-honour-no-color.patch", ["-p1"], new_guard=True)
        doc(d.guard_doc, name, now, was != now, wt.lock_update, set_=True)
        doc(d.port_doc, api.port(patch="0002-demo-tool-honour-no-color.patch", profile="p1"))
        doc(d.rebase_forgotten_doc, api.rebase_forget())

        cache = tmp / "cache"
        doc(d.cache_doc, report(cache))
        doc(d.cache_pruned_doc, prune(cache), report(cache).root)
    yield out


def test_each_renderer_renders_a_real_result_its_schema_accepts(rendered: Rendered) -> None:
    wrong = []
    for schema, branch, fn, document in rendered:
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator(schema, branch).iter_errors(document)
        ]
        if errors:
            wrong.append(f"{fn.__name__} -> {schema}.schema.json#{branch}: {errors[:3]}")
    assert not wrong, "\n".join(wrong)
    assert {s for s, *_ in rendered} == schema_names()  # every schema met by at least one real document
    used = {fn for _, _, fn, _ in rendered}
    assert set(_renderers()) <= used, (
        f"renderers not run on a real result: {[f.__name__ for f in set(_renderers()) - used]}"
    )
    assert {(s, b) for s, b, *_ in rendered} >= {
        ("audit", "failure"),
        ("audit", "fleet"),
        ("rebase", "failure"),
        ("diff", "upstream"),
        ("lock", "all_profiles"),
    }
