# A stream cut inside its first record: the file, the record and its offset, exit 1.
head -c 100 "$SS_TOP/formats/golden/t1-c2.states" >cut.states
ss-cat cut.states
