# ss-encode --estimate: the documents and tokens it counts are the encoding's, its bytes are
# within 15 % of the stream the encoding writes (the sample's records are real ones), it writes
# no states, and it refuses -o and --concat. Its time is measured, not asserted (bench/ has no
# timed tests: the closing note of issue 52 compares it with a real build). Run by tests/run.
set -u
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
bad=0
fail() { echo "FAIL: $*" >&2; bad=1; }
m=$SS_FIXTURES/golden/models/t1-hf
head -c 120000 "$SS_TOP/data/wikitext-2-raw.test.hf-crlf.raw" >"$t/w.txt"
ss-tokenize -q --chunk 64 -o "$t/c.tokens" "$t/w.txt" || fail "ss-tokenize"
key() { sed -n "s/^$1  *//p" "$t/est"; }
for shard in 0/1 1/3; do
	TMPDIR=$t ss-encode --estimate --model "$m" --shard "$shard" -j 1 "$t/c.tokens" >"$t/est" 2>"$t/err" ||
		fail "--estimate --shard $shard: $(cat "$t/err")"
	[ -z "$(find "$t" -name 'ss-estimate*')" ] || fail "--estimate left its sample in TMPDIR"
	ss-encode -v --model "$m" --shard "$shard" -j 1 -o "$t/c.states" "$t/c.tokens" 2>"$t/log" || fail "ss-encode"
	sum=$(sed -n 's/^ss-encode: \([0-9]*\) documents*, \([0-9]*\) tokens in .*/\1 \2/p' "$t/log")
	[ "$(key documents) $(key tokens)" = "$sum" ] ||
		fail "--shard $shard: estimated '$(key documents) $(key tokens)' documents and tokens, encoded '$sum'"
	n=$(key sample_documents)
	[ "$n" -ge 32 ] && [ "$n" -le 63 ] || fail "--shard $shard: a sample of $n documents, want 32..63"
	size=$(wc -c <"$t/c.states")
	awk -v e="$(key state_bytes)" -v s="$size" 'BEGIN { r = e / s; exit !(r > 0.85 && r < 1.15) }' ||
		fail "--shard $shard: state_bytes $(key state_bytes), the stream has $size"
	awk -v e="$(key encode_seconds)" 'BEGIN { exit !(e > 0) }' || fail "encode_seconds $(key encode_seconds)"
done
# Fewer documents than a sample: all of them; none: zeros.
ss-encode --estimate --model "$m" --shard 0/40 "$t/c.tokens" >"$t/est" || fail "--shard 0/40"
[ "$(key sample_documents)" = "$(key documents)" ] || fail "a small corpus is not sampled whole"
: | ss-encode --estimate --model "$m" >"$t/est" || fail "empty input"
[ "$(key documents) $(key state_bytes)" = "0 0" ] || fail "empty input: $(cat "$t/est")"
for bad_opt in "-o $t/x" --concat; do
	# shellcheck disable=SC2086 # the option and its argument
	ss-encode --estimate --model "$m" $bad_opt "$t/c.tokens" >"$t/out" 2>"$t/err"
	rc=$?
	[ "$rc" -eq 2 ] && grep -q "^ss-encode: --estimate writes no states" "$t/err" ||
		fail "--estimate $bad_opt: exit $rc, $(head -1 "$t/err")"
	[ ! -e "$t/x" ] || fail "--estimate -o wrote a file"
done
exit $bad
