# pipelines/records.sh — shell functions over the records of a stream (sourced by demo.sh and
# demo-recall.sh): where each record lies, and a copy of some of them, whole, in any order.
# offsets STREAM: "ID<TAB>START<TAB>END" per record (byte range in STREAM).
offsets() {
	ss-cat --meta "$1" | sed -n 's/^{"offset":\([0-9]*\),.*"id":"\([^"]*\)".*/\2\t\1/p' |
		awk -F '\t' -v size="$(wc -c <"$1")" '
			NR > 1 { print id "\t" start "\t" $2 } { id = $1; start = $2 }
			END { if (NR) print id "\t" start "\t" size }'
}
# copy STREAM START END: the bytes [START, END) of STREAM (whole records) to stdout.
copy() { tail -c +"$(($2 + 1))" "$1" | head -c "$(($3 - $2))"; }
# copy_ids STREAM OFFSETS: the records of STREAM whose ids are read from stdin, in that order
# (OFFSETS: offsets STREAM).
copy_ids() {
	while IFS= read -r id; do
		awk -F '\t' -v id="$id" '$1 == id { print $2, $3; exit }' "$2" | {
			read -r a b && copy "$1" "$a" "$b"; }
	done
}
