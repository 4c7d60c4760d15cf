# check finds every problem at once; --format github turns them into annotations.
$ imgquilt check
The queue is sound: 6 patch(es), chains and Requires in order.

$ imgquilt check --format github
The queue is sound: 6 patch(es), chains and Requires in order.

$ echo 0009-missing.patch >> series && imgquilt check
imgquilt: The queue has 1 problem(s):
  - series line 7 lists '0009-missing.patch', but patches/0009-missing.patch does not exist.
[exit 6]

$ imgquilt check --format github
::error file=series,title=imgquilt check::series line 7 lists '0009-missing.patch', but patches/0009-missing.patch does not exist.
imgquilt: The queue has 1 problem(s):
  - series line 7 lists '0009-missing.patch', but patches/0009-missing.patch does not exist.
[exit 6]

$ imgquilt check --json
{
  "ok": false,
  "problems": [
    "series line 7 lists '0009-missing.patch', but patches/0009-missing.patch does not exist."
  ],
  "patches": [
    "0001-which-skip-empty-path-elements.patch",
    "0002-demo-tool-honour-no-color.patch",
    "0003-app-config-longer-timeouts.patch",
    "0004-demosvc-healthcheck.patch",
    "0005-config-shared-expert-knob.patch",
    "0006-moe-shared-expert.patch"
  ],
  "error": {
    "code": 6,
    "kind": "queue-problems",
    "message": "The queue has 1 problem(s):\n  - series line 7 lists '0009-missing.patch', but patches/0009-missing.patch does not exist.",
    "hint": null,
    "problems": [
      "series line 7 lists '0009-missing.patch', but patches/0009-missing.patch does not exist."
    ]
  }
}
imgquilt: The queue has 1 problem(s):
  - series line 7 lists '0009-missing.patch', but patches/0009-missing.patch does not exist.
[exit 6]

$ imgquilt lock
imgquilt: series line 7 lists '0009-missing.patch', but $TMP/queue/patches/0009-missing.patch does not exist.
Restore the patch file or remove it from series (`imgquilt check` lists every problem).
[exit 6]
