#!/bin/sh
# CLI cases of ss-compose: help and usage, every mode's output record, n = 1
# identity, refusal of mixed models (naming both records, no output file),
# n = 0, truncated and foreign input, mixed storage dtypes, pipe = file,
# plan frames (a pipe composed in one pass; a plan that lies is refused).
# Inputs come from gen/mkstates (seeded random states, small dims).
set -u
mk="$SS_TOP/$SS_BUILD/gen/mkstates"
[ -x "$mk" ] || { echo "no $mk (run make)"; exit 77; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect CODE CMD...: runs CMD (stdout $t/out, stderr $t/err), checks the exit code.
expect() {
	want=$1; shift
	"$@" >"$t/out" 2>"$t/err"
	got=$?
	[ "$got" -eq "$want" ] || { fail "'$*' exited $got, want $want"; sed 's/^/    /' "$t/err"; }
}
has() { grep -q -- "$2" "$1" || { fail "$1 lacks '$2'"; sed 's/^/    /' "$1"; }; }
field() { ss-cat --full "$1" | grep -o "\"$2\":[^]]*\]"; } # array field of the first record

"$mk" --shape small --seed 1 --prefix a 3 "$t/a.ss" &&
"$mk" --shape small --seed 2 --prefix b 2 "$t/b.ss" &&
"$mk" --shape small --seed 3 --prefix z --fingerprint other 1 "$t/z.ss" &&
"$mk" --shape small --seed 4 --prefix h --dtype f16 2 "$t/h.ss" &&
"$mk" --shape small --seed 5 --prefix g --dtype bf16 1 "$t/g.ss" &&
"$mk" --shape small --seed 7 --prefix q --dtype q8 3 "$t/q.ss" &&
"$mk" --shape t1 --seed 6 --prefix d 1 "$t/d.ss" || { echo "mkstates failed"; exit 1; }

# help, version, usage errors
expect 0 ss-compose --help
has "$t/out" "usage: ss-compose"
has "$t/out" "picaso-r"
expect 0 ss-compose -V
has "$t/out" "ss-compose"
expect 2 ss-compose --mode picaso "$t/a.ss"
has "$t/err" "unknown mode"
has "$t/err" "usage:"
expect 2 ss-compose --norm sideways "$t/a.ss"
expect 2 ss-compose --conv first "$t/a.ss"
expect 2 ss-compose --state-dtype f64 "$t/a.ss"
expect 2 ss-compose --bogus
expect 2 ss-compose --weights - "$t/a.ss"
expect 2 ss-compose - -

# every mode: id, provenance, n_tokens = sum (100+101+102 + 100+101)
for m in caso picaso-s picaso-r soup sum max; do
	expect 0 ss-compose --mode "$m" -o "$t/$m.ss" --weights "$t/$m.json" "$t/a.ss" "$t/b.ss"
	ss-cat "$t/$m.ss" >"$t/$m.txt"
	has "$t/$m.txt" "\"id\":\"$m(a0,a1,a2,b0,b1)\""
	has "$t/$m.txt" "\"mode\":\"$m\""
	has "$t/$m.txt" '"n_tokens":504'
	has "$t/$m.txt" '"sources":\["a0","a1","a2","b0","b1"\]'
	[ "$(ss-cat "$t/$m.ss" | wc -l)" -eq 1 ] || fail "$m: not one record"
	has "$t/$m.json" "\"mode\":\"$m\""
	has "$t/$m.json" '"n_layer":2,"nheads":3'
done
has "$t/soup.json" '"weights":\[\[\[0.2,0.2,0.2,0.2,0.2\]'
has "$t/sum.json" '"weights":\[\[\[1,1,1,1,1\]'
has "$t/max.json" '"weights":null'
has "$t/caso.json" ',1\]' # the last input's CASO weight is 1
# default mode is picaso-r; --id, --norm, --conv accepted
expect 0 ss-compose -o "$t/def.ss" "$t/a.ss" "$t/b.ss"
cmp -s "$t/def.ss" "$t/picaso-r.ss" || fail "default mode is not picaso-r"
expect 0 ss-compose --mode soup --norm both --conv last --id mine -o "$t/o.ss" "$t/a.ss"
ss-cat "$t/o.ss" | grep -q '"id":"mine"' || fail "--id ignored"
# -l sets the output's zstd level only: the same record at level 19, no larger
# than at the default (-1, fast): smaller, or the same raw frame where zstd
# saves less than a fifth at either level (formats/states.md "raw frames");
# out of range is a usage error
expect 0 ss-compose -l 19 -o "$t/l19.ss" "$t/a.ss" "$t/b.ss"
[ "$(ss-cat --full "$t/l19.ss")" = "$(ss-cat --full "$t/def.ss")" ] || fail "-l 19 changed the record"
[ "$(wc -c <"$t/l19.ss")" -le "$(wc -c <"$t/def.ss")" ] || fail "-l 19 output larger than the default's"
expect 2 ss-compose -l 20 -o "$t/l20.ss" "$t/a.ss"
has "$t/err" "level"
# -j N decompresses N inputs at once: the same bytes as one thread, every
# mode, inputs of four dtypes over four files (at -l 3 the output is also
# compressed by N threads: the same record); 0 and 65 are usage errors; a
# write error (/dev/full) is exit 1 with its message, whatever N
for m in caso picaso-s picaso-r soup sum max; do
	expect 0 ss-compose --mode "$m" -j 1 -o "$t/j1.ss" "$t/a.ss" "$t/h.ss" "$t/g.ss" "$t/q.ss"
	for j in 2 3 8; do
		expect 0 ss-compose --mode "$m" -j "$j" -o "$t/jn.ss" "$t/a.ss" "$t/h.ss" "$t/g.ss" "$t/q.ss"
		cmp -s "$t/j1.ss" "$t/jn.ss" || fail "$m: -j $j differs from -j 1"
	done
done
expect 0 ss-compose -j 2 -l 3 -o "$t/j2l3.ss" "$t/a.ss" "$t/b.ss"
[ "$(ss-cat --full "$t/j2l3.ss")" = "$(ss-cat --full "$t/def.ss")" ] || fail "-j 2 -l 3 changed the record"
expect 2 ss-compose -j 0 "$t/a.ss"
has "$t/err" "threads"
expect 2 ss-compose --threads 257 "$t/a.ss"
for j in 1 2; do
	expect 1 ss-compose -j "$j" -l 3 -o /dev/full "$t/a.ss" "$t/b.ss"
	has "$t/err" "ss-compose: /dev/full: .*No space left on device"
done

# pipe = seekable stdin = files, every mode (picaso spools the pipe)
cat "$t/a.ss" "$t/b.ss" >"$t/ab.ss"
for m in caso picaso-s picaso-r soup sum max; do
	cat "$t/a.ss" "$t/b.ss" | ss-compose --mode "$m" -o "$t/p.ss" || fail "$m from a pipe"
	cmp -s "$t/p.ss" "$t/$m.ss" || fail "$m: pipe and files differ"
	ss-compose --mode "$m" -o "$t/s.ss" <"$t/ab.ss" || fail "$m from stdin"
	cmp -s "$t/s.ss" "$t/$m.ss" || fail "$m: stdin file and files differ"
	cat "$t/b.ss" | ss-compose --mode "$m" -o "$t/p2.ss" "$t/a.ss" - || fail "$m: file then pipe"
	cmp -s "$t/p2.ss" "$t/$m.ss" || fail "$m: file + pipe and files differ"
done

# A plan frame ahead of the records (ss-retrieve query writes one): picaso
# reads a pipe once, with no spool file (a $TMPDIR that does not exist
# fails the plan-less pipe, not the planned one), the same bytes as files.
"$mk" --shape small --seed 1 --prefix a --plan 1 3 "$t/ap.ss"
"$mk" --shape small --seed 8 --prefix c --plan 1 3 "$t/cp.ss"
ss-cat --meta "$t/ap.ss" | sed 's/"offset":[0-9]*,//' >"$t/ap.meta" &&
	ss-cat --meta "$t/a.ss" | sed 's/"offset":[0-9]*,//' >"$t/a.meta"
cmp -s "$t/ap.meta" "$t/a.meta" || fail "a plan frame changed what ss-cat reads"
for m in picaso-s picaso-r caso soup; do
	ss-compose --mode "$m" -o "$t/pa.ss" "$t/a.ss"
	cat "$t/ap.ss" | TMPDIR="$t/none" ss-compose --mode "$m" -o "$t/pp.ss" || fail "$m: planned pipe"
	cmp -s "$t/pp.ss" "$t/pa.ss" || fail "$m: planned pipe and file differ"
	ss-compose --mode "$m" -o "$t/pf.ss" "$t/ap.ss" && cmp -s "$t/pf.ss" "$t/pa.ss" ||
		fail "$m: planned file and file differ"
done
cat "$t/a.ss" | TMPDIR="$t/none" ss-compose --mode picaso-r -o "$t/x.ss" >"$t/out" 2>"$t/err" &&
	fail "a plan-less pipe composed without its spool file"
has "$t/err" "spool file in \$TMPDIR"
# the plan is a claim: a record it does not describe, fewer or more records
plan_bytes() { # the plan frame of $1: 8 header bytes and its payload
	n=$(od -An -tu4 -j4 -N4 "$1" | tr -d ' ')
	head -c $((8 + n)) "$1"
}
{ plan_bytes "$t/ap.ss"; tail -c +$(( $(plan_bytes "$t/cp.ss" | wc -c) + 1 )) "$t/cp.ss"; } >"$t/wrong.ss"
expect 1 sh -c "cat '$t/wrong.ss' | ss-compose --mode picaso-r -o '$t/x.ss'"
has "$t/err" "logdecay differs from the planned one"
"$mk" --shape small --seed 1 --prefix a 2 "$t/a2.ss" # a's first two records
{ plan_bytes "$t/ap.ss"; cat "$t/a2.ss"; } >"$t/short.ss"
expect 1 sh -c "cat '$t/short.ss' | ss-compose --mode picaso-r -o '$t/x.ss'"
has "$t/err" "announced 3"
cat "$t/ap.ss" "$t/b.ss" >"$t/long.ss"
expect 1 sh -c "cat '$t/long.ss' | ss-compose --mode picaso-r -o '$t/x.ss'"
has "$t/err" "follows the 3 its plan frame announced"
[ -e "$t/x.ss" ] && fail "a refused plan left an output"
# every mode checks a plan frame, from a pipe or a file: a count or a row it does not match is
# refused (issue 48 #18: soup, caso, sum and max composed them, exit 0)
"$mk" --shape small --seed 1 --prefix a --plan 1 4 "$t/ap4.ss"
{ plan_bytes "$t/ap4.ss"; cat "$t/a.ss"; } >"$t/short4.ss" # 4 announced, 3 follow
for m in caso picaso-s picaso-r soup sum max; do
	expect 1 sh -c "cat '$t/short4.ss' | ss-compose --mode $m -o '$t/x.ss'"
	has "$t/err" "ends after 3 records, its plan frame announced 4"
	expect 1 ss-compose --mode $m -o "$t/x.ss" "$t/short4.ss"
	has "$t/err" "short4.ss: ends after 3 records, its plan frame announced 4"
	expect 1 sh -c "cat '$t/wrong.ss' | ss-compose --mode $m -o '$t/x.ss'"
	has "$t/err" "logdecay differs from the planned one"
	expect 1 ss-compose --mode $m -o "$t/x.ss" "$t/wrong.ss"
	has "$t/err" "logdecay differs from the planned one"
	expect 1 sh -c "cat '$t/long.ss' | ss-compose --mode $m -o '$t/x.ss'"
	has "$t/err" "follows the 3 its plan frame announced"
done
[ -e "$t/x.ss" ] && fail "a refused plan left an output"
# A plan of many rows ahead of a few records (issue 48 #10, #11): refused after the records, not
# after quadratic weights (picaso-s: 65,536 rows took minutes) or tables of the plan's rows
# (picaso-r: a 64 MiB plan took 1.7 GB). forge SRC N OUT: SRC's records behind a plan of N rows,
# SRC's own rows and then its last one again.
forge() {
	python3 - "$@" <<'PY'
import struct, sys
src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
b = open(src, "rb").read()
ln = struct.unpack_from("<I", b, 4)[0]
pay = b[8 : 8 + ln]
n0 = pay[pay.index(b"\xa1n") + 2]  # a positive fixint: SRC announces < 128 records
i = pay.index(b"logdecay") + 8
size = {0xC4: (1, "B"), 0xC5: (2, ">H"), 0xC6: (4, ">I")}[pay[i]]
bl = struct.unpack_from(size[1], pay, i + 1)[0]
dec = pay[i + 1 + size[0] : i + 1 + size[0] + bl]
row = bl // n0
body = dec[: min(n, n0) * row] + dec[-row:] * max(0, n - n0)
p = b"\x82\xa1n\xce" + struct.pack(">I", n) + b"\xa8logdecay\xc6" + struct.pack(">I", len(body)) + body
open(out, "wb").write(struct.pack("<II", 0x184D2A54, len(p)) + p + b[8 + ln :])
PY
}
forge "$t/ap.ss" 65536 "$t/p65k.ss"
expect 1 sh -c "cat '$t/p65k.ss' | timeout 20 ss-compose --mode picaso-s -o '$t/x.ss'"
has "$t/err" "ends after 3 records, its plan frame announced 65536"
"$mk" --shape 1,1,2,2,4,4 --seed 1 --prefix a --plan 1 3 "$t/tp.ss" # one decay a record
forge "$t/tp.ss" 16777000 "$t/p64m.ss"                               # a 64 MiB plan
rss=/usr/bin/time # peak RSS, where no sanitizer multiplies it
case "$SS_BUILD" in *san) rss= ;; esac
[ -x "${rss:-/none}" ] || rss=
for m in picaso-r picaso-s soup; do
	expect 1 sh -c "cat '$t/p64m.ss' | ${rss:+$rss -f %M -o '$t/rss'} timeout 20 ss-compose --mode $m -o '$t/x.ss'"
	has "$t/err" "ends after 3 records, its plan frame announced 16777000"
	[ -z "$rss" ] || [ "$(tail -n 1 "$t/rss")" -lt 300000 ] || fail "$m: a 64 MiB plan took $(tail -n 1 "$t/rss") KB"
