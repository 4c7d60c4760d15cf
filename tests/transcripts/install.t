# Issue 18, point 4: `make demo` (examples/demo.sh) ends by saying where the imgquilt command is, and writes
# no escape codes into a pipe. (tests/house/test_install.py runs docs/install.md's commands from a clone.)
$ bash examples/demo.sh imgquilt $SANDBOX/out > $SANDBOX/demo.txt 2>&1 && tail -1 $SANDBOX/demo.txt && grep -c "$(printf '\033')" $SANDBOX/demo.txt
The imgquilt command: $TMP/bin/imgquilt
0
[exit 1]

$ bash examples/demo.sh $(command -v imgquilt) $SANDBOX/out2 2>&1 | tail -1
The imgquilt command: $TMP/bin/imgquilt (run it by that path, or put imgquilt on PATH as docs/install.md shows)

$ grep -h -o 'pipx install \.\|pip install \.\|git+https://HOST/OWNER/imgquilt@COMMIT\|rev: COMMIT' docs/install.md docs/integrations.md
pip install .
pip install .
pipx install .
git+https://HOST/OWNER/imgquilt@COMMIT
rev: COMMIT
