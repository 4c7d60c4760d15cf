"""`audit --history`: when each patch entered and left the series, from a real git repository."""
from __future__ import annotations

from pathlib import Path

import git
import pytest

from imgquilt.errors import UsageError
from imgquilt.cli.documents import history as history_json
from imgquilt.verbs.history import DELETED_WHILE_LISTED, RE_ADDED, SILENT_REMOVAL, names_patch, queue_history
from imgquilt.queue.patchfile import Header, build_patch, make_section


def patch_bytes(name: str, old: bytes, new: bytes) -> bytes:
    return build_patch(name, Header(f"Description: {name}\n\n".encode()), [make_section("etc/x.conf", old, new)]).raw


class QueueRepo:
    """A git repository holding a queue at `rel`, committed step by step like a team would."""

    def __init__(self, top: Path, rel: str = "queue") -> None:
        self.top = top
        self.repo = git.Repo.init(top)
        with self.repo.config_writer() as c:
            c.set_value("user", "name", "Test")
            c.set_value("user", "email", "test@example.org")
        self.rel = rel
        (self.q / "patches").mkdir(parents=True)

    @property
    def q(self) -> Path:
        return self.top / self.rel

    def series(self, *names: str) -> None:
        (self.q / "series").write_text("# the queue\n" + "".join(f"{n}\n" for n in names))

    def patch(self, name: str, version: int = 1) -> None:
        (self.q / "patches" / name).write_bytes(patch_bytes(name, b"base\n", f"v{version}\n".encode()))

    def delete(self, name: str) -> None:
        (self.q / "patches" / name).unlink()

    def commit(self, message: str) -> str:
        self.repo.git.add("-A")
        self.repo.git.commit("-q", "-m", message)
        return self.repo.head.commit.hexsha


def events(h, name: str) -> list[tuple[str, str]]:
    p = next(p for p in h.patches if p.name == name)
    return [(e.kind, e.commit.subject) for e in p.events]


def test_a_silent_removal_is_flagged_with_hash_and_subject(tmp_path: Path) -> None:
    r = QueueRepo(tmp_path / "repo")
    r.patch("0001-fix-foo.patch"); r.patch("0002-bar.patch"); r.series("0001-fix-foo.patch", "0002-bar.patch")
    r.commit("Add the queue")
    r.patch("0001-fix-foo.patch", 2)
    r.commit("Refresh fix-foo for the new context")
    r.series("0001-fix-foo.patch"); r.delete("0002-bar.patch")
    silent = r.commit("Update base image to 2.0\n\nRegenerated the lock.")
    r.series()
    r.delete("0001-fix-foo.patch")
    r.commit("Drop 0001-fix-foo.patch: merged upstream")

    h = queue_history(r.q)
    assert h.queue_path == "queue" and h.commits == 4
    assert [p.name for p in h.patches] == ["0001-fix-foo.patch", "0002-bar.patch"]
    assert events(h, "0001-fix-foo.patch") == [
        ("added", "Add the queue"), ("changed", "Refresh fix-foo for the new context"), ("removed", "Drop 0001-fix-foo.patch: merged upstream"),
    ]
    assert events(h, "0002-bar.patch") == [("added", "Add the queue"), ("removed", "Update base image to 2.0")]
    (flag,) = h.flags
    assert (flag.kind, flag.patch, flag.commit.hexsha, flag.commit.subject) == (SILENT_REMOVAL, "0002-bar.patch", silent, "Update base image to 2.0")
    assert silent[:12] in flag.message and "Update base image to 2.0" in flag.message
    doc = history_json(h)
    assert doc["flags"][0]["commit"] == silent and doc["flags"][0]["subject"] == "Update base image to 2.0"
    assert not any(p["in_series"] for p in doc["patches"])


