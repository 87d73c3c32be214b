#!/bin/sh
# The Python reader (python/ss_states.py, its CLI) beside the C reader (ss-cat, which decodes
# every record fully) on the same streams, interleaved round by round (C, Python, C, ...): wall
# time and peak RSS (GNU time's %M), min and median over ROUNDS (3). Streams: the golden set
# (../shared/golden: the five texts of t1 and t2, encoded by their models in f32, f16, bf16 and
# q8: 8 files, read by one process each way), 14 random mamba2-130m f32 states (271 MB
# decompressed) and 8 in f16 (byte-shuffled). The issue 48 goals: Python within 2x C's peak
# memory on a stream, within 3x its time on the golden set. Prints figures, never fails on them.
# Usage: bench/pyreader.sh [ROUNDS]   (SS_BUILD, SS_SHARED as tests/run)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
B=$top/${SS_BUILD:-build}
G=${SS_SHARED:-$top/../shared}/golden
R=${1:-3}
py=
for p in python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null && "$p" -c 'import zstandard, msgpack, numpy' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "pyreader: not measured (no python3 with zstandard, msgpack and numpy)"; exit 0; }
[ -x /usr/bin/time ] || { echo "pyreader: not measured (no /usr/bin/time for peak RSS)"; exit 0; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
golden=
if [ -d "$G/models/t1-hf" ]; then
	for t in t1 t2; do
		for c in c1 c2 c3 c4 docB; do "$B/bin/ss-tokenize" -q --whole "$G/$t/$c/text.txt"; done >"$d/$t.tok"
		for dt in f32 f16 bf16 q8; do
			"$B/bin/ss-encode" -q --model "$G/models/$t-hf" --state-dtype $dt "$d/$t.tok" >"$d/$t.$dt"
			golden="$golden $d/$t.$dt"
		done
	done
else
	echo "golden set: not measured (no $G)"
fi
"$B/gen/mkstates" --shape 130m --dtype f32 14 "$d/130m.f32"
"$B/gen/mkstates" --shape 130m --dtype f16 8 "$d/130m.f16"

# one FILES: "min-s median-s min-MB median-MB" of ROUNDS runs of C and of Python, interleaved
one() {
	: >"$d/c" && : >"$d/p"
	i=0
	while [ $i -lt "$R" ]; do
		/usr/bin/time -a -o "$d/c" -f '%e %M' "$B/bin/ss-cat" "$@" >/dev/null
		/usr/bin/time -a -o "$d/p" -f '%e %M' "$py" "$top/python/ss_states.py" "$@" >/dev/null
		i=$((i + 1))
	done
	for w in c p; do
		sort -n "$d/$w" | awk '{t[NR]=$1} END {printf "%s %s ", t[1], t[int((NR+1)/2)]}'
		sort -n -k2 "$d/$w" | awk '{m[NR]=$2} END {printf "%.0f %.0f ", m[1]/1024, m[int((NR+1)/2)]/1024}'
	done
	echo
}
show() { # name figures...
	echo "$@" | awk '{t = $2 > 0 ? sprintf("%.2fx", $6 / $2) : "n/a (C under 10 ms)"
		printf "%-24s C %6.2f s (median %5.2f) %4d MB | Python %6.2f s (median %5.2f) %4d MB | time %s, memory %.2fx\n",
		$1, $2, $3, $5, $6, $7, $9, t, $9 / $5}'
}
printf "pyreader: ss-cat vs python/ss_states.py, $R rounds interleaved, min (median) wall time, median peak RSS;\nratios: Python's min time over C's, median peak over median peak\n"
[ -z "$golden" ] || show golden-set-8-files $(one $golden)
show 130m-f32-x14-271MB $(one "$d/130m.f32")
show 130m-f16-x8-shuffled $(one "$d/130m.f16")
# The golden set's Python figure above is mostly the interpreter and numpy starting; in process:
[ -z "$golden" ] || SS_PYDIR=$top/python "$py" - $golden <<'PY'
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, __import__("os").environ["SS_PYDIR"])
import ss_states
t1 = time.perf_counter()
best = min((lambda t: (sum(1 for f in sys.argv[1:] for _ in ss_states._typed(f, None, ss_states.MAX_RECORD)),
                       time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(5))
print("golden-set in process: imports %.0f ms, reading the 8 files %.1f ms (best of 5)" % ((t1 - t0) * 1e3, best * 1e3))
PY
