#!/bin/sh
# ss-retrieve with its state files served over HTTP (issue 49 item 2): a
# real lighttpd on 127.0.0.1 (a port picked free) serves the state streams
# that add --state-url indexed at their URLs; query's output equals the
# local-file query's byte for byte (one query, k of 1..3, a batch). Then
# each way a fetch goes wrong gives one line naming the URL (credentials
# and query string redacted) and what went wrong, exit 1, and no output
# file: a 404, a redirect loop, a server killed mid-transfer, a file
# replaced on the server (same length: the frame checksum; shorter: 416).
# tests/util/http-faults.py plays the servers lighttpd will not be: one
# answering 500 (retried, then failing with the count of tries), 503 once
# (retried, then served), a short read, a stall (--http-timeout), and one
# that ignores Range (refused, not downloaded whole); its request log shows
# the k hits fetched at once and connections kept alive across a batch.
# Skips without lighttpd (Debian's, .ci/install-deps) or python3.
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
LIGHTTPD=$(command -v lighttpd || { [ -x /usr/sbin/lighttpd ] && echo /usr/sbin/lighttpd; })
[ -n "$LIGHTTPD" ] || { echo "no lighttpd (apt-get install lighttpd)"; exit 77; }
command -v python3 >/dev/null || { echo "no python3"; exit 77; }
faults=$SS_TOP/tests/util/http-faults.py

pids=
trap 'for p in $pids; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT

# A free port: bound by the system, released, then taken by the server.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# lighttpd NAME [EXTRA CONFIG LINE]: serves www/ on a free port ($port), its
# pid in $lpid; /loop/X redirects to itself.
lighttpd_start() {
	port=$(free_port)
	cat >"$1.conf" <<EOF
server.document-root = "$T/www"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$T/$1.log"
server.modules += ("mod_redirect")
url.redirect = ("^/loop/(.*)\$" => "/loop/\$1")
# The test rewrites files under www/ between requests: a cached stat would
# serve a truncated file at its old length (a 206 cut short, not a 416).
server.stat-cache-engine = "disable"
${2:-}
EOF
	"$LIGHTTPD" -D -f "$1.conf" >/dev/null 2>&1 &
	lpid=$!
	pids="$pids $lpid"
	i=0
	until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 50 ] || { fail "lighttpd did not start: $(cat "$1.log" 2>/dev/null)"; done_checks; }
		sleep 0.1
	done
}

# 12 documents of t1-shaped states (20 KB records) in two state files.
mkdir www
awk 'BEGIN { split("fox dog ocean ship river stone", w, " ");
	for (i = 1; i <= 12; i++) printf "d%02d\t%s %s %s\n", i, w[1 + i % 6], w[1 + (i * 7) % 6], (i % 2 ? "odd" : "even") }' >docs.txt
head -n 6 docs.txt >a.txt
tail -n 6 docs.txt >b.txt
"$mkdb" --dims t1 a.tokens www/a.states <a.txt || exit 1
"$mkdb" --dims t1 --seed 2 b.tokens www/b.states <b.txt || exit 1
cp www/a.states a.orig

lighttpd_start main
url=http://127.0.0.1:$port
expect 0 ss-retrieve add --index local.db a.tokens b.tokens www/a.states www/b.states
expect 0 ss-retrieve add --index http.db --state-url www/=$url/ a.tokens b.tokens www/a.states www/b.states
expect 0 ss-retrieve list --index http.db
has out "	$url/a.states	0	"
has out "	$url/b.states	"
# A --state-url that names no STREAM is a usage error.
expect 2 ss-retrieve add --index x.db --state-url nothere.states=$url/x a.tokens www/a.states
has err "no STREAM is nothere.states"
expect 2 ss-retrieve add --index x.db --state-url www/a.states=ftp://h/a a.tokens www/a.states

# Byte-identical to the local query.
for q in "fox" "ocean odd" "dog ship river stone even"; do
	for k in 1 3 12; do
		expect 0 ss-retrieve query --index local.db -k $k --query "$q" -o l.states
		expect 0 ss-retrieve query --index http.db -k $k --query "$q" -o h.states
		cmp -s l.states h.states || fail "query '$q' -k $k over HTTP differs from the local files"
	done
