# Issue 29, point 2: each cause of drift gets its own diagnosis and way on, seen from a fresh clone;
# `restore` and `apply --reverse` leave the root exactly as the image has it.
# $SANDBOX/image: the demo image's filesystem, as the lock pins it; $SANDBOX/root: a copy to work on;
# $SANDBOX/same compares two trees: every path, type, mode, owner, link target and byte.
$ printf '#!/bin/sh\nlist() { (cd "$1" && find . -printf "%%p %%M %%U:%%G %%l\\n" | sort); }\ndiff -r --no-dereference "$1" "$2" && [ "$(list "$1")" = "$(list "$2")" ] && echo "as the image has it"\n' > $SANDBOX/same && chmod +x $SANDBOX/same && python3 examples/build_demo.py --rootfs $SANDBOX/image > /dev/null && cp -a $SANDBOX/image $SANDBOX/root && $SANDBOX/same $SANDBOX/image $SANDBOX/root && imgquilt check
as the image has it
The queue is sound: 6 patch(es), chains and Requires in order.

# a file edited by hand in a root that nothing ties to the image: the diff against the image's bytes, both ways on
$ sed -i 's/request_timeout_s = 30/request_timeout_s = 45/' $SANDBOX/root/home/app/config.toml && imgquilt apply --root $SANDBOX/root
imgquilt: Refused: 1 verification failure(s); nothing was written.
  - 0003-app-config-longer-timeouts.patch: home/app/config.toml: base drifted: expected sha256 3cd9af323a174433dfda7dd872d360421e60ba85ceb979d61e48a7a01d83b20f, found 7723c882bc7be90c5d92dcdd76c0caac8cdecf5cb6a0657e07019e7a6c76b6ac. Edited in this root, or the root is another image: the image the lock pins has sha256 3cd9af323a174433dfda7dd872d360421e60ba85ceb979d61e48a7a01d83b20f there.
    --- a/home/app/config.toml
    +++ b/home/app/config.toml
    @@ -3,5 +3,5 @@
     host = "0.0.0.0"
     port = 8080
    -request_timeout_s = 30
    +request_timeout_s = 45
     keepalive_timeout_s = 5
     
If the root was edited by hand, `imgquilt restore home/app/config.toml --root $SANDBOX/root` puts back what the image has; if it is another image (a new version), `imgquilt rebase --image REF` carries the queue onto it.
[exit 3]

$ imgquilt restore home/app/config.toml --root $SANDBOX/root && $SANDBOX/same $SANDBOX/image $SANDBOX/root
restored home/app/config.toml
Restored 1 file(s) in $SANDBOX/root as the image has them.
as the image has it

$ imgquilt apply --root $SANDBOX/root | tail -1
Wrote root: $SANDBOX/root (9 file(s) replaced)

# now the root carries imgquilt's apply record, which ties it to the image: a hand edit is named as one
$ sed -i 's/^count = 2/count = 3/' $SANDBOX/root/home/app/config.toml && imgquilt apply --root $SANDBOX/root 2>&1 | grep -v '^  - 000[1-6].*this patch.s result\|later patch was applied'
imgquilt: Refused: 8 verification failure(s); nothing was written.
  - 0003-app-config-longer-timeouts.patch: home/app/config.toml: base drifted: expected sha256 3cd9af323a174433dfda7dd872d360421e60ba85ceb979d61e48a7a01d83b20f, found dfccb518c8762d1890c05d233ab51769da6561d1565dbc3c49253019d65e8139. The root was edited by hand after imgquilt applied the queue, which left sha256 71a5163fc52665d67c6379a4bc7677ee8f7fc4464a650f2f96322114c050d9c0 there:
    --- a/home/app/config.toml
    +++ b/home/app/config.toml
    @@ -7,5 +7,5 @@
     
     [workers]
    -count = 2
    +count = 3
     max_batch_tokens = 8192
     
Put back what the image has: `imgquilt restore home/app/config.toml --root $SANDBOX/root` (journaled, as apply is); or keep the edit in the queue: `imgquilt new NAME.patch`, `imgquilt add PATH`, copy the file from the root into .imgquilt/work/PATH, `imgquilt refresh`.
`imgquilt apply --reverse --root $SANDBOX/root` takes off what imgquilt applied there; then apply again.

# the way back: the file as the image has it, the queue taken off (journaled, as apply is), then on again
$ imgquilt restore home/app/config.toml --root $SANDBOX/root && imgquilt apply --reverse --root $SANDBOX/root && $SANDBOX/same $SANDBOX/image $SANDBOX/root
restored home/app/config.toml
Restored 1 file(s) in $SANDBOX/root as the image has them.
restored usr/bin/which
restored usr/lib/demo-tool/tool.py
removed usr/local/bin/demosvc-healthcheck
restored usr/local/lib/python3.11/site-packages/demosvc/__init__.py
restored usr/local/lib/python3.11/site-packages/demosvc/config.py
restored usr/local/lib/python3.11/site-packages/demosvc/moe.py
restored usr/local/lib/python3.11/site-packages/demosvc/server.py
Took the queue (series eec2fdd7548e) off $SANDBOX/root: 7 file(s) as the image has them, the apply record and the directories that apply made removed.
as the image has it

