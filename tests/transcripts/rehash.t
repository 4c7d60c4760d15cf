# Issue 18, point 1: one way back from a hand edit, seen from a fresh clone (no .imgquilt/).
# First a third patch on demosvc/config.py after 0005 and 0006, made with the quilt workflow, and locked:
$ imgquilt push -a > /dev/null && imgquilt new 0007-config-two-workers.patch -d "config: two workers" > /dev/null && imgquilt add usr/local/lib/python3.11/site-packages/demosvc/config.py > /dev/null && sed -i 's/^    workers: int = 1$/    workers: int = 2/' .imgquilt/work/usr/local/lib/python3.11/site-packages/demosvc/config.py && imgquilt refresh && imgquilt pop -a > /dev/null && imgquilt lock
Refreshed patch 0007-config-two-workers.patch.
Updated targets.lock (no image read).
Pinned 8 target(s) of 7 patch(es) to oci:examples/demo-image:latest (sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8).
Wrote $TMP/queue/targets.lock.

# from here on, a fresh clone: no .imgquilt/
$ rm -rf .imgquilt && imgquilt check
The queue is sound: 7 patch(es), chains and Requires in order.

# the hand edit: the first patch of the chain also takes "y" for yes
$ sed -i 's/("1", "true", "yes", "on")/("1", "true", "yes", "y", "on")/' patches/0005-config-shared-expert-knob.patch && imgquilt check
imgquilt: The queue has 1 problem(s):
  - targets.lock is stale (0005-config-shared-expert-knob.patch edited by hand since it was made); `imgquilt refresh --rehash 0005-config-shared-expert-knob.patch` re-pins a hand edit (and the patches after it) and writes the lock; or run `imgquilt lock`.
[exit 6]

$ imgquilt apply
imgquilt: targets.lock is stale (0005-config-shared-expert-knob.patch edited by hand since it was made): it pins series sha256 4242185631680cdd5963e9b991e07b1511a62a41b27d4215ac8b21904f774fc3, but the queue is now 8ec51e501bb888ba331206962ef0838c024cfb5c4c596c9459c9fd500aa64cf2.
`imgquilt refresh --rehash 0005-config-shared-expert-knob.patch` re-pins a hand edit (and the patches after it) and writes the lock; or run `imgquilt lock`.
[exit 6]

# the one command: re-pin 0005, re-chain 0006 and 0007, write the lock (bases from the image the lock pins)
$ imgquilt refresh --rehash 0005-config-shared-expert-knob.patch
usr/local/lib/python3.11/site-packages/demosvc/config.py: Patched-SHA256 823d890df854851e9e53ced334bbad5f1071c5f676607586c0649b60ae5a2740 -> c3aac81435c79e5b13fada58877672d1cde2267ae2b5f0f89840989e7475e81c
Re-pinned patch 0005-config-shared-expert-knob.patch.
Re-chained 0006-moe-shared-expert.patch: usr/local/lib/python3.11/site-packages/demosvc/config.py: Base-SHA256 823d890df854851e9e53ced334bbad5f1071c5f676607586c0649b60ae5a2740 -> c3aac81435c79e5b13fada58877672d1cde2267ae2b5f0f89840989e7475e81c, Patched-SHA256 a1d08306e888163a16e511b8b81afc644b05a7d4af971bf42b66f122440ed3f1 -> 1e6ce342768bc1299d225178bec448a471ece1cee47f8fea8f59449f2af41d14
Re-chained 0007-config-two-workers.patch: usr/local/lib/python3.11/site-packages/demosvc/config.py: Base-SHA256 a1d08306e888163a16e511b8b81afc644b05a7d4af971bf42b66f122440ed3f1 -> 1e6ce342768bc1299d225178bec448a471ece1cee47f8fea8f59449f2af41d14, Patched-SHA256 557870ccc75ff0dd1a504fe410bcb06056e9dc1eab9dd36a48721c795fe63d2c -> eb38a829fe90d1e98c2899b57ebf3685a1db97de3d9956322b6276931c5ce6e7
Wrote $TMP/queue/targets.lock.

$ grep -A2 '^Index: usr/local/lib/python3.11/site-packages/demosvc/config.py' patches/0006-moe-shared-expert.patch patches/0007-config-two-workers.patch
patches/0006-moe-shared-expert.patch:Index: usr/local/lib/python3.11/site-packages/demosvc/config.py
patches/0006-moe-shared-expert.patch-Base-SHA256: c3aac81435c79e5b13fada58877672d1cde2267ae2b5f0f89840989e7475e81c
patches/0006-moe-shared-expert.patch-Patched-SHA256: 1e6ce342768bc1299d225178bec448a471ece1cee47f8fea8f59449f2af41d14
--
patches/0007-config-two-workers.patch:Index: usr/local/lib/python3.11/site-packages/demosvc/config.py
patches/0007-config-two-workers.patch-Base-SHA256: 1e6ce342768bc1299d225178bec448a471ece1cee47f8fea8f59449f2af41d14
patches/0007-config-two-workers.patch-Patched-SHA256: eb38a829fe90d1e98c2899b57ebf3685a1db97de3d9956322b6276931c5ce6e7

$ imgquilt check
The queue is sound: 7 patch(es), chains and Requires in order.

