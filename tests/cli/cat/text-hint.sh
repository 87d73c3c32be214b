# Text given where a stream is read: the error says what makes a stream of it.
printf '{"text": "a JSONL file"}\n' > docs.jsonl
ss-cat docs.jsonl
