"""verbs/fanout: one fan-out (profiles x platforms x images) resolved once from the strings the user
gave, and each verb's rule of which combinations it refuses (the UsageError texts the CLI used to
raise itself). The CLI passes the strings through: cli/ holds no `== "all"`, and a CLI apply or
audit enters api.py at most once (now never: the CLI calls the verbs)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from imgquilt import api
from imgquilt.errors import BadInput, UsageError
from imgquilt.verbs.apply_verb import ApplyRequest, refuse_apply
from imgquilt.verbs.audit_verb import AuditRequest, refuse_audit
from imgquilt.verbs.check import CheckRequest, refuse_check
from imgquilt.verbs.fanout import Cell, Selection, boot_profiles, fan_out, platforms, select
from imgquilt.verbs.lock import LockRequest, refuse_lock
from imgquilt.verbs.verify import VerifyRequest, refuse_verify
from support.qtools import REPO, SERVER, svc_root, write_patch

CLI = REPO / "tool" / "imgquilt" / "cli"


@pytest.fixture
def profiled(tmp_path: Path) -> tuple[Path, Path]:
    """A queue of one patch, pinned as two profiles (b declared before a; targets.lock keeps them by name) on a rootfs."""
    root = svc_root(tmp_path / "rootfs")
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "port.patch", [("lib/svc/server.py", SERVER, SERVER.replace(b"8000", b"9000"))])
    api.lock(q, image=f"rootfs:{root}", profile="b", new=True)
    api.lock(q, image=f"rootfs:{root}", profile="a", new=True)
    return q, root


# --- the selection --------------------------------------------------------------------------------
def test_select_resolves_the_strings_once(tmp_path: Path) -> None:
    assert select() == Selection(None, None, (), False)
    sel = select("all", "all")
    assert sel.every_profile and sel.every_platform and sel.image is None and not sel.fleet
    one = select("glm53", "linux/arm64", ["oci:x:1"])
    assert not one.every_profile and not one.every_platform and one.image == "oci:x:1" and not one.fleet
    # several images (each once, in their order) are a fleet; so is a list file, even of one
    many = select(images=["oci:a", "oci:b", "oci:a"])
    assert many.images == ("oci:a", "oci:b") and many.fleet
    listed = tmp_path / "fleet.txt"
    listed.write_text("# the fleet\noci:c  # the third\n\noci:a\n")
    both = select(images=["oci:a"], images_from=listed)
    assert both.images == ("oci:a", "oci:c") and both.fleet
    listed.write_text("oci:only\n")
    assert select(images_from=listed).fleet
    listed.write_text("# nothing\n")
    with pytest.raises(UsageError, match="no image reference in it"):
        select(images_from=listed)
    # a list that cannot be read says why in words, not as a Python exception's class
    with pytest.raises(UsageError, match=r"cannot be read \(it does not exist\)") as err:
        select(images_from=tmp_path / "missing.txt")
    assert "Error" not in err.value.message
    listed.write_bytes(b"oci:\xff\n")
    with pytest.raises(UsageError, match=r"cannot be read \(it is not UTF-8 text\)"):
        select(images_from=listed)


def test_fan_out_profiles_in_lock_order(profiled: tuple[Path, Path]) -> None:
    q, _ = profiled
    queue = api.load_queue(q)
    cells = fan_out(Selection("all"), queue)
    assert [c.profile.name for c in cells if c.profile] == ["a", "b"]  # targets.lock's order
    assert all(c.platform is None and c.image is None for c in cells)
    (one,) = fan_out(Selection("a", "linux/amd64"), queue)
    assert one.profile is not None and one.profile.name == "a" and one.platform == "linux/amd64"
    assert fan_out(Selection(), queue) == (Cell(None, None, None),)  # the default: the verb resolves it
    with pytest.raises(UsageError, match=re.escape("Unknown profile 'c': targets.lock declares a, b.")):
        fan_out(Selection("c"), queue)
    # profiles x images
    cells = fan_out(Selection("all", images=("oci:x", "oci:y"), fleet=True), queue)
    assert [(c.profile.name if c.profile else None, c.image) for c in cells] == [
        ("a", "oci:x"),
        ("a", "oci:y"),
        ("b", "oci:x"),
        ("b", "oci:y"),
    ]


def test_fan_out_every_profile_needs_one(tmp_path: Path) -> None:
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    with pytest.raises(UsageError, match=re.escape("`--profile all`: targets.lock declares no profile.")):
        fan_out(Selection("all"), api.load_queue(q))
    with pytest.raises(UsageError, match=re.escape("`--profile all`: targets.lock declares no profile.")):
        boot_profiles(q, "all")


def test_platforms_of_a_root_filesystem_are_refused(profiled: tuple[Path, Path]) -> None:
    _, root = profiled
    assert platforms(Selection(platform="linux/arm64"), None, None) == ["linux/arm64"]
    with pytest.raises(UsageError, match="--platform all needs an image"):
        platforms(Selection(platform="all"), f"rootfs:{root}", None)


# --- the refused combinations, one rule per verb ------------------------------------------------
@pytest.mark.parametrize(
    "req, text",
    [
        (
            ApplyRequest(boot_check=True, profile="all"),
            "--boot boots one image: it cannot go with --reverse, --profile all or --platform all.",
        ),
        (ApplyRequest(boot_check=True, platform="all"), "--boot boots one image"),
        (ApplyRequest(boot_check=True, reverse=True), "--boot boots one image"),
        (
            ApplyRequest(profile="all", image="oci:x"),
            "`apply --profile all` applies each profile on the image it pins; give it no --image, --root or --platform all.",
        ),
        (ApplyRequest(profile="all", platform="all"), "`apply --profile all` applies each profile"),
        (ApplyRequest(profile="all", root="/srv"), "`apply --profile all` applies each profile"),
        (
            ApplyRequest(profile="glm53", platform="all"),
            "--platform all takes the default selection; give one of --platform all and --profile.",
        ),
        (
            ApplyRequest(platform="all", layer="x.tar"),
            "--platform all writes an image index (--output-image) or only verifies; --layer, --root and --overlay take one platform.",
        ),
        (ApplyRequest(platform="all", overlay="o"), "--platform all writes an image index"),
    ],
)
def test_apply_refuses(req: ApplyRequest, text: str) -> None:
    with pytest.raises(UsageError) as exc:
        refuse_apply(req)
    assert exc.value.message.startswith(text) and exc.value.exit_code == 2


def test_apply_takes_what_it_always_took() -> None:
    for req in (
        ApplyRequest(),
        ApplyRequest(profile="all", layer="{profile}.tar"),
        ApplyRequest(platform="all", output_image="oci:o"),
        ApplyRequest(reverse=True, profile="all"),
        ApplyRequest(profile="a", image="oci:x", boot_check=True),
    ):
        refuse_apply(req)


@pytest.mark.parametrize(
    "req, text",
    [
        (AuditRequest(merge_more=(Path("b.json"),)), "Unexpected argument b.json."),
        (
            AuditRequest(merge=(Path("a.json"),), images=("oci:x",)),
            "--merge reads audit documents, not images: give it no --image, --images-from, --root, --pid, --history or --trust-attestation.",
        ),
        (AuditRequest(merge=(Path("a.json"),), pid=1), "--merge reads audit documents"),
        (AuditRequest(images=("oci:a", "oci:b"), profile="all"), "A fleet audit judges each image by its own profile"),
        (
            AuditRequest(images=("oci:a", "oci:b"), platform="all"),
            "A fleet audit (several images) takes no --root, --pid, --history or --platform all.",
        ),
        (AuditRequest(images=("oci:a", "oci:b"), history=True), "A fleet audit (several images) takes no"),
        (
            AuditRequest(profile="all", history=True),
            "`audit --profile all` judges one image, root or process per profile; it takes no --history or --platform all.",
        ),
        (AuditRequest(profile="all", platform="all"), "`audit --profile all` judges one image"),
        (
            AuditRequest(profile="glm53", platform="all"),
            "--platform all judges the default selection; give one of --platform all and --profile.",
        ),
        (
            AuditRequest(platform="all", root="/srv"),
            "--platform all audits an image's platforms; it takes no --root, --pid or --history.",
        ),
        (AuditRequest(platform="all", pid=1), "--platform all audits an image's platforms"),
    ],
)
def test_audit_refuses(req: AuditRequest, text: str) -> None:
    with pytest.raises(UsageError) as exc:
        refuse_audit(req)
    assert exc.value.message.startswith(text) and exc.value.exit_code == 2


def test_audit_selection_is_the_requests() -> None:
    assert refuse_audit(AuditRequest(merge=(Path("a.json"),))) is None  # --merge reads no image
    sel = refuse_audit(AuditRequest(images=("oci:a", "oci:b", "oci:a"), platform="linux/arm64"))
    assert sel == Selection(None, "linux/arm64", ("oci:a", "oci:b"), True)
    assert refuse_audit(AuditRequest(images=("oci:a",), profile="all")).every_profile


def test_other_verbs_refuse() -> None:
    with pytest.raises(
        UsageError, match=re.escape("verify checks the attestation of one image: name the profile it was applied for")
    ):
        refuse_verify(VerifyRequest(profile="all", key="k.pub"))
    refuse_verify(VerifyRequest(profile="a", platform="all", key="k.pub"))
    with pytest.raises(
        UsageError,
        match=re.escape(
            "`lock --profile all` re-pins every profile on its own image; give it no --image, --select or --env."
        ),
    ):
        refuse_lock(LockRequest(profile="all", env=("K=V",)))
    refuse_lock(LockRequest(profile="all"))
    with pytest.raises(
        UsageError,
        match=re.escape("`check --boot` boots one image; use `imgquilt boot --profile all` for every profile."),
    ):
        refuse_check(CheckRequest(profile="all", boot=True))
    refuse_check(CheckRequest(profile="all"))
    with pytest.raises(
        UsageError,
        match=re.escape(
            "`boot --profile all` boots each profile on the image it pins; give it no --image, --root or --overlay."
        ),
    ):
        boot_profiles(None, "all", image="oci:x")
    assert boot_profiles(None, "a", image="oci:x") == ["a"]


def test_merge_of_a_missing_shard(tmp_path: Path) -> None:
    from imgquilt.verbs.fleet import merge_files

    with pytest.raises(UsageError, match="--merge .*nope.json: no such file."):
        merge_files([tmp_path / "nope.json"], None)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(BadInput, match="not JSON"):
        merge_files([tmp_path / "bad.json"], None)


# --- the CLI passes the strings; the call path ----------------------------------------------------
def test_cli_holds_no_all_branch() -> None:
    found = [
        f"{p.name}:{n}: {line.strip()}"
        for p in sorted(CLI.glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"""[!=]= ?(["']all["']|ALL\b)""", line)
    ]
    assert found == []


def _api_entries(args: list[str], cwd: Path) -> int:
    """How often a CLI command run in this process enters api.py (a call from a frame outside it)."""
    from imgquilt.cli.main import main

    api_py = os.path.join("imgquilt", "api.py")
    entries = 0

    def count(frame, event, arg):  # noqa: ANN001, ANN202
        nonlocal entries
        if event == "call" and frame.f_code.co_filename.endswith(api_py):
            caller = frame.f_back.f_code.co_filename if frame.f_back else ""
            entries += not caller.endswith(api_py)

    old = os.getcwd()
    os.chdir(cwd)
    sys.setprofile(count)
    try:
        main(args)
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
        os.chdir(old)
    return entries


def test_cli_apply_and_audit_enter_api_at_most_once(tmp_path: Path) -> None:
    root = svc_root(tmp_path / "rootfs")
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "port.patch", [("lib/svc/server.py", SERVER, SERVER.replace(b"8000", b"9000"))])
    api.lock(q, image=f"rootfs:{root}")
    assert _api_entries(["apply", "--root", str(root)], q) <= 1  # was 5: apply, then _naming/_other_pin twice each
    assert (root / "usr/lib/svc/server.py").read_bytes() == SERVER.replace(b"8000", b"9000")
    assert _api_entries(["audit", "--root", str(root)], q) <= 1
    assert _api_entries(["audit", "--image", f"rootfs:{root}", "--profile", "all"], q) <= 1
