# Issue 18, point 1: a later hunk that no longer fits stops the one command cleanly, nothing half-written.
$ sha256sum series targets.lock patches/0001* patches/0002* patches/0003* patches/0004* patches/0006* > $SANDBOX/before

# a hand edit of 0005 that changes a line 0006's hunk has as context
$ sed -i 's/^+    shared_expert: bool = False$/+    shared_expert: bool = True/' patches/0005-config-shared-expert-knob.patch && sha256sum patches/0005-config-shared-expert-knob.patch > $SANDBOX/edited

$ imgquilt refresh --rehash 0005-config-shared-expert-knob.patch
imgquilt: Refused: 0006-moe-shared-expert.patch: usr/local/lib/python3.11/site-packages/demosvc/config.py: hunk 1 (@@ -22,6 @@) no longer fits: its context and removed lines are found nowhere in the file, on what 0005-config-shared-expert-knob.patch now leaves; nothing was written.
Edit that part of patches/0006-moe-shared-expert.patch by hand to fit, then run `imgquilt refresh --rehash 0005-config-shared-expert-knob.patch` again (it re-chains 0006-moe-shared-expert.patch too); or push up to 0005-config-shared-expert-knob.patch and re-create 0006-moe-shared-expert.patch's change with `imgquilt refresh`.
[exit 3]

# series, the lock and the other patches are as they were, and 0005 is as the hand edit left it
$ sha256sum series targets.lock patches/0001* patches/0002* patches/0003* patches/0004* patches/0006* | diff - $SANDBOX/before && sha256sum patches/0005-config-shared-expert-knob.patch | diff - $SANDBOX/edited

# point 1 too: a refused rebase leaves no rebase behind (here a chain broken by a hand-edited hash line)
$ sed -i 's/^+    shared_expert: bool = True$/+    shared_expert: bool = False/; s/("1", "true", "yes", "on")/("1", "true", "yes", "y", "on")/' patches/0005-config-shared-expert-knob.patch && imgquilt refresh --rehash 0005-config-shared-expert-knob.patch > /dev/null && sed -i '0,/^Base-SHA256: .*/s//Base-SHA256: 823d890df854851e9e53ced334bbad5f1071c5f676607586c0649b60ae5a2740/' patches/0006-moe-shared-expert.patch

$ imgquilt rebase --image oci:examples/demo-image:latest
imgquilt: Rebase needs a sound queue; no rebase was started:
  - 0006-moe-shared-expert.patch: usr/local/lib/python3.11/site-packages/demosvc/config.py: Base-SHA256 823d890df854851e9e53ced334bbad5f1071c5f676607586c0649b60ae5a2740 does not continue the chain: 0005-config-shared-expert-knob.patch leaves it at c3aac81435c79e5b13fada58877672d1cde2267ae2b5f0f89840989e7475e81c; `imgquilt refresh --rehash 0006-moe-shared-expert.patch` re-chains it onto 0005-config-shared-expert-knob.patch's result.
Fix what is named above (`imgquilt check` lists every problem), then rebase again.
[exit 6]

$ ls .imgquilt && imgquilt push
objects
state
Applying patch 0001-which-skip-empty-path-elements.patch
  patched bin/which
Now at patch 0001-which-skip-empty-path-elements.patch

$ imgquilt refresh --rehash 0006-moe-shared-expert.patch && imgquilt check
Re-chained 0006-moe-shared-expert.patch: usr/local/lib/python3.11/site-packages/demosvc/config.py: Base-SHA256 823d890df854851e9e53ced334bbad5f1071c5f676607586c0649b60ae5a2740 -> c3aac81435c79e5b13fada58877672d1cde2267ae2b5f0f89840989e7475e81c, Patched-SHA256 unchanged
The queue is sound: 6 patch(es), chains and Requires in order.
