# The options every tool shares (tools/cli.h cli_getopt): -q/--quiet and -v/--verbose are
# accepted by all, with or without a command; an unknown option, long or short, is one line on
# stderr naming it, exit 2. Run by tests/run from the repo root.
set -u
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
bad=0
fail() { echo "FAIL: $*" >&2; bad=1; }

for tool in tokenize encode retrieve compose decode score cat eval train; do
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

# The model options (cli_model_opts): the model-running tools take them with one meaning and
# one help text, and refuse a bad value with the same usage error.
ref=
for tool in encode decode score eval; do
	p=ss-$tool
	cmd=; [ $tool = eval ] && cmd=timing; [ $tool = decode ] && cmd="--prompt x"
	# Each model option's entry: its line and the continuation lines below it.
	"$p" --help | awk '/^  -/ { on = /^  --(model|tokenizer|device|threads|weights-dtype) / }
		on && /^   / || on && /^  -/' | sed 's/  */ /g' >"$t/help-$tool"
	[ "$(grep -c -- '--model DIR\|--tokenizer FILE\|--device D\|--threads N\|--weights-dtype T' "$t/help-$tool")" -eq 5 ] ||
		fail "$p --help: not the five model options: $(cat "$t/help-$tool")"
	if [ -z "$ref" ]; then ref=$tool
	else cmp -s "$t/help-$ref" "$t/help-$tool" || fail "$p --help: the model options read otherwise than ss-$ref's"
	fi
	"$p" $cmd --threads 0 </dev/null >"$t/out" 2>"$t/err"
	rc=$?
	[ "$rc" -eq 2 ] && grep -q "^$p: --threads: '0' is not an integer in \[1, 256\]" "$t/err" ||
		fail "$p --threads 0: exit $rc, $(head -1 "$t/err")"
	"$p" $cmd --weights-dtype q3 --model "$SS_FIXTURES/t1" </dev/null >"$t/out" 2>"$t/err"
	rc=$?
	[ "$rc" -eq 2 ] && grep -q "^$p: .*--weights-dtype" "$t/err" ||
		fail "$p --weights-dtype q3: exit $rc, $(head -1 "$t/err")"
	"$p" $cmd --device tpu </dev/null >"$t/out" 2>"$t/err"
	rc=$?
	[ "$rc" -eq 2 ] && grep -q "^$p: .*--device" "$t/err" || fail "$p --device tpu: exit $rc, $(head -1 "$t/err")"
done
exit $bad
