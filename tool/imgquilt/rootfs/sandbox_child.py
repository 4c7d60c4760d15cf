"""The inside of one sandboxed probe: run by the host's Python as the first process of new user,
mount, pid and network namespaces (`unshare`, see sandbox.py), standard library only.

It builds the probe's root from the spec it is given (argv[1], JSON) and execs the image's program:

1. every mount made here stays here (the mount namespace is made private first);
2. the base root is bind-mounted (not recursively) on an empty directory of imgquilt's and made read
   only; a directory holding new files gets a read-only overlay (the staged files over the base's);
   each patched file that the base has is bind-mounted read only over it, as the overlay deployment does;
3. /tmp is a private tmpfs, /dev a tmpfs with the host's null, zero, full, random and urandom bound in,
   /proc the new pid namespace's own (each only where the root has that directory);
4. pivot_root into it and the host's root is detached: nothing of the host is reachable by path;
5. the image's user (a user namespace mapping it, see become()), the working directory, an address-space limit, no new privileges, every capability dropped (so
   the probe, uid 0 of the user namespace, cannot remount the root read-write), then execve.

Any step that fails prints `imgquilt-sandbox: STEP: WHY` on stderr and exits 125.
"""
import ctypes
import json
import os
import platform
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
_ST_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC))
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}
_DEVICES = ("null", "zero", "full", "random", "urandom")
SETUP_FAILED = 125

_libc = ctypes.CDLL(None, use_errno=True)


class Failed(Exception):
    pass


def _check(rc, step):
    if rc != 0:
        err = ctypes.get_errno()
        raise Failed("%s: %s" % (step, os.strerror(err)))


def mount(source, target, fstype, flags, data, step):
    def enc(s):
        return None if s is None else os.fsencode(s)

    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), step)


def bind_ro(source, target, step):
    """A read-only bind mount; the flags the kernel locks (nosuid, nodev, noexec of the source) kept."""
    mount(source, target, None, MS_BIND, None, step)
    kept = 0
    st = os.statvfs(target)
    for have, flag in _ST_FLAGS:
        if st.f_flag & have:
            kept |= flag
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, None, step + " (read only)")


def _escape(path):
    return path.replace("\\", "\\\\").replace(":", "\\:").replace(",", "\\,")


def _inside(new_root, rel):
    return os.path.join(new_root, rel) if rel else new_root


def build(spec):
    new_root = spec["mountpoint"]
    mount(None, "/", None, MS_REC | MS_PRIVATE, None, "make the mounts private")
    bind_ro(spec["root"], new_root, "bind the root read only")
    for lowers, rel in spec.get("overlays", []):
        target = _inside(new_root, rel)
        opts = "lowerdir=" + ":".join(_escape(x) for x in list(lowers) + [target])
        mount("overlay", target, "overlay", MS_RDONLY, opts, "overlay the new files on /" + rel)
    for src, rel in spec.get("binds", []):
        bind_ro(src, _inside(new_root, rel), "bind the patched file /" + rel)
    if os.path.isdir(os.path.join(new_root, "tmp")):
        mount("tmpfs", os.path.join(new_root, "tmp"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=%d" % spec["tmp_bytes"],
              "a private tmpfs at /tmp")
    dev = os.path.join(new_root, "dev")
    if os.path.isdir(dev):
        mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=64k", "a tmpfs at /dev")
        for name in _DEVICES:
            if os.path.exists("/dev/" + name):
                open(os.path.join(dev, name), "w").close()
                mount("/dev/" + name, os.path.join(dev, name), None, MS_BIND, None, "bind /dev/" + name)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):
            os.symlink(target, os.path.join(dev, name))
        os.mkdir(os.path.join(dev, "shm"), 0o1777)
    proc = os.path.join(new_root, "proc")
    if os.path.isdir(proc):
        try:
            mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "/proc")
        except Failed:
            pass  # a kernel that refuses it (a masked /proc on the host): the probe runs without one
    os.chdir(new_root)
    proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if spec.get("user") else None
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise Failed("pivot_root: not known on %s" % platform.machine())
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the host's root")
    os.chdir("/")
    if proc_fd is not None:
        try:
            become(spec["user"], proc_fd)
        finally:
            os.close(proc_fd)
    cwd = spec.get("cwd") or "/"
    try:
        os.chdir(cwd)
    except OSError:
        os.chdir("/")


CLONE_NEWUSER = 0x10000000


def become(user, proc_fd):
    """Run as the image's User: a user namespace of its own in which this process's uid and gid (0
    of the sandbox's) are the image's, so getuid() is what the image says (files of the root show as
    that user's). The mounts are made already; the namespace gives no power over them."""
    uid, gid = int(user[0]), int(user[1])
    if uid == 0 and gid == 0:
        return
    _check(_libc.unshare(CLONE_NEWUSER), "a user namespace for the image's user")

    def write(name, text):
        fd = os.open("self/" + name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc_fd)  # the host's /proc: this process
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    write("setgroups", "deny")
    write("uid_map", "%d 0 1" % uid)
    write("gid_map", "%d 0 1" % gid)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(memory):
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    _check(_libc.prctl(38, 1, 0, 0, 0), "no new privileges")  # PR_SET_NO_NEW_PRIVS
    _libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL (old kernels: none to clear)
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        _libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    # SECBIT_NOROOT | _LOCKED | SECBIT_NO_SETUID_FIXUP | _LOCKED: uid 0 gains nothing at execve
    _check(_libc.prctl(28, 0x0F, 0, 0, 0), "securebits")
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "drop the capabilities")


def main():
    spec = json.loads(sys.argv[1])
    try:
        build(spec)
        drop_privileges(spec.get("memory"))
    except (Failed, OSError) as exc:
        sys.stderr.write("imgquilt-sandbox: %s\n" % exc)
        sys.stderr.flush()
        os._exit(SETUP_FAILED)
    argv = spec["argv"]
    try:
        os.execve(argv[0], argv, spec["env"])
    except OSError as exc:
        sys.stderr.write("imgquilt-sandbox: exec %s: %s\n" % (argv[0], exc.strerror or exc))
        sys.stderr.flush()
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
