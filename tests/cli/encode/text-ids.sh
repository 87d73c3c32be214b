# Ids of text lines name the file as given on the command line (relative stays relative, "./"
# and ".." kept), in ss-encode --text as in ss-tokenize; and with several files named, a file of
# several lines draws one warning that says how to make one document per file.
mkdir sub && printf 'one\ntwo\n' > sub/a.txt && printf 'three\n' > b.txt
cd sub
ss-encode --model "$SS_FIXTURES/golden/models/t1-hf" --text ./a.txt ../b.txt | ss-cat --meta |
	sed 's/.*"id":"\([^"]*\)".*/\1/'
ss-tokenize -q ./a.txt ../b.txt | ss-cat | sed 's/.*"id":"\([^"]*\)".*/\1/'
