#!/bin/sh
# bench/http.sh — a query's time when its states are fetched over HTTP against the same query on
# local files, measured in one run (issue 49: 10 states of 4.4 MB from 127.0.0.1, goal <= 1.3x).
# N_DOCS states of the mamba2-130m shape (gen/mkstates, DTYPE q8: 4.4 MB each; f32: 18.9 MB) in one
# state file served by lighttpd on 127.0.0.1, indexed twice: at its path and at its URL
# (ss-retrieve add --state-url). A query matching every document (-k N_DOCS) runs ROUNDS times on
# each index, alternating, each as its own process (-o a file: what one query pays, start-up
# included) and ROUNDS queries as one batch (--out-dir: the connections kept alive between them).
# Prints the min and median of each and the ratio HTTP / local; never fails on time.
# usage: bench/http.sh   environment: N_DOCS (10) DTYPE (q8) ROUNDS (20)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SS_BUILD:=build}" "${N_DOCS:=10}" "${DTYPE:=q8}" "${ROUNDS:=20}"
PATH=$top/$SS_BUILD/bin:$PATH
gen=$top/$SS_BUILD/gen
LIGHTTPD=$(command -v lighttpd || echo /usr/sbin/lighttpd)
[ -x "$gen/mkstates" ] || { echo "http: no $gen/mkstates (make first)"; exit 1; }
[ -x "$LIGHTTPD" ] || { echo "http: no lighttpd (apt-get install lighttpd)"; exit 1; }
d=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill $pid; rm -rf "$d"' EXIT
cd "$d"
now() { date +%s.%N; }
echo "machine: $(nproc) cores, load average $(cut -d ' ' -f 1-3 /proc/loadavg) (figures from a loaded machine are not comparable)"

mkdir www
"$gen/mkstates" --shape 130m --dtype "$DTYPE" "$N_DOCS" www/s.states
awk -v n="$N_DOCS" 'BEGIN { for (i = 0; i < n; i++) printf "doc%d\tcommon word%d\n", i, i }' >docs.txt
"$gen/mkdb" docs.tokens "" <docs.txt
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >l.conf <<EOF
server.document-root = "$d/www"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$d/l.log"
EOF
"$LIGHTTPD" -D -f l.conf &
pid=$!
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; do sleep 0.1; done
# The token counts differ from the states' (fake tokens): the warnings are expected.
ss-retrieve add -q --index local.db docs.tokens www/s.states 2>/dev/null
ss-retrieve add -q --index http.db --state-url "www/s.states=http://127.0.0.1:$port/s.states" docs.tokens \
	www/s.states 2>/dev/null

q() { # DB OUT: one query, its wall time in seconds on stdout
	t0=$(now)
	ss-retrieve query -q --index "$1" -k "$N_DOCS" --query common -o "$2"
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
q local.db l.states >/dev/null # warm the page cache
q http.db h.states >/dev/null
cmp l.states h.states || { echo "http: the HTTP query's output differs from the local one"; exit 1; }
: >local.t
: >http.t
i=0
while [ $i -lt "$ROUNDS" ]; do
	q local.db l.states >>local.t
	q http.db h.states >>http.t
	i=$((i + 1))
done
yes common | head -n "$ROUNDS" >batch
mkdir lo ho
t0=$(now)
ss-retrieve query -q --index local.db -k "$N_DOCS" --out-dir lo <batch
t1=$(now)
ss-retrieve query -q --index http.db -k "$N_DOCS" --out-dir ho <batch
t2=$(now)
bytes=$(stat -c %s l.states)
stat_ms() { sort -g "$1" | awk '{ v[NR] = $1 } END { printf "%.1f %.1f", v[1] * 1e3, v[int((NR + 1) / 2)] * 1e3 }'; }
set -- $(stat_ms local.t) $(stat_ms http.t)
printf '%d states of the 130m shape in %s, %.1f MB a query; %d rounds\n' "$N_DOCS" "$DTYPE" \
	"$(awk -v b="$bytes" "BEGIN { print b / 1e6 }")" "$ROUNDS"
printf '%-34s %10s %10s %8s\n' "" local_ms http_ms ratio
awk -v lmin="$1" -v lmed="$2" -v hmin="$3" -v hmed="$4" 'BEGIN {
	printf "%-34s %10.1f %10.1f %8.2f\n", "one query a process, min", lmin, hmin, hmin / lmin
	printf "%-34s %10.1f %10.1f %8.2f\n", "one query a process, median", lmed, hmed, hmed / lmed }'
awk -v t0="$t0" -v t1="$t1" -v t2="$t2" -v r="$ROUNDS" 'BEGIN {
	printf "%-34s %10.1f %10.1f %8.2f\n", "batch (keep-alive), per query", (t1 - t0) * 1e3 / r, (t2 - t1) * 1e3 / r,
		(t2 - t1) / (t1 - t0) }'
