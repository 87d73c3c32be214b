# --text reads JSONL as plain text: one document per line, the JSON syntax included.
printf '{"id":"a","text":"hello"}\n' | ss-tokenize --text | ss-cat | sed 's/.*"id":"\([^"]*\)".*/\1/'