def test_re_added_and_deleted_while_listed(tmp_path: Path) -> None:
    r = QueueRepo(tmp_path / "repo")
    r.patch("0001-a.patch"); r.patch("0002-b.patch"); r.series("0001-a.patch", "0002-b.patch")
    r.commit("Start")
    r.series("0001-a.patch")
    removed = r.commit("Remove 0002-b, it broke the build")
    r.series("0001-a.patch", "0002-b.patch")
    readded = r.commit("Bring back b after all")
    r.delete("0001-a.patch")
    deleted = r.commit("Tidy the patches directory")

    h = queue_history(r.q)
    kinds = {(f.kind, f.patch, f.commit.hexsha) for f in h.flags}
    assert kinds == {(RE_ADDED, "0002-b.patch", readded), (DELETED_WHILE_LISTED, "0001-a.patch", deleted)}
    re_added = next(f for f in h.flags if f.kind == RE_ADDED)
    assert removed[:12] in re_added.message
    assert events(h, "0002-b.patch") == [("added", "Start"), ("removed", "Remove 0002-b, it broke the build"), ("added", "Bring back b after all")]
    assert events(h, "0001-a.patch")[-1] == ("changed", "Tidy the patches directory")
    assert all(p.in_series for p in h.patches)


def test_the_queue_is_followed_when_it_moves(tmp_path: Path) -> None:
    r = QueueRepo(tmp_path / "repo", rel="queue")
    r.patch("0001-a.patch"); r.patch("0002-b.patch"); r.series("0001-a.patch", "0002-b.patch")
    r.commit("Start")
    r.series("0001-a.patch")
    silent = r.commit("Unrelated cleanup")
    (r.top / "images").mkdir()
    r.repo.git.mv("queue", "images/vllm")
    r.rel = "images/vllm"
    r.commit("Move the queue under images/")
    r.patch("0001-a.patch", 3)
    r.commit("Refresh 0001-a")

    h = queue_history(r.q)
    assert h.queue_path == "images/vllm"
    assert events(h, "0001-a.patch") == [("added", "Start"), ("changed", "Refresh 0001-a")]  # the move is no event
    assert [(f.kind, f.patch, f.commit.hexsha) for f in h.flags] == [(SILENT_REMOVAL, "0002-b.patch", silent)]


def test_a_branch_removal_is_credited_to_the_branch_commit_not_the_merge(tmp_path: Path) -> None:
    r = QueueRepo(tmp_path / "repo")
    r.patch("0001-a.patch"); r.patch("0002-b.patch"); r.series("0001-a.patch", "0002-b.patch")
    r.commit("Start")
    main = r.repo.active_branch.name
    r.repo.git.checkout("-q", "-b", "topic")
    r.series("0001-a.patch")
    on_topic = r.commit("Rebase onto 2.0")
    r.repo.git.checkout("-q", main)
    (r.top / "README").write_text("other work\n")
    r.commit("Docs")
    r.repo.git.merge("-q", "--no-ff", "-m", "Merge branch topic", "topic")

    h = queue_history(r.q)
    assert events(h, "0002-b.patch") == [("added", "Start"), ("removed", "Rebase onto 2.0")]
    assert [(f.kind, f.commit.hexsha) for f in h.flags] == [(SILENT_REMOVAL, on_topic)]


def test_names_patch() -> None:
    assert names_patch("Drop 0003-fix-moe.patch", "0003-fix-moe.patch")
    assert names_patch("drop FIX-MOE, merged upstream", "0003-fix-moe.patch")
    assert names_patch("remove 0003-fix-moe", "0003-fix-moe.patch")
    assert not names_patch("Update base image", "0003-fix-moe.patch")
    assert not names_patch("Bump 0003", "0003-fix-moe.patch")


def test_not_a_git_repository_is_a_usage_error(tmp_path: Path) -> None:
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    with pytest.raises(UsageError):
        queue_history(q)


def test_a_repository_without_commits_has_no_history(tmp_path: Path) -> None:
    r = QueueRepo(tmp_path / "repo")
    r.series("0001-a.patch")
    h = queue_history(r.q)
    assert h.commits == 0 and h.patches == () and h.flags == ()


def test_a_queue_at_the_top_of_its_repository(tmp_path: Path) -> None:
    r = QueueRepo(tmp_path / "repo", rel="")
    r.patch("0001-a.patch"); r.series("0001-a.patch")
    r.commit("Start")
    r.series(); r.commit("wip")
    h = queue_history(r.q)
    assert h.queue_path == "." and events(h, "0001-a.patch") == [("added", "Start"), ("removed", "wip")]
    assert [f.kind for f in h.flags] == [SILENT_REMOVAL]
