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

# The common options (the table in tools/cli.c): wherever a tool takes one, its help entry (the
# names, the argument, the text and its continuation lines) reads the same as in every other
# tool, and the short and the long spelling are both accepted.
entries() { # the common options' help entries of "$@" --help, one line each: key TAB text
	"$@" --help | awk '
		!/^  -/ && !/^     / { key = "" }
		/^  -/ { key = ""; if (match($0, /--(output|quiet|verbose|help|version|model|tokenizer|device|threads|weights-dtype)( |$)/)) {
			key = substr($0, RSTART + 2, RLENGTH - 2); sub(/ $/, "", key) } }
		key != "" && (/^  -/ || /^     /) { t = $0; gsub(/  +/, " ", t); e[key] = e[key] t }
		END { for (k in e) print k "\t" e[k] }' | sed 's/--output DIR/--output FILE/' | sort
}
for tool in tokenize encode retrieve compose decode score cat eval train; do
	p=ss-$tool
	cmd=; [ $tool = retrieve ] && cmd=query; [ $tool = eval ] && cmd=timing
	entries "$p" $cmd >"$t/entries-$tool"
	want="help output quiet verbose version"
	case $tool in
	tokenize) want="$want tokenizer" ;;
	compose) want="$want threads" ;;
	encode | retrieve | decode | score | eval | train) want="$want device model threads tokenizer weights-dtype" ;;
	esac
	have=$(cut -f 1 "$t/entries-$tool" | sort | paste -sd ' ')
	[ "$have" = "$(printf '%s\n' $want | sort | paste -sd ' ')" ] ||
		fail "$p --help: common options [$have], want [$want]"
	while IFS=$(printf '\t') read -r key text; do
		if [ -f "$t/ref-$key" ]; then
			[ "$text" = "$(cat "$t/ref-$key")" ] ||
				fail "$p --help: --$key reads \"$text\", not as in $(cat "$t/who-$key")'s: \"$(cat "$t/ref-$key")\""
		else
			printf '%s' "$text" >"$t/ref-$key" && echo "$p" >"$t/who-$key"
		fi
	done <"$t/entries-$tool"
	for o in "-t /dev/null" "--tokenizer /dev/null" "-j 1" "--threads 1" "-o $t/x" "--output $t/x"; do
		case "$o" in
		*tokenizer* | -t*) grep -q '^tokenizer' "$t/entries-$tool" || continue ;;
		*threads* | -j*) grep -q '^threads' "$t/entries-$tool" || continue ;;
		esac
		# shellcheck disable=SC2086 # the option and its argument
		"$p" $cmd $o --help </dev/null >"$t/out" 2>"$t/err" || fail "$p $cmd $o --help: $(head -1 "$t/err")"
	done
	# The man page gives the same spellings (ss-retrieve query refuses --tokenizer: not there).
	man=$SS_TOP/man/$p.1
	grep -q '^\.B -q, --quiet, -v, --verbose$' "$man" || fail "$man: no '-q, --quiet, -v, --verbose' entry"
	for key in output:o tokenizer:t threads:j; do
		grep -q "^${key%:*}" "$t/entries-$tool" || continue
		[ "$tool.${key%:*}" = retrieve.tokenizer ] && continue
		grep -q "^\.BI \"-${key#*:}, --${key%:*}\" \" [A-Z]*\"$" "$man" ||
			fail "$man: no '-${key#*:}, --${key%:*}' entry"
	done
done

# The model options (cli_model_opts) refuse a bad value with the same usage error.
for tool in encode decode score eval; do
	p=ss-$tool
	cmd=; [ $tool = eval ] && cmd=timing; [ $tool = decode ] && cmd="--prompt x"
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
