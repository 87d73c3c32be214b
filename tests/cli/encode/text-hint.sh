# A text file given to ss-encode where a token stream is read: the error says how to fix it.
printf 'Some text, not a stream.\n' > README.md
ss-encode --model "$SS_FIXTURES/golden/models/t1-hf" README.md