done
[ "$(stat -c %s h.states)" -gt 200000 ] || fail "k 12: $(stat -c %s h.states) bytes, wanted 12 states"
printf 'fox\nocean\n{"id": "q3", "query": "stone", "k": 4}\n' >batch
mkdir lo ho
expect 0 ss-retrieve query --index local.db -k 2 --out-dir lo <batch
expect 0 ss-retrieve query --index http.db -k 2 --out-dir ho <batch
for f in 1 2 q3; do cmp -s lo/$f.states ho/$f.states || fail "batch query $f differs over HTTP"; done

# Shards, each with its states at a URL, read as one index: the same bytes.
expect 0 ss-retrieve add --index sa.db --state-url www/a.states=$url/a.states a.tokens www/a.states
expect 0 ss-retrieve add --index sb.db --state-url www/b.states=$url/b.states b.tokens www/b.states
expect 0 ss-retrieve query --index local.db -k 12 --query "fox ocean odd" -o l.states
expect 0 ss-retrieve query --index sa.db --index sb.db -k 12 --query "fox ocean odd" -o h.states
cmp -s l.states h.states || fail "two shards over HTTP differ from the local index"

# one_error DB WHAT ARGS...: query DB for "fox" -k 3 -o bad.states
# fails with one line naming what, and writes nothing.
one_error() {
	db=$1 what=$2
	shift 2
	rm -f bad.states
	expect 1 ss-retrieve query --index "$db" -k 3 --query "fox odd even" -o bad.states "$@"
	has err "$what"
	[ "$(wc -l <err)" -eq 1 ] || { fail "$db: $(wc -l <err) lines of error, wanted 1"; cat err; }
	[ ! -e bad.states ] || fail "$db: bad.states written"
}
index_at() { # DB URL_PREFIX: the documents with their states at URL_PREFIX/{a,b}.states
	expect 0 ss-retrieve add --index "$1" --state-url www/="$2/" a.tokens b.tokens www/a.states www/b.states
}

index_at nf.db $url/gone
one_error nf.db "^ss-retrieve: nf.db: $url/gone/[ab].states: document d[0-9]* at byte offset [0-9]*: HTTP 404$"
index_at loop.db $url/loop
one_error loop.db "$url/loop/[ab].states: .*more than 8 redirects"
# Credentials never shown: not in a listing, not in an error.
index_at cred.db "http://alice:s3cret@127.0.0.1:$port/gone"
expect 0 ss-retrieve add --index cred.db --state-url "www/a.states=$url/a.states?X-Amz-Signature=s3cret" \
	a.tokens www/a.states
one_error cred.db "http://.*\\*\\*\\*"
for c in list "show d01 d02"; do
	expect 0 ss-retrieve $c --index cred.db
	grep -q s3cret out && fail "$c shows the URL's credentials: $(grep s3cret out | head -1)"
	has out '\*\*\*'
done
expect 0 ss-retrieve list --index cred.db --json
grep -q s3cret out && fail "list --json shows the URL's credentials"
grep -q s3cret err bad.states 2>/dev/null && fail "an error shows the URL's credentials"

# A file replaced on the server, of the same length: the frame checksum
# (the record's last 4 bytes) catches it; truncated: the server's 416.
python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-1] ^= 0x55; open(p, "wb").write(b)' www/a.states
rm -f bad.states
expect 1 ss-retrieve query --index http.db -k 12 --query "fox dog ocean ship river stone" -o bad.states
has err "$url/a.states: document d06 at byte offset [0-9]*: .*checksum"
[ "$(wc -l <err)" -eq 1 ] && [ ! -e bad.states ] || fail "replaced file: not one line, or output written"
head -c 30000 a.orig >www/a.states
expect 1 ss-retrieve query --index http.db -k 12 --query "fox dog ocean ship river stone" -o bad.states
has err "$url/a.states: document d0[0-9] at byte offset [0-9]*: HTTP 416"
cp a.orig www/a.states

