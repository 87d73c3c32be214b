# Text that begins with '{' but whose first line is no JSONL document is read as plain text,
# with a warning that names --jsonl.
printf '{not json}\nsecond line\n' | ss-tokenize | ss-cat | sed 's/.*"id":"\([^"]*\)".*/\1/'