done
rm -f "$t/p64m.ss"
# a plan too large to take on trust is checked before its weights: picaso-s of 2,400 records
# (2,400 x 1,200 nodes x 6 heads of weights) spools the pipe, and composes as from the file
"$mk" --shape small --seed 9 --prefix w --plan 1 2400 "$t/wide.ss"
ss-compose --mode picaso-s -o "$t/wf.ss" "$t/wide.ss"
cat "$t/wide.ss" | ss-compose --mode picaso-s -o "$t/wp.ss" && cmp -s "$t/wf.ss" "$t/wp.ss" ||
	fail "picaso-s: a large planned pipe and its file differ"
cat "$t/wide.ss" | TMPDIR="$t/none" ss-compose --mode picaso-s -o "$t/x.ss" 2>/dev/null &&
	fail "a plan too large to trust composed without checking its records first"
{ printf 'T*M\030\004\000\000\000'; printf '\201\241n\001'; cat "$t/a.ss"; } >"$t/badplan.ss"
expect 1 sh -c "cat '$t/badplan.ss' | ss-compose --mode picaso-r -o '$t/x.ss'"
has "$t/err" "malformed plan frame"

# n = 1: the input comes back exactly (arrays)
"$mk" --shape small --seed 7 --prefix one 1 "$t/one.ss"
for m in caso picaso-s picaso-r soup sum max; do
	expect 0 ss-compose --mode "$m" -o "$t/id.ss" "$t/one.ss"
	for f in ssm conv logdecay; do
		[ "$(field "$t/id.ss" $f)" = "$(field "$t/one.ss" $f)" ] || fail "$m n=1: $f differs"
	done
