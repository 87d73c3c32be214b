# A directory given to ss-encode: the error names the tool that reads one.
mkdir docs && printf 'a\n' > docs/a.txt
ss-encode --model "$SS_FIXTURES/golden/models/t1-hf" --text docs
