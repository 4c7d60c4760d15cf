"""The base image the layer semantics tests start from."""

from __future__ import annotations

from support.imagetools import (
    dir_,
    file,
    hardlink,
    symlink,
)

BASE = [
    file("usr/bin/which.debianutils", "which from debianutils\n", mode=0o755),
    symlink("bin", "usr/bin"),  # merged /usr
    symlink("lib", "usr/lib"),
    file("usr/lib/os-release", "NAME=Debian\r\nVERSION=12\r\n"),
    symlink("etc/os-release", "../usr/lib/os-release"),
    dir_("etc/alternatives"),
    symlink("etc/alternatives/which", "/usr/bin/which.debianutils"),
    symlink("usr/bin/which", "/etc/alternatives/which"),
    file("usr/share/doc/readme", "old readme\n"),
    file("etc/motd", "hello\n"),
    file("opt/app/conf/a.conf", "a=1\n"),
    file("opt/app/conf/b.conf", "b=1\n"),
    file("usr/lib/python3/site.py", "print('base')\n", mode=0o644, uid=1000, gid=1000),
    hardlink("usr/lib/python3/site-link.py", "usr/lib/python3/site.py", uid=1000, gid=1000),
    file("srv/data.bin", bytes(range(256)) * 64),
]
