# Sourced by the tests of python/ss_states.py (cli/python.sh, cli/python-hostile.sh,
# cli/python-fuzz.sh) after golden.sh: sets py, a python3 with Debian's python3-zstandard,
# python3-msgpack and python3-numpy (make deps), and PYTHONPATH; exits 77 (skipped) without one.
py=
for p in python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null && "$p" -c 'import zstandard, msgpack, numpy' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "skipped: no python3 with zstandard, msgpack and numpy (make deps)"; exit 77; }
export PYTHONPATH=$SS_TOP/python
