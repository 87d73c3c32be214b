# Named text files stay one document per line (as ss-encode --text), but with several named
# (as dir/*.txt gives) and a file of several lines, one warning says so and names --whole.
printf 'a\nb\nc\n' > x.txt
printf 'd\ne\n' > y.txt
ss-tokenize --ids x.txt y.txt > ids && wc -l < ids
ss-tokenize --whole --ids x.txt y.txt | wc -l
ss-tokenize --ids x.txt >/dev/null
