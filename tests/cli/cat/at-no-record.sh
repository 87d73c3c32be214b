# --at an offset where no record starts: exit 1, naming the offset.
ss-cat --at 3 "$SS_TOP/formats/golden/t1-c2.tokens"