# Records longer than a head (256 KiB): the heads fetched first, each rest
# streamed into the output file as it arrives and checked on the way (to
# stdout, where a failure could not be taken back: fetched whole first).
# q8 records (540 KB, raw frames) and f32 ones (2 MB, compressed) of a
# small shape: the local query's bytes either way; a byte
# changed past a head is caught by the checksum at the frame's end, and the
# output file is not left behind.
mkstates=$(dirname "$mkdb")/mkstates
"$mkstates" --shape 8,8,64,128,640,4 --dtype q8 --prefix q 3 www/big.states || exit 1
"$mkstates" --shape 8,8,64,128,640,4 --min-saving 0 --prefix z 2 www/zbig.states || exit 1
awk 'BEGIN { for (i = 0; i < 3; i++) printf "q%d\tbig q%d\n", i, i; for (i = 0; i < 2; i++) printf "z%d\tbig z%d\n", i, i }' >big.txt
"$mkdb" big.tokens "" <big.txt || exit 1
# (fake token counts: add warns that they differ from the states')
expect 0 ss-retrieve add -q --index bigl.db big.tokens www/big.states www/zbig.states
expect 0 ss-retrieve add -q --index bigh.db --state-url www/=$url/ big.tokens www/big.states www/zbig.states
for k in 1 5; do
	expect 0 ss-retrieve query --index bigl.db -k $k --query big -o l.states
	expect 0 ss-retrieve query --index bigh.db -k $k --query big -o h.states
	cmp -s l.states h.states || fail "records past a head, -k $k: the HTTP query's output differs"
	ss-retrieve query --index bigh.db -k $k --query big >h.states 2>err || fail "to stdout: $(cat err)"
	cmp -s l.states h.states || fail "records past a head to stdout, -k $k: the output differs"
done
cp www/big.states big.orig
python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x55; open(p, "wb").write(b)' \
	www/big.states
one_big_error() { # WHAT ARGS...: a query of bigh.db fails with one line naming what, and writes nothing
	what=$1
	shift
	rm -f bad.states
	expect 1 ss-retrieve query --index bigh.db -k 5 --query big "$@"
	has err "$what"
	[ "$(wc -l <err)" -eq 1 ] || { fail "$(wc -l <err) lines of error, wanted 1"; cat err; }
	[ ! -e bad.states ] || fail "bad.states written"
}
one_big_error "^ss-retrieve: bigh.db: $url/big.states: document q1 at byte offset [0-9]*: .*checksum" -o bad.states
ss-retrieve query --index bigh.db -k 5 --query big >bad.states 2>err && fail "to stdout: a changed byte not caught"
[ ! -s bad.states ] || fail "to stdout: $(stat -c %s bad.states) bytes written before the changed byte was caught"
has err "$url/big.states: document q1 at byte offset [0-9]*: .*checksum"
cp big.orig www/big.states

# lighttpd killed mid-transfer (4 KB/s: a 20 KB record takes 5 s).
lighttpd_start slow 'connection.kbytes-per-second = 4'
index_at killed.db http://127.0.0.1:$port
rm -f bad.states
ss-retrieve query --index killed.db -k 3 --query "fox odd even" -o bad.states --http-retries 1 >out 2>err &
q=$!
sleep 1
kill -9 $lpid
wait $q
got=$?
[ $got -eq 1 ] || fail "killed server: exit $got"
has err "^ss-retrieve: killed.db: http://127.0.0.1:$port/[ab].states: document d[0-9]* at byte offset [0-9]*: .*(2 tries)$"
[ "$(wc -l <err)" -eq 1 ] && [ ! -e bad.states ] || fail "killed server: not one line, or output written"
# ... and killed while a record's rest streams into the output (200 KB/s:
# the heads in 1.3 s, then the first rest; killed once the output's
# temporary file holds more than its heads): the temporary file goes too.
lighttpd_start slow2 'connection.kbytes-per-second = 200'
expect 0 ss-retrieve add -q --index bigslow.db --state-url www/=http://127.0.0.1:$port/ big.tokens www/big.states
rm -f bad.states
ss-retrieve query --index bigslow.db -k 3 --query big -o bad.states --http-retries 1 >out 2>err &
q=$!
i=0
until [ "$(cat bad.states.tmp.* 2>/dev/null | wc -c)" -gt 300000 ]; do
	i=$((i + 1))
	[ $i -lt 200 ] || { fail "killed mid-stream: the output did not grow past the heads"; break; }
	sleep 0.05
done
kill -9 $lpid
wait $q
got=$?
[ $got -eq 1 ] || fail "killed mid-stream: exit $got"
has err "^ss-retrieve: bigslow.db: http://127.0.0.1:$port/big.states: document q[0-9] at byte offset [0-9]*: .*(2 tries)$"
[ "$(wc -l <err)" -eq 1 ] || fail "killed mid-stream: $(wc -l <err) lines of error"
ls bad.states* >/dev/null 2>&1 && fail "killed mid-stream: output left: $(ls bad.states*)"

