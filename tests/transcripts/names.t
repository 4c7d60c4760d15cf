# Issue 29, point 6: one way to name a patch in every command (the argument, -P as its alias),
# `rename OLD NEW`, `rebase --status` with no rebase is a plain answer, and completion offers the
# global options after a command too.
$ imgquilt header -P 0001-which-skip-empty-path-elements.patch | head -1 && imgquilt files -P 0003-app-config-longer-timeouts.patch
Description: which: never search the current directory
home/app/config.toml

$ imgquilt push -P 0002-demo-tool-honour-no-color.patch | tail -1 && imgquilt diff 0001-which-skip-empty-path-elements.patch | head -1 && imgquilt diff -P 0002-demo-tool-honour-no-color.patch | head -1
Now at patch 0002-demo-tool-honour-no-color.patch
Index: bin/which
Index: etc/alternatives/demo-tool

$ imgquilt pop -P 0001-which-skip-empty-path-elements.patch | tail -1 && imgquilt refresh -P 0001-which-skip-empty-path-elements.patch
Now at patch 0001-which-skip-empty-path-elements.patch
Patch 0001-which-skip-empty-path-elements.patch is up to date.

$ imgquilt header 0001-which-skip-empty-path-elements.patch -P 0002-demo-tool-honour-no-color.patch
imgquilt: Two patches named: '0001-which-skip-empty-path-elements.patch' and -P '0002-demo-tool-honour-no-color.patch'.
Name the PATCH once (`-P` is the same argument).
[exit 2]

$ imgquilt rename 0003-app-config-longer-timeouts.patch 0003-app-timeouts.patch && imgquilt rename -P 0003-app-timeouts.patch 0003-app-config-timeouts.patch && grep 0003 series
Patch 0003-app-config-longer-timeouts.patch renamed to 0003-app-timeouts.patch.
Updated targets.lock (no image read).
Patch 0003-app-timeouts.patch renamed to 0003-app-config-timeouts.patch.
Updated targets.lock (no image read).
0003-app-config-timeouts.patch

# with one name, the top patch is renamed
$ imgquilt rename 0001-which-empty-elements.patch && imgquilt series | head -1
Patch 0001-which-skip-empty-path-elements.patch renamed to 0001-which-empty-elements.patch.
Updated targets.lock (no image read).
0001-which-empty-elements.patch

$ imgquilt rename a.patch b.patch c.patch
imgquilt: rename takes PATCH and NEW_NAME, not 3 names.
imgquilt rename OLD.patch NEW.patch
[exit 2]

$ imgquilt push -a > /dev/null && imgquilt pop -a > /dev/null && imgquilt delete -r -P 0006-moe-shared-expert.patch && imgquilt check
Removed patch 0006-moe-shared-expert.patch from series and deleted its file.
Updated targets.lock (no image read).
The queue is sound: 5 patch(es), chains and Requires in order.

$ imgquilt rebase --status && imgquilt --json rebase --status
No rebase in progress.
{
  "status": "none"
}

$ COMP_WORDS="imgquilt apply --js" COMP_CWORD=2 _IMGQUILT_COMPLETE=complete_bash imgquilt && COMP_WORDS="imgquilt refresh --q" COMP_CWORD=2 _IMGQUILT_COMPLETE=complete_bash imgquilt && COMP_WORDS="imgquilt push --d" COMP_CWORD=2 _IMGQUILT_COMPLETE=complete_bash imgquilt
--json
--queue
--quiet
--debug
