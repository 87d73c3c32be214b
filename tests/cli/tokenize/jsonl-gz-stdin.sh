# Compressed JSONL on standard input (no name to go by) is detected from its content too.
printf '{"id":"a","text":"hello world"}\n' | gzip -c | ss-tokenize | ss-cat |
	sed 's/.*"id":"\([^"]*\)".*"text":"\([^"]*\)".*/\1 \2/'
