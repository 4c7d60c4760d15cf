# The quilt workflow on the demo image: push, new, add, edit, refresh, pop.
$ imgquilt push
Applying patch 0001-which-skip-empty-path-elements.patch
  patched bin/which
Now at patch 0001-which-skip-empty-path-elements.patch

$ imgquilt push 2
Applying patch 0002-demo-tool-honour-no-color.patch
  patched etc/alternatives/demo-tool
Applying patch 0003-app-config-longer-timeouts.patch
  patched home/app/config.toml
Now at patch 0003-app-config-longer-timeouts.patch

$ imgquilt top
0003-app-config-longer-timeouts.patch

$ imgquilt series -v
+ 0001-which-skip-empty-path-elements.patch
+ 0002-demo-tool-honour-no-color.patch
= 0003-app-config-longer-timeouts.patch
  0004-demosvc-healthcheck.patch
  0005-config-shared-expert-knob.patch
  0006-moe-shared-expert.patch

$ imgquilt pop
Removing patch 0003-app-config-longer-timeouts.patch
Now at patch 0002-demo-tool-honour-no-color.patch

$ imgquilt push -a
Applying patch 0003-app-config-longer-timeouts.patch
  patched home/app/config.toml
Applying patch 0004-demosvc-healthcheck.patch
  patched usr/local/lib/python3.11/site-packages/demosvc/server.py
  patched usr/local/bin/demosvc-healthcheck
Applying patch 0005-config-shared-expert-knob.patch
  patched usr/local/lib/python3.11/site-packages/demosvc/config.py
Applying patch 0006-moe-shared-expert.patch
  patched usr/local/lib/python3.11/site-packages/demosvc/config.py
  patched usr/local/lib/python3.11/site-packages/demosvc/moe.py
  patched usr/local/lib/python3.11/site-packages/demosvc/__init__.py
Now at patch 0006-moe-shared-expert.patch

# a new patch on top of them all, named from its description
$ imgquilt new 0007-app-more-workers.patch -d "app: four workers"
Patch 0007-app-more-workers.patch is now on top (patches/0007-app-more-workers.patch).
Next: `imgquilt add PATH` (or `edit PATH`), change the files under .imgquilt/work/, then `imgquilt refresh`.
Updated targets.lock (no image read).

$ imgquilt add home/app/config.toml
File home/app/config.toml added to patch 0007-app-more-workers.patch ($TMP/queue/.imgquilt/work/home/app/config.toml).

$ imgquilt add home/app/config.toml
File home/app/config.toml is already in patch 0007-app-more-workers.patch.

$ sed -i 's/^count = .*/count = 4/' .imgquilt/work/home/app/config.toml && imgquilt diff
Index: home/app/config.toml
Base-SHA256: 71a5163fc52665d67c6379a4bc7677ee8f7fc4464a650f2f96322114c050d9c0
Patched-SHA256: a9db0f98597ff403dff90d970e7c2b1e699111beece24f6509255de81bf7d5c1
--- a/home/app/config.toml
+++ b/home/app/config.toml
@@ -6,7 +6,7 @@
 keepalive_timeout_s = 75
 
 [workers]
-count = 2
+count = 4
 max_batch_tokens = 8192
 
 [logging]

$ imgquilt refresh
Refreshed patch 0007-app-more-workers.patch.
Updated targets.lock (no image read).

$ imgquilt refresh
Patch 0007-app-more-workers.patch is up to date.

$ cat patches/0007-app-more-workers.patch
Description: app: four workers

Index: home/app/config.toml
Base-SHA256: 71a5163fc52665d67c6379a4bc7677ee8f7fc4464a650f2f96322114c050d9c0
Patched-SHA256: a9db0f98597ff403dff90d970e7c2b1e699111beece24f6509255de81bf7d5c1
--- a/home/app/config.toml
+++ b/home/app/config.toml
@@ -6,7 +6,7 @@
 keepalive_timeout_s = 75
 
 [workers]
-count = 2
+count = 4
 max_batch_tokens = 8192
 
 [logging]

$ tail -1 series
0007-app-more-workers.patch

# pop refuses work not refreshed
$ sed -i 's/^count = 4/count = 5/' .imgquilt/work/home/app/config.toml && imgquilt pop
imgquilt: Refused: 0007-app-more-workers.patch has changes not refreshed into it: home/app/config.toml. Nothing was changed.
`imgquilt refresh` to keep them, or `imgquilt pop -f` to discard them.
[exit 3]

$ imgquilt pop -f
Removing patch 0007-app-more-workers.patch
Now at patch 0006-moe-shared-expert.patch

$ imgquilt pop -a
Removing patch 0006-moe-shared-expert.patch
Removing patch 0005-config-shared-expert-knob.patch
Removing patch 0004-demosvc-healthcheck.patch
Removing patch 0003-app-config-longer-timeouts.patch
Removing patch 0002-demo-tool-honour-no-color.patch
Removing patch 0001-which-skip-empty-path-elements.patch
No patches applied

$ imgquilt top
imgquilt: No patches applied.
[exit 2]

# every command that changed the queue kept targets.lock in step: no `imgquilt lock` needed
$ imgquilt check
The queue is sound: 7 patch(es), chains and Requires in order.
