# Every man page renders without a groff warning (-ww: all of them; an escape such as "\n'"
# that reads a number register, a bad macro or font), without a complaint from man -l, and
# without a roff escape leaking into the text as a reader sees it ("\\e" where "\\" was meant).
# Run by tests/run.
set -u
command -v groff >/dev/null || { echo "groff is needed"; exit 1; }
fails=0
for m in "$SS_TOP"/man/*.1 "$SS_TOP"/man/*.5; do
	w=$(groff -ww -z -man "$m" 2>&1)
	[ -z "$w" ] || { echo "FAIL: $m: groff warns: $w"; fails=$((fails + 1)); }
	w=$(MANWIDTH=80 man -l "$m" 2>&1 >/dev/null)
	[ -z "$w" ] || { echo "FAIL: $m: man -l says: $w"; fails=$((fails + 1)); }
	w=$(MANWIDTH=1000 MAN_KEEP_FORMATTING= man -l "$m" 2>/dev/null | grep -n '\\e')
	[ -z "$w" ] || { echo "FAIL: $m: an escape shows in the rendered text: $w"; fails=$((fails + 1)); }
done
[ "$fails" -eq 0 ]
