# Issue 29, point 1: targets.lock follows every command that changes what it derives from, in the
# same queue transaction, with no image read (the object store and the work tree hold the bases);
# check, apply --locked and the pre-commit hook (tests/house/test_precommit.py) pass with no `lock` in between.
$ imgquilt push 3 > /dev/null && sed -i 's/^count = .*/count = 4/' .imgquilt/work/home/app/config.toml && imgquilt refresh
Refreshed patch 0003-app-config-longer-timeouts.patch.
Updated targets.lock (no image read).

$ imgquilt check && imgquilt apply --locked --layer $SANDBOX/fix.tar | tail -2
The queue is sound: 6 patch(es), chains and Requires in order.
Verified 6 patch(es) on oci:examples/demo-image:latest (pinned by targets.lock).
Wrote layer: $SANDBOX/fix.tar sha256:dfd762827056efd3bd656789c2c74e38afbd8e42227924c14b248065b4b4675f

# what the command wrote is what `imgquilt lock` writes
$ cp targets.lock $SANDBOX/by-refresh && imgquilt lock > /dev/null && cmp targets.lock $SANDBOX/by-refresh && echo same
same

# a header, a name, a new patch with a file the lock did not pin yet (read from that image by `add`), a deletion
$ imgquilt header --set Status=merged 0001-which-skip-empty-path-elements.patch && imgquilt rename 0002-demo-tool-honour-no-color.patch 0002-demo-tool-no-color.patch
Header of 0001-which-skip-empty-path-elements.patch updated.
Updated targets.lock (no image read).
Patch 0002-demo-tool-honour-no-color.patch renamed to 0002-demo-tool-no-color.patch.
Updated targets.lock (no image read).

$ imgquilt new 0004-motd.patch -d "a motd" > /dev/null && imgquilt add --new etc/motd > /dev/null && echo hello > .imgquilt/work/etc/motd && imgquilt refresh && imgquilt check
Refreshed patch 0004-motd.patch.
Updated targets.lock (no image read).
The queue is sound: 7 patch(es), chains and Requires in order.

$ imgquilt pop > /dev/null && imgquilt delete -r 0004-motd.patch && imgquilt check
Removed patch 0004-motd.patch from series and deleted its file.
Updated targets.lock (no image read).
The queue is sound: 6 patch(es), chains and Requires in order.

# import too (the bases it reads are the lock's)
$ imgquilt pop -a > /dev/null && printf -- '--- a/usr/lib/os-release\n+++ b/usr/lib/os-release\n@@ -1 +1 @@\n-PRETTY_NAME="Demo Linux 1.0 (quilt)"\n+PRETTY_NAME="Demo Linux 1.0 (patched)"\n' > $SANDBOX/os.diff && imgquilt import -P 0000-os-release.patch $SANDBOX/os.diff && imgquilt check
Imported 0000-os-release.patch (1 file(s)) as patches/0000-os-release.patch.
They stand after 0006-moe-shared-expert.patch (no patch is applied), with bases read there; `imgquilt push` applies them to the work tree.
Updated targets.lock (no image read).
The queue is sound: 7 patch(es), chains and Requires in order.

# a stale lock's hint names its cause: series reordered by hand
$ sed -i '1{h;d};2{G}' series && head -2 series && imgquilt check
0002-demo-tool-no-color.patch
0001-which-skip-empty-path-elements.patch
imgquilt: The queue has 1 problem(s):
  - targets.lock is stale (series edited by hand since it was made: its order or options changed); run `imgquilt lock`.
[exit 6]

$ imgquilt lock > /dev/null && imgquilt check
The queue is sound: 7 patch(es), chains and Requires in order.

# a command that could not update it says so, and check names that command: its new file was read from
# another image (a tar of the same files), and only `imgquilt lock` reads the one the lock pins
$ python3 examples/build_demo.py --rootfs $SANDBOX/fs > /dev/null && tar -C $SANDBOX/fs -cf $SANDBOX/fs.tar . && imgquilt push -a > /dev/null && imgquilt new 0099-group.patch > /dev/null && imgquilt add --image tar:$SANDBOX/fs.tar etc/group > /dev/null && echo 'demo:x:1001:' >> .imgquilt/work/etc/group && imgquilt refresh
Refreshed patch 0099-group.patch.
targets.lock is stale now: etc/group is new to the lock and was never read from the image it pins; run `imgquilt lock` (it reads it from the image).

$ imgquilt check
imgquilt: The queue has 1 problem(s):
  - targets.lock is stale (`imgquilt refresh` changed the queue and could not update it: etc/group is new to the lock and was never read from the image it pins); run `imgquilt lock` (it reads it from the image).
[exit 6]

$ imgquilt lock | tail -1 && imgquilt check && imgquilt pop -a > /dev/null
Wrote $TMP/queue/targets.lock.
The queue is sound: 8 patch(es), chains and Requires in order.

# hand edits of a patch: with the bases at hand, whether its body still gives its pins decides the way
$ sed -i 's/request_timeout_s = 120/request_timeout_s = 90/' patches/0003-app-config-longer-timeouts.patch && imgquilt check
imgquilt: The queue has 2 problem(s):
  - 0003-app-config-longer-timeouts.patch: home/app/config.toml: Patched-SHA256 is stale: the body gives 4461e8785449f5673fa7c650db5d3d046f28c5643ed755349d5edf4e2a21d319, the line says a9db0f98597ff403dff90d970e7c2b1e699111beece24f6509255de81bf7d5c1 (hand-edited?); run `imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch`.
  - targets.lock is stale (0003-app-config-longer-timeouts.patch edited by hand since it was made: its body no longer gives its Patched-SHA256); `imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch` re-pins a hand edit (and the patches after it) and writes the lock.
[exit 6]
