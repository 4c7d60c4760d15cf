"""The external programs the tests run, and which marker each one puts on a test.

CI_TOOLS is what .ci/install-tools installs: with IMGQUILT_CI_REQUIRE_TOOLS=1 (set by .ci/run) a test
skipped for want of one of them fails the run instead, so CI never passes by skipping what it paid for.
"""

from __future__ import annotations

import os
import re
import shutil

# name -> package that provides it (Debian); the order is the one .ci/install-tools lists
CI_TOOLS: dict[str, str] = {
    "skopeo": "skopeo",
    "umoci": "umoci",
    "podman": "podman",
    "buildah": "buildah",
    "tmux": "tmux",
    "quilt": "quilt",
    "patch": "patch",
    "git": "git",
    "zstd": "zstd",
    "strace": "strace",
    "docker-registry": "docker-registry",
    "htpasswd": "apache2-utils",
    "containerd": "containerd",
    "ctr": "containerd",
    "ctr-remote": "stargz-snapshotter",
    "apt-get": "apt",
}
# programs some tests use that CI does not install for them (a skip of these never fails CI)
OTHER_TOOLS = ("debootstrap", "unshare", "chroot", "setcap")
TOOLS = (*CI_TOOLS, *OTHER_TOOLS)

# a tool puts `tools` on a test; these put one more marker
EXTRA_MARK = {"strace": "crash", "docker-registry": "network", "htpasswd": "network", "apt-get": "network"}

REQUIRE_ENV = "IMGQUILT_CI_REQUIRE_TOOLS"


def missing(names: set[str] | frozenset[str]) -> list[str]:
    """The programs of `names` not on PATH, in table order."""
    return [t for t in TOOLS if t in names and shutil.which(t) is None]


def required_in_ci() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


_WORD = {t: re.compile(rf"(?<![\w./-]){re.escape(t)}(?![\w-])") for t in CI_TOOLS}


_ABSENT = re.compile(r"not installed|needs |is needed|not found|missing")


def named_ci_tools(text: str) -> list[str]:
    """The CI-installed tools a skip reason says are missing ("skopeo not installed", "needs strace"; word
    match: "quilt" is not found in "imgquilt"). A skip for the machine's limits ("no usable
    containers-storage here: skopeo ... failed") names a tool without saying it is missing: kept a skip."""
    if not _ABSENT.search(text):
        return []
    return [t for t, rx in _WORD.items() if rx.search(text)]