# The faults lighttpd does not make.
python3 "$faults" "$T/www" fport flog 2>faults.err &
pids="$pids $!"
i=0
until [ -s fport ]; do i=$((i + 1)); [ $i -lt 100 ] || { fail "http-faults.py did not start"; done_checks; }; sleep 0.1; done
furl=http://127.0.0.1:$(cat fport)
index_at f500.db $furl/500
: >flog
one_error f500.db "$furl/500/[ab].states: document d[0-9]* at byte offset [0-9]*: HTTP 500 (3 tries)$" --http-retries 2
n=$(grep -c '^/500/' flog)
[ "$n" -eq 9 ] || fail "500: $n requests, wanted 9 (3 hits, each tried 3 times)"
index_at fnorange.db $furl/norange
one_error fnorange.db "$furl/norange/[ab].states: .*HTTP 200 instead of 206: the server ignores range requests"
index_at fshort.db $furl/short
one_error fshort.db "$furl/short/[ab].states: .*(2 tries)$" --http-retries 1
index_at fstall.db $furl/stall
one_error fstall.db "$furl/stall/[ab].states: .*Timeout.*(1 tries)\$\|$furl/stall/[ab].states: .*[Tt]imeout" --http-timeout 1 --http-retries 0
index_at fflaky.db $furl/flaky
expect 0 ss-retrieve query --index fflaky.db -k 3 --query "fox odd even" -o h.states
expect 0 ss-retrieve query --index local.db -k 3 --query "fox odd even" -o l.states
cmp -s l.states h.states || fail "a 503 retried: the output differs from the local query"
# Parallel transfers and keep-alive: the 3 hits of a query are answered at
# once, and the second query of a batch reuses the first's connections.
index_at fslow.db $furl/slow
: >flog
mkdir so
printf 'fox odd even\nocean ship\n' | ss-retrieve query --index fslow.db -k 3 --out-dir so >out 2>err ||
	fail "slow server: $(cat err)"
most=$(awk '{ if ($3 > m) m = $3 } END { print m + 0 }' flog)
[ "$most" -ge 2 ] || fail "slow server: at most $most request(s) at once, wanted the hits fetched in parallel"
reqs=$(wc -l <flog) conns=$(awk '{ print $2 }' flog | sort -u | wc -l)
[ "$reqs" -eq 6 ] || fail "slow server: $reqs requests, wanted 6"
[ "$conns" -lt "$reqs" ] || fail "slow server: $conns connections for $reqs requests: none kept alive"
# Records past a head from a server slow to answer (0.3 s a request, past
# the 50 ms beyond which rests streamed one after another would each pay
# it): after the heads, the records are fetched whole, no rest on its own.
expect 0 ss-retrieve add -q --index bigsl.db big.tokens www/big.states
expect 0 ss-retrieve add -q --index bigfslow.db --state-url www/=$furl/slow/ big.tokens www/big.states
: >flog
expect 0 ss-retrieve query --index bigfslow.db -k 3 --query big -o h.states
expect 0 ss-retrieve query --index bigsl.db -k 3 --query big -o l.states
cmp -s l.states h.states || fail "slow server, records past a head: the output differs from the local query"
starts=$(awk '{ split($4, r, "-"); print r[1] }' flog | sort -u | wc -l)
[ "$starts" -eq 3 ] && [ "$(wc -l <flog)" -eq 6 ] ||
	fail "slow server, records past a head: $(wc -l <flog) requests starting at $starts places, wanted 6 at the 3 records' starts"
# A batch whose queries share records past a head: the first query streams
# their rests; the second fetches them whole (kept for the queries after).
expect 0 ss-retrieve add -q --index bigfok.db --state-url www/=$furl/ok/ big.tokens www/big.states
: >flog
mkdir bho blo
printf 'big\nbig q1\n' | ss-retrieve query --index bigfok.db -k 3 --out-dir bho >out 2>err || fail "shared records: $(cat err)"
printf 'big\nbig q1\n' | ss-retrieve query --index bigsl.db -k 3 --out-dir blo >out 2>err || fail "shared records: $(cat err)"
for f in 1 2; do cmp -s blo/$f.states bho/$f.states || fail "shared records: batch query $f differs over HTTP"; done
starts() { sed -n "$1p" flog | awk '{ split($4, r, "-"); print r[1] }' | sort; }
[ "$(wc -l <flog)" -eq 9 ] && [ "$(starts 1,3)" = "$(starts 7,9)" ] && [ "$(starts 4,6)" != "$(starts 1,3)" ] ||
	{ fail "shared records: not 3 heads, 3 rests, then the 3 records whole"; sed 's/^/    /' flog; }
done_checks
