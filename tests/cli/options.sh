# The options every tool shares (tools/cli.h cli_getopt): -q/--quiet and -v/--verbose are
# accepted by all, with or without a command; an unknown option, long or short, is one line on
# stderr naming it, exit 2. Run by tests/run from the repo root.
set -u
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
bad=0
fail() { echo "FAIL: $*" >&2; bad=1; }

for tool in tokenize encode retrieve compose decode score cat eval; do
	case $tool in
	retrieve) cmd=query ;;
	eval) cmd=wikitext ;;
	*) cmd= ;;
	esac
	p=ss-$tool
	for o in --no-such-option -Z; do
		"$p" $cmd "$o" </dev/null >"$t/out" 2>"$t/err"
		rc=$?
		[ "$rc" -eq 2 ] || fail "$p $cmd $o: exit $rc, want 2"
		[ "$(wc -l <"$t/err")" -eq 1 ] || fail "$p $cmd $o: $(wc -l <"$t/err") lines on stderr, want 1"
		grep -q "^$p: unknown option '$o'" "$t/err" || fail "$p $cmd $o: stderr: $(cat "$t/err")"
	done
	# Accepted everywhere: whatever else the run says, not that the option is unknown.
	"$p" $cmd -q -v --quiet --verbose </dev/null >"$t/out" 2>"$t/err"
	grep -q "unknown option\|needs an argument" "$t/err" && fail "$p $cmd: -q/-v refused: $(cat "$t/err")"
	"$p" $cmd --quiet --verbose -q -v --help </dev/null >"$t/out" 2>"$t/err"
	rc=$?
	[ "$rc" -eq 0 ] && [ -s "$t/out" ] || fail "$p $cmd --quiet --verbose --help: exit $rc"
done
exit $bad
