# Sourced by the CLI scripts that check tools against the golden fixtures
# (encode.sh, decode.sh, score.sh, device.sh, shared.sh), after `set -eu` and,
# for shared.sh, with G set to $SS_SHARED/golden. Gives:
#   G, T1   the golden root (default $SS_FIXTURES/golden) and its t1 HF model
#   PY      tests/cli/golden.py, reading the fixtures' raw arrays
#   d       a scratch directory, removed at exit
#   fail MSG                 "FAIL: MSG" on stderr, exit 1
#   expect CODE PATTERN CMD  runs CMD (stdout to $d/out, stderr to $d/err) and
#                            fails unless it exits CODE with PATTERN on stderr,
#                            and, for CODE 1, with one line of stderr
: "${G:=$SS_FIXTURES/golden}"
T1=$G/models/t1-hf
PY="python3 $SS_TOP/tests/cli/golden.py"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {
	code=$1 pat=$2; shift 2
	set +e; "$@" >"$d/out" 2>"$d/err"; rc=$?; set -e
	[ "$rc" -eq "$code" ] || { cat "$d/err" >&2; fail "$*: exit $rc, expected $code"; }
	grep -q -- "$pat" "$d/err" || { cat "$d/err" >&2; fail "$*: stderr lacks '$pat'"; }
	if [ "$code" -eq 1 ]; then [ "$(wc -l <"$d/err")" -eq 1 ] || { cat "$d/err" >&2; fail "$*: not one line"; }; fi
}
