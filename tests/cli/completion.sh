# The bash completion (tools/ss.bash): it offers what the tools' --help says (the common options
# in both spellings, a tool's own options, ss-retrieve's and ss-eval's commands, the values an
# option's help lists) and paths for other arguments. Run by tests/run from the repo root.
set -u
command -v bash >/dev/null || { echo "SKIP: no bash"; exit 77; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir "$t/dir" && : >"$t/dir/model.safetensors"
bad=0
fail() { echo "FAIL: $*" >&2; bad=1; }
# comp WORD...: the completions of the last word, one line, sorted.
comp() {
	bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ss_complete
		printf "%s\n" "${COMPREPLY[@]}" | sort | paste -sd " "' _ "$SS_TOP/tools/ss.bash" "$@"
}
want() { # want "WORDS" "EXPECTED"
	# shellcheck disable=SC2086 # the words
	got=$(comp $1)
	[ "$got" = "$2" ] || fail "completing '$1': got '$got', want '$2'"
}
want "ss-encode --thr" "--threads"
want "ss-decode --tok" "--tokenizer"
want "ss-score --weights-d" "--weights-dtype"
want "ss-encode --weights-dtype x" ""
want "ss-encode --weights-dtype b" "bf16"
want "ss-retrieve q" "query"
want "ss-retrieve query --emp" "--empty-ok"
want "ss-eval rec" "recall"
want "ss-eval recall --per-q" "--per-query"
want "ss-compose --mo" "--mode"
want "ss-encode --model $t/di" "$t/dir"
want "ss-tokenize -t $t/dir/mo" "$t/dir/model.safetensors"
want "ss-cat $t/dir/" "$t/dir/model.safetensors"
# Every option the help of ss-decode names is offered, the short spellings too.
all=$(comp ss-decode -)
for o in -t --tokenizer -j --threads -o --output -q --quiet --prompt --max-tokens; do
	case " $all " in *" $o "*) ;; *) fail "ss-decode -: '$o' not offered" ;; esac
done
exit $bad
