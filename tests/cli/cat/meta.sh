# --meta: the metadata of a state record, its arrays summarized.
ss-cat --meta -n 1 "$SS_TOP/formats/golden/t1-c2.states"
