# Issue 18, point 2: on a fresh clone (no .imgquilt/) with a hand-edited patch, every command names the way back.
$ sed -i 's/request_timeout_s = 120/request_timeout_s = 90/' patches/0003-app-config-longer-timeouts.patch && imgquilt check
imgquilt: The queue has 1 problem(s):
  - targets.lock is stale (0003-app-config-longer-timeouts.patch edited by hand since it was made); `imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch` re-pins a hand edit (and the patches after it) and writes the lock; or run `imgquilt lock`.
[exit 6]

$ imgquilt check --json 2> /dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["problems"][0][:60])'
targets.lock is stale (0003-app-config-longer-timeouts.patch

$ imgquilt lock
imgquilt: Refused: 1 verification failure(s); nothing was written.
  - 0003-app-config-longer-timeouts.patch: home/app/config.toml: the result is not the pinned one: expected sha256 71a5163fc52665d67c6379a4bc7677ee8f7fc4464a650f2f96322114c050d9c0, got 52114e557ae65b27aa44b18621ee552c98a91686ba192b78a36b4539a6c85798.
A patch whose body was edited by hand no longer gives its Patched-SHA256: `imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch` re-pins it (and re-chains the patches after it).
[exit 3]

$ imgquilt apply --layer $SANDBOX/fix.tar
imgquilt: targets.lock is stale (0003-app-config-longer-timeouts.patch edited by hand since it was made): it pins series sha256 eec2fdd7548e01e20ca66d31e1767c589e5267363abbedec5a5f1451e72d6de0, but the queue is now 2d8d6030818aa0e2d2fefa1f4ae3262cdb2f2e9bfcaffb2115ee1f0d701161a2.
`imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch` re-pins a hand edit (and the patches after it) and writes the lock; or run `imgquilt lock`.
[exit 6]

$ imgquilt push 3
Applied patch 0001-which-skip-empty-path-elements.patch.
Applied patch 0002-demo-tool-honour-no-color.patch.
imgquilt: Refused: cannot push 0003-app-config-longer-timeouts.patch; nothing was changed.
  - 0003-app-config-longer-timeouts.patch: home/app/config.toml: the result is not the pinned one: expected sha256 71a5163fc52665d67c6379a4bc7677ee8f7fc4464a650f2f96322114c050d9c0, got 52114e557ae65b27aa44b18621ee552c98a91686ba192b78a36b4539a6c85798.
If 0003-app-config-longer-timeouts.patch was edited by hand, `imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch` re-pins it (and re-chains the patches after it); then push again.
[exit 3]

# the one command, with 0001 and 0002 applied
$ imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch && imgquilt check && imgquilt push -a | tail -1
home/app/config.toml: Patched-SHA256 71a5163fc52665d67c6379a4bc7677ee8f7fc4464a650f2f96322114c050d9c0 -> 52114e557ae65b27aa44b18621ee552c98a91686ba192b78a36b4539a6c85798
Re-pinned patch 0003-app-config-longer-timeouts.patch.
Wrote $TMP/queue/targets.lock.
The queue is sound: 6 patch(es), chains and Requires in order.
Now at patch 0006-moe-shared-expert.patch
