# -n N stops after N records (the golden stream has 3).
ss-cat -n 1 "$SS_TOP/formats/golden/t1-c2.states" | wc -l
ss-cat "$SS_TOP/formats/golden/t1-c2.states" | wc -l