done

# different models or dims: error naming both records, exit 1, no output file
expect 1 ss-compose --mode picaso-r -o "$t/bad.ss" "$t/a.ss" "$t/z.ss"
has "$t/err" "z.ss: record 0 (id \"z0\")"
has "$t/err" "a.ss: record 0 (id \"a0\")"
has "$t/err" "fingerprint"
[ ! -e "$t/bad.ss" ] || fail "output left behind after a mismatch"
ls "$t" | grep -q 'bad.ss.tmp' && fail "temporary output left behind"
expect 1 ss-compose --mode soup -o "$t/bad.ss" "$t/a.ss" "$t/b.ss" "$t/z.ss"
has "$t/err" "z.ss: record 0"
expect 1 ss-compose --mode caso -o "$t/bad.ss" "$t/a.ss" "$t/d.ss"
has "$t/err" "dims differ"
has "$t/err" "d.ss: record 0 (id \"d0\")"
[ ! -e "$t/bad.ss" ] || fail "output left behind after a dims mismatch"

# n = 0: empty input is an error, no output
: >"$t/empty.ss"
for m in picaso-r soup; do
	expect 1 ss-compose --mode $m -o "$t/bad.ss" "$t/empty.ss"
	has "$t/err" "no input states"
	: | ss-compose --mode $m -o "$t/bad.ss" 2>/dev/null && fail "$m: empty pipe accepted"
