# --stats: one line per format and dtype (records, bytes stored and compressed), then totals
# over every file; stored bytes are the records' decompressed sizes, exact.
g="$SS_TOP/formats/golden/t1-c2.states"
ss-cat --stats "$g" "$g"