$ python3 examples/build_demo.py --rootfs $SANDBOX/root > /dev/null && imgquilt apply --root $SANDBOX/root
ok  0001-which-skip-empty-path-elements.patch  (1 file)
ok  0002-demo-tool-honour-no-color.patch  (1 file)
ok  0003-app-config-longer-timeouts.patch  (1 file)
ok  0004-demosvc-healthcheck.patch  (2 files)
ok  0005-config-shared-expert-knob.patch  (1 file)
ok  0006-moe-shared-expert.patch  (3 files)
ok  0007-config-two-workers.patch  (1 file)
Verified 7 patch(es) on rootfs:$SANDBOX/root (pinned by targets.lock).
Wrote root: $SANDBOX/root (9 file(s) replaced)

$ imgquilt audit --root $SANDBOX/root
Audit of rootfs:$SANDBOX/root
patch	state	files	first divergent file
0001-which-skip-empty-path-elements.patch	live	1	
0002-demo-tool-honour-no-color.patch	live	1	
0003-app-config-longer-timeouts.patch	live	1	
0004-demosvc-healthcheck.patch	live	2	
0005-config-shared-expert-knob.patch	live	1	
0006-moe-shared-expert.patch	live	3	
0007-config-two-workers.patch	live	1	
Apply record var/lib/imgquilt/applied.json by imgquilt 0.1.0: 7 patch(es) recorded as applied, from the image (sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8).
  The record agrees with the bytes.
7 patch(es): 7 live.

$ grep -c '"yes", "y", "on"' $SANDBOX/root/usr/local/lib/python3.11/site-packages/demosvc/config.py
1

# the same with 0005 applied: a line added to its second hunk (its @@ counts are now wrong)
$ imgquilt push 0005-config-shared-expert-knob.patch > /dev/null && sed -i 's/^+        if kind is bool:$/+        # the usual spellings of true\n&/' patches/0005-config-shared-expert-knob.patch && imgquilt check
imgquilt: The queue has 2 problem(s):
  - Malformed patch 0005-config-shared-expert-knob.patch: section 'usr/local/lib/python3.11/site-packages/demosvc/config.py': the hunk at line 11 has more lines than its @@ header says. A hand edit changed a hunk's line count: `imgquilt refresh --rehash 0005-config-shared-expert-knob.patch` recounts its @@ headers and re-pins it.
  - targets.lock is stale (0005-config-shared-expert-knob.patch edited by hand since it was made: its body no longer gives its Patched-SHA256); `imgquilt refresh --rehash 0005-config-shared-expert-knob.patch` re-pins a hand edit (and the patches after it) and writes the lock.
[exit 6]

$ imgquilt refresh --rehash 0005-config-shared-expert-knob.patch
note: 0005-config-shared-expert-knob.patch: hunk headers recounted to match the lines under them.
usr/local/lib/python3.11/site-packages/demosvc/config.py: Patched-SHA256 c3aac81435c79e5b13fada58877672d1cde2267ae2b5f0f89840989e7475e81c -> a6a82c41544472fbb42ff52c58349dfc2aae419a38e59cc0dece49567fc5f176
Re-pinned patch 0005-config-shared-expert-knob.patch.
Re-chained 0006-moe-shared-expert.patch: usr/local/lib/python3.11/site-packages/demosvc/config.py: Base-SHA256 c3aac81435c79e5b13fada58877672d1cde2267ae2b5f0f89840989e7475e81c -> a6a82c41544472fbb42ff52c58349dfc2aae419a38e59cc0dece49567fc5f176, Patched-SHA256 1e6ce342768bc1299d225178bec448a471ece1cee47f8fea8f59449f2af41d14 -> 11111296395435ef406768e5b7a66989a22af49a38905b9683b3c96a798e4ead
Re-chained 0007-config-two-workers.patch: usr/local/lib/python3.11/site-packages/demosvc/config.py: Base-SHA256 1e6ce342768bc1299d225178bec448a471ece1cee47f8fea8f59449f2af41d14 -> 11111296395435ef406768e5b7a66989a22af49a38905b9683b3c96a798e4ead, Patched-SHA256 eb38a829fe90d1e98c2899b57ebf3685a1db97de3d9956322b6276931c5ce6e7 -> bb218bbed1f832f326a562fd26b1c27babb662672b8cd585b4d04d7edde6b96a
Wrote $TMP/queue/targets.lock.

# the work tree follows: 0005 is still the top, and its file holds the new line
$ imgquilt top && grep -n 'the usual spellings of true' .imgquilt/work/usr/local/lib/python3.11/site-packages/demosvc/config.py
0005-config-shared-expert-knob.patch
53:        # the usual spellings of true

$ imgquilt push -a > /dev/null && imgquilt check && imgquilt pop -a > /dev/null
The queue is sound: 7 patch(es), chains and Requires in order.

$ rm -rf $SANDBOX/root && python3 examples/build_demo.py --rootfs $SANDBOX/root > /dev/null && imgquilt apply --root $SANDBOX/root | tail -1 && imgquilt audit --root $SANDBOX/root | tail -1
Wrote root: $SANDBOX/root (9 file(s) replaced)
7 patch(es): 7 live.
