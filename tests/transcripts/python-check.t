# Issue 18, point 8: refresh runs the Python check; findings carry path:line:col; lock takes --no-python-check.
$ imgquilt push -a > /dev/null && imgquilt new 0007-typo.patch > /dev/null && imgquilt add usr/local/lib/python3.11/site-packages/demosvc/moe.py > /dev/null && sed -i 's/^            total = sum(w for _, w in chosen) or 1.0$/            total = sum(w for _, w in chosn) or 1.0/' .imgquilt/work/usr/local/lib/python3.11/site-packages/demosvc/moe.py && imgquilt refresh
imgquilt: Refused: 0007-typo.patch: the patch adds Python errors: usr/local/lib/python3.11/site-packages/demosvc/moe.py:49:39: UndefinedName: undefined name 'chosn'. Nothing was written.
Fix the file under .imgquilt/work/ and `imgquilt refresh` again, or keep it as it is with `imgquilt refresh --no-python-check`.
[exit 3]

$ imgquilt refresh --no-python-check && imgquilt pop -a > /dev/null
Refreshed patch 0007-typo.patch.
targets.lock is stale now: the series no longer verifies on the pinned image (0007-typo.patch: the patch adds Python errors: usr/local/lib/python3.11/site-packages/demosvc/moe.py:49:39: UndefinedName: undefined name 'chosn'); fix the patch so the file compiles, its names resolve, and its imports and calls fit the image's modules.

$ imgquilt lock
imgquilt: Refused: 1 verification failure(s); nothing was written.
  - 0007-typo.patch: the patch adds Python errors: usr/local/lib/python3.11/site-packages/demosvc/moe.py:49:39: UndefinedName: undefined name 'chosn'.
Fix the patch so the file compiles, its names resolve, and its imports and calls fit the image's modules.
Or skip the Python check with `imgquilt lock --no-python-check`.
[exit 3]

$ imgquilt lock --no-python-check
Pinned 8 target(s) of 7 patch(es) to oci:examples/demo-image:latest (sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8).
Wrote $TMP/queue/targets.lock.

# apply still checks; the JSON problems carry the place too
$ imgquilt --json apply 2> /dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["error"]["problems"])'
["0007-typo.patch: the patch adds Python errors: usr/local/lib/python3.11/site-packages/demosvc/moe.py:49:39: UndefinedName: undefined name 'chosn'."]

# a syntax error, with its place
$ imgquilt push -a > /dev/null && sed -i 's/^def /def (/' .imgquilt/work/usr/local/lib/python3.11/site-packages/demosvc/moe.py && imgquilt refresh
imgquilt: Refused: 0007-typo.patch: the patch adds Python errors: usr/local/lib/python3.11/site-packages/demosvc/moe.py:8:5: SyntaxError: invalid syntax. Nothing was written.
Fix the file under .imgquilt/work/ and `imgquilt refresh` again, or keep it as it is with `imgquilt refresh --no-python-check`.
[exit 3]