$ imgquilt apply --root $SANDBOX/root | tail -1
Wrote root: $SANDBOX/root (9 file(s) replaced)

# an older version of this queue runs in the root: its record says which, and what changed since; not a rebase
$ imgquilt push 3 > /dev/null && sed -i 's/^count = .*/count = 4/' .imgquilt/work/home/app/config.toml && imgquilt refresh && imgquilt pop -a > /dev/null && imgquilt apply --root $SANDBOX/root 2>&1 | tail -3
Refreshed patch 0003-app-config-longer-timeouts.patch.
Updated targets.lock (no image read).
  - 0006-moe-shared-expert.patch: usr/local/lib/python3.11/site-packages/demosvc/moe.py: base drifted: expected sha256 61104548299014a0583dc453919580459157c06269e7806fd3bc85ed9fe5ea06, found 97ee7d5fc73ac5457c1cfe1d4bf49ea5e789018b69a78d5a028622869638643c. It holds what the older version of this queue applied here left.
  - 0006-moe-shared-expert.patch: usr/local/lib/python3.11/site-packages/demosvc/__init__.py: base drifted: expected sha256 283b6214c227bac8f138eccbfd2200d71547374626133e8a33a14cc457fc17e5, found 849034123345711742c2ee806121f3bcd890a09b065a5157cf21a815a6d3c58e. It holds what the older version of this queue applied here left.
The root runs an older version of this queue: its record names series eec2fdd7548e (applied by imgquilt 0.1.0); since then: 0003-app-config-longer-timeouts.patch changed. Not a rebase: `imgquilt apply --reverse --root $SANDBOX/root` takes that version off (its bases from .imgquilt/objects, or --image REF), then `imgquilt apply --root $SANDBOX/root` puts this one on.

$ imgquilt apply --reverse --root $SANDBOX/root | tail -1 && imgquilt apply --root $SANDBOX/root | tail -1
Took the queue (series eec2fdd7548e) off $SANDBOX/root: 8 file(s) as the image has them, the apply record and the directories that apply made removed.
Wrote root: $SANDBOX/root (9 file(s) replaced)

# a file that already holds a later patch's result, with no record: applied by hand, or upstream has it
$ rm -rf $SANDBOX/root && cp -a $SANDBOX/image $SANDBOX/root && imgquilt apply --root $SANDBOX/root --no-python-check > /dev/null && rm -rf $SANDBOX/other && cp -a $SANDBOX/image $SANDBOX/other && cp $SANDBOX/root/usr/local/lib/python3.11/site-packages/demosvc/config.py $SANDBOX/other/usr/local/lib/python3.11/site-packages/demosvc/ && imgquilt apply --root $SANDBOX/other
imgquilt: Refused: 1 verification failure(s); nothing was written.
  - 0005-config-shared-expert-knob.patch: usr/local/lib/python3.11/site-packages/demosvc/config.py: base drifted: expected sha256 9137250847b6573670b95aedb2454ca431d572b4ccab0d51edd26eea023a17de, found a1d08306e888163a16e511b8b81afc644b05a7d4af971bf42b66f122440ed3f1. It already holds 0006-moe-shared-expert.patch's result: a later patch was applied here already.
No apply record says imgquilt put it there: a change applied by hand goes back with `imgquilt restore usr/local/lib/python3.11/site-packages/demosvc/config.py --root $SANDBOX/other`; a change upstream has made already is dropped by `imgquilt rebase --image REF` (it finds the patches already in the image).
[exit 3]

# the image changed under the queue (a new version, here a flat tar of it): rebase
$ cp -a $SANDBOX/image $SANDBOX/v2 && sed -i 's/keepalive_timeout_s = 5/keepalive_timeout_s = 6/' $SANDBOX/v2/home/app/config.toml && tar -C $SANDBOX/v2 -cf $SANDBOX/v2.tar . && imgquilt apply --image tar:$SANDBOX/v2.tar --layer $SANDBOX/fix.tar
imgquilt: Refused: 1 verification failure(s); nothing was written.
  - 0003-app-config-longer-timeouts.patch: home/app/config.toml: base drifted: expected sha256 3cd9af323a174433dfda7dd872d360421e60ba85ceb979d61e48a7a01d83b20f, found b182037090f767ddf2af4d638572234e89813116ff435ac907fac21f45b712a4.
The image changed under the queue: `imgquilt rebase --image REF` carries the patches onto it.
[exit 3]