done
[ ! -e "$t/bad.ss" ] || fail "output left behind for n = 0"

# truncated or foreign input: names the file and record
size=$(wc -c <"$t/b.ss")
head -c $((size - 10)) "$t/b.ss" >"$t/trunc.ss"
for m in picaso-s caso; do
	expect 1 ss-compose --mode $m -o "$t/bad.ss" "$t/a.ss" "$t/trunc.ss"
	has "$t/err" "trunc.ss: record"
	head -c $((size - 10)) "$t/b.ss" | ss-compose --mode $m -o "$t/bad.ss" 2>"$t/err" && fail "$m: truncated pipe accepted"
	has "$t/err" "record"
done
expect 1 ss-compose -o "$t/bad.ss" "$SS_TOP/formats/golden/t1-c2.tokens"
has "$t/err" "t1-c2.tokens: record 0"
expect 1 ss-compose -o "$t/bad.ss" "$t/missing.ss"
has "$t/err" "missing.ss"
[ ! -e "$t/bad.ss" ] || fail "output left behind for bad input"

# storage dtypes mix freely; the output keeps a shared dtype, else f32
expect 0 ss-compose -o "$t/m.ss" "$t/a.ss" "$t/h.ss" "$t/g.ss"
ss-cat "$t/m.ss" | grep -q '"dtype":"f32"' || fail "mixed inputs: output not f32"
expect 0 ss-compose -o "$t/m.ss" "$t/h.ss"
ss-cat "$t/m.ss" | grep -q '"dtype":"f16"' || fail "f16 inputs: output not f16"
expect 0 ss-compose --state-dtype bf16 -o "$t/m.ss" "$t/h.ss" "$t/a.ss"
ss-cat "$t/m.ss" | grep -q '"dtype":"bf16"' || fail "--state-dtype bf16 ignored"
# q8 inputs: read in place, the output stays q8; mixed with f32, f32; from a pipe too
expect 0 ss-compose --mode picaso-r -o "$t/m.ss" "$t/q.ss"
ss-cat "$t/m.ss" | grep -q '"dtype":"q8"' || fail "q8 inputs: output not q8"
expect 0 ss-compose --mode picaso-r --state-dtype f32 -o "$t/mf.ss" "$t/q.ss"
expect 0 ss-compose --mode picaso-r --state-dtype f32 -o "$t/mp.ss" - <"$t/q.ss"
cmp -s "$t/mf.ss" "$t/mp.ss" || fail "q8: pipe and file differ"
ss-cat --stats "$t/q.ss" | grep -q '"dtype":"q8","records":3,' || fail "ss-cat --stats: no q8 line"
expect 0 ss-compose -o "$t/m.ss" "$t/q.ss" "$t/a.ss"
ss-cat "$t/m.ss" | grep -q '"dtype":"f32"' || fail "q8 + f32 inputs: output not f32"
# a q8 record whose ssm_scale lost its last scale (remade by hand, one record
# framed by zstd(1)): one line naming the file, the record and the field
if command -v python3 >/dev/null && command -v zstd >/dev/null; then
	"$mk" --shape small --seed 8 --prefix q --dtype q8 1 "$t/q1.ss" &&
	zstd -q -d -c "$t/q1.ss" >"$t/q1.raw" && python3 - "$t/q1.raw" "$t/bad.raw" <<'PY' &&
