# tests/util/retrieve.sh — sourced by the ss-retrieve CLI tests (tests/cli/retrieve*.sh) and cli/hardening.sh (set -u):
# checks build/gen/mkdb ("ID<TAB>TEXT" lines -> token + state streams with small random states;
# $mkdb, absolute) and ss-retrieve on PATH (else exit 77), moves to a scratch directory ($T,
# removed at exit) and defines the checks: fail MSG; expect CODE CMD... (stdout to out, stderr
# to err); has FILE REGEX; and done_checks, the script's last line (exit 1 after any failure).
LC_ALL=C; export LC_ALL
: "${SS_BUILD:=build}"
mkdb=$SS_BUILD/gen/mkdb
[ -x "$mkdb" ] || { echo "no $mkdb (make first)"; exit 77; }
command -v ss-retrieve >/dev/null || { echo "ss-retrieve not on PATH"; exit 77; }
case $mkdb in /*) ;; *) mkdb="$(pwd)/$mkdb" ;; esac
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() {
	want=$1; shift
	"$@" >out 2>err
	got=$?
	[ "$got" -eq "$want" ] || { fail "exit $got, wanted $want: $*"; sed 's/^/    err: /' err | head -5; }
}
has() { grep -q -- "$2" "$1" || { fail "$1 lacks '$2'"; sed 's/^/    /' "$1" | head -5; }; }
done_checks() {
	[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
	echo ok
}
