# -n takes a count: a usage error names the option, exit 2.
ss-cat -n x "$SS_TOP/formats/golden/t1-c2.tokens"
