# The files of a patch, and changes not refreshed yet: files, next/previous, diff -z, revert, remove.
$ imgquilt next
0001-which-skip-empty-path-elements.patch

$ imgquilt previous
imgquilt: No previous patch: fewer than two patches are applied.
[exit 2]

$ imgquilt files 0004-demosvc-healthcheck.patch
usr/local/lib/python3.11/site-packages/demosvc/server.py
usr/local/bin/demosvc-healthcheck

$ imgquilt push 3 > /dev/null

$ imgquilt previous
0002-demo-tool-honour-no-color.patch

$ imgquilt next
0004-demosvc-healthcheck.patch

$ imgquilt files
home/app/config.toml

# an edit not refreshed yet: diff -z shows only it; diff shows the whole patch as refresh would write it
$ sed -i 's/port = 8080/port = 9090/' .imgquilt/work/home/app/config.toml

$ imgquilt diff -z
Index: home/app/config.toml
Base-SHA256: 71a5163fc52665d67c6379a4bc7677ee8f7fc4464a650f2f96322114c050d9c0
Patched-SHA256: 9af9203dfc5c0ca2934f0f722444174f5ecad5ba91adcbd703ae6338617163f3
--- a/home/app/config.toml
+++ b/home/app/config.toml
@@ -1,7 +1,7 @@
 # demosvc settings for the `app` user (read at start-up, overriding /etc/demosvc).
 [server]
 host = "0.0.0.0"
-port = 8080
+port = 9090
 request_timeout_s = 120
 keepalive_timeout_s = 75
 

$ imgquilt diff | grep '^[-+][a-z]'
-port = 8080
-request_timeout_s = 30
-keepalive_timeout_s = 5
+port = 9090
+request_timeout_s = 120
+keepalive_timeout_s = 75

# revert discards it: the file is what the patch file says again
$ imgquilt revert home/app/config.toml
Changes to home/app/config.toml in patch 0003-app-config-longer-timeouts.patch reverted.

$ imgquilt diff -z

$ grep -c 'port = 8080' .imgquilt/work/home/app/config.toml
1

$ imgquilt revert home/app/config.toml
File home/app/config.toml in patch 0003-app-config-longer-timeouts.patch has no changes to revert.

$ imgquilt revert etc/hostname
imgquilt: Patch 0003-app-config-longer-timeouts.patch does not track etc/hostname.
`imgquilt files 0003-app-config-longer-timeouts.patch` lists what it tracks.
[exit 2]

# remove: the file leaves the top patch (its section too); no applied patch tracks it now, so its work copy goes
$ imgquilt remove home/app/config.toml
File home/app/config.toml removed from patch 0003-app-config-longer-timeouts.patch (its section left the patch file).
Updated targets.lock (no image read).

$ imgquilt files

$ test -e .imgquilt/work/home/app/config.toml || echo gone
gone

$ grep -c 'home/app/config.toml' patches/0003-app-config-longer-timeouts.patch
0
[exit 1]

$ imgquilt refresh
Nothing changed in patch 0003-app-config-longer-timeouts.patch.

$ imgquilt remove home/app/config.toml
imgquilt: Patch 0003-app-config-longer-timeouts.patch does not track home/app/config.toml.
`imgquilt files 0003-app-config-longer-timeouts.patch` lists what it tracks.
[exit 2]
