# JSONL on standard input is detected from its content (the first non-blank line is a JSON
# object with a "text" string), said with -v, and read as JSONL: ids from "id", else stdin:LINE.
printf '\n{"id":"a","text":"hello world"}\n{"text":"second"}\n' | ss-tokenize -v --ids -o /dev/null &&
printf '\n{"id":"a","text":"hello world"}\n{"text":"second"}\n' | ss-tokenize -q | ss-cat |
	sed 's/.*"id":"\([^"]*\)".*"text":"\([^"]*\)".*/\1 \2/'
