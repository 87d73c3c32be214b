# Counts agree in number: composing one state says "1 state", indexing one document "1 document".
printf 'one line\n' > one.txt
ss-tokenize one.txt -o one.tok
ss-encode -q --model "$SS_FIXTURES/golden/models/t1-hf" one.tok -o one.st
ss-compose -v one.st -o /dev/null
ss-retrieve build -v --index one.db one.tok one.st