import sys
b = bytearray(open(sys.argv[1], "rb").read())
k = b.index(b"\xa9ssm_scale") + 10
hl = {0xc4: 2, 0xc5: 3, 0xc6: 5}[b[k]]
n = int.from_bytes(b[k + 1:k + hl], "big")
b[k + 1:k + hl] = (n - 4).to_bytes(hl - 1, "big")
del b[k + hl + n - 4:k + hl + n]
open(sys.argv[2], "wb").write(bytes(b))
PY
	zstd -q --check -c "$t/bad.raw" >"$t/bad.ss" || fail "could not make a corrupt q8 record"
	expect 1 ss-compose -o "$t/out.ss" "$t/bad.ss"
	has "$t/err" 'ss-compose: .*bad.ss: record 0.*field "ssm_scale" has'
	[ "$(wc -l <"$t/err")" -eq 1 ] || fail "corrupt q8: not one line"
	[ ! -e "$t/out.ss" ] || fail "output left behind for a corrupt q8 record"
fi
# the golden t1/c2 state stored as f32, f16 and bf16: composable together
expect 0 ss-compose --mode picaso-s -o "$t/gold.ss" "$SS_TOP/formats/golden/t1-c2.states"
ss-cat "$t/gold.ss" | grep -q '"n_sources"\|"sources":\["wikitext' || fail "golden: no sources"

[ "$fails" -eq 0 ] || { echo "$fails failures"; exit 1; }
echo "ok"
