# Standard input when no file is named: one JSON line per record.
ss-cat <"$SS_TOP/formats/golden/t1-c2.tokens"
