# python/ as a package (issue 52 #1): a venv made with --system-site-packages from the python3
# that has Debian's python3-zstandard, python3-msgpack and python3-numpy (tests/util/pyreader.sh;
# they serve the dependencies offline) installs ./python with pip --no-index
# --no-build-isolation (Debian's python3-setuptools and python3-wheel build it). Then, from
# another directory and without PYTHONPATH, `import ss_states` finds the installed module; its
# version and the distribution's equal SS_VERSION in lib/ss.h; the distribution declares
# zstandard, msgpack and numpy; `python -m ss_states` and python/ss_states.py as a script print
# the same lines; and tests/cli/python.sh passes with the venv's python. pip builds in the
# directory it is given (build/, *.egg-info), so it gets a copy of python/ and the source tree is
# left as it was. Skipped without venv (python3-venv), pip in the venv, or setuptools >= 61 and
# wheel (make deps installs them all).
set -eu
. "$SS_TOP/tests/util/golden.sh"
. "$SS_TOP/tests/util/pyreader.sh"
unset PYTHONPATH SS_PYTHON
skip() { echo "skipped: $*"; exit 77; }
py=$(command -v "$py")
echo "python-package: $py: $("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])')"

"$py" -m venv --system-site-packages "$d/venv" >"$d/log" 2>&1 ||
	{ cat "$d/log"; skip "$py -m venv failed (Debian: python3-venv; make deps)"; }
vpy=$d/venv/bin/python
"$vpy" -m pip --version >/dev/null 2>&1 || skip "no pip in a venv of $py (Debian: python3-venv)"
"$vpy" -c 'import sys, setuptools, wheel; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' 2>/dev/null ||
	skip "no setuptools >= 61 (PEP 621) and wheel for $py (Debian: python3-setuptools python3-wheel; make deps)"

before=$(cd "$SS_TOP/python" && find . | LC_ALL=C sort)
mkdir "$d/src" "$d/elsewhere"
(cd "$SS_TOP/python" && tar --exclude=./build --exclude=./dist --exclude='*.egg-info' --exclude=__pycache__ -cf - .) |
	(cd "$d/src" && tar -xf -)
cd "$d/elsewhere"
# --isolated: no pip configuration or PIP_* variable (a PIP_FIND_LINKS, a cache) takes part.
"$vpy" -m pip install --isolated --no-index --no-build-isolation --no-cache-dir "$d/src" >"$d/pip.log" 2>&1 ||
	{ cat "$d/pip.log" >&2; fail "pip install of python/ into a venv"; }
want=$(sed -n 's/^#define SS_VERSION "\(.*\)"$/\1/p' "$SS_TOP/lib/ss.h")
[ -n "$want" ] || fail "no SS_VERSION in lib/ss.h"

"$vpy" - "$want" "$d/venv" <<'PY' || fail "the installed package"
import importlib.metadata as md, os, re, sys
import ss_states
want, venv = sys.argv[1], os.path.realpath(sys.argv[2])
def check(cond, what):
    if not cond:
        print("FAIL: " + what, file=sys.stderr); sys.exit(1)
where = os.path.realpath(ss_states.__file__)
check(where.startswith(venv + os.sep), "ss_states imported from %s, not the venv" % where)
check(ss_states.__version__ == want, "ss_states.__version__ %s, SS_VERSION %s" % (ss_states.__version__, want))
check(md.version("ss-states") == want, "distribution version %s, SS_VERSION %s" % (md.version("ss-states"), want))
deps = sorted(re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in md.requires("ss-states"))
check(deps == ["msgpack", "numpy", "zstandard"], "declared dependencies %s" % deps)
PY
f=$SS_TOP/formats/golden/t1-c2.states
"$vpy" -m ss_states "$f" "$SS_TOP/formats/golden/t1-c2.tokens" >"$d/module.out" || fail "python -m ss_states"
"$py" "$SS_TOP/python/ss_states.py" "$f" "$SS_TOP/formats/golden/t1-c2.tokens" >"$d/script.out" || fail "python/ss_states.py as a script"
[ "$(wc -l <"$d/module.out")" -ge 2 ] && cmp -s "$d/module.out" "$d/script.out" ||
	{ diff "$d/module.out" "$d/script.out" >&2; fail "python -m ss_states and python/ss_states.py differ"; }
SS_PYTHON=$vpy sh "$SS_TOP/tests/cli/python.sh" || fail "tests/cli/python.sh with the venv's python"

[ "$(cd "$SS_TOP/python" && find . | LC_ALL=C sort)" = "$before" ] || fail "files left in python/"
