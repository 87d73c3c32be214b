# Batch queries given as plain lines: the error shows the JSON line wanted.
printf 'Boulter is an actor\nDu Fu was a poet\n' > docs.txt
ss-tokenize docs.txt -o docs.tokens
ss-encode --model "$SS_FIXTURES/golden/models/t1-hf" docs.tokens -o docs.states
ss-retrieve build -q --index idx.db docs.tokens docs.states
printf 'who is Boulter\n' | ss-retrieve query --index idx.db --ids
