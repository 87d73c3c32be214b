# Sourced by the tests of python/ss_states.py (cli/python.sh, cli/python-hostile.sh,
# cli/python-fuzz.sh, cli/python-package.sh) after golden.sh: sets py, a python3 with Debian's
# python3-zstandard, python3-msgpack and python3-numpy (make deps), and PYTHONPATH to python/;
# exits 77 (skipped) without one. SS_PYTHON=PYTHON names the interpreter instead and leaves
# PYTHONPATH alone: that one imports ss_states itself (python-package.sh: the venv it installed
# the package into).
if [ -n "${SS_PYTHON:-}" ]; then
	py=$SS_PYTHON
else
	py=
	for p in python3 /usr/bin/python3; do
		if command -v "$p" >/dev/null && "$p" -c 'import zstandard, msgpack, numpy' 2>/dev/null; then py=$p; break; fi
	done
	[ -n "$py" ] || { echo "skipped: no python3 with zstandard, msgpack and numpy (make deps)"; exit 77; }
	export PYTHONPATH=$SS_TOP/python
fi
