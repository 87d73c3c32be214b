#!/bin/sh
# What ss-retrieve prints of ids, paths and texts it did not choose (issue 32 item 11): plain
# output (list, show, query --ids) escapes backslash, tab, newline and CR as \\ \t \n \r and
# every other control character (ESC, DEL, C1) and every byte that is not UTF-8 as \xHH, so no
# value forges a line or reaches the terminal as a control (show's text keeps its tabs and
# newlines); JSON output is valid UTF-8 (a bad byte becomes U+FFFD, as in ss-cat) with control
# characters (C0, DEL, C1) as \u00XX. An id with a newline is made by editing the index
# (python3's sqlite3 module; skipped without it).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
python3 -c 'import sqlite3' 2>/dev/null || { echo "no python3 with its sqlite3 module"; exit 77; }

# ids: ESC and a CSI sequence, a byte that is not UTF-8 (Latin-1 e-acute), C1 CSI (U+009B), DEL,
# a backslash; a text with ESC, a tab and a CR; a state file whose name holds a newline
printf 'esc\033[31m\tthe fox\033]0;pwned\007 runs\tfar\r\ncaf\351\tfox in a cafe\nc1\302\233x\tfox c1\nd\177\\\tfox del\n' >A.txt
nl=$(printf '\nx'); nl=${nl%x}
st="s${nl}file: evil.states"
"$mkdb" A.tokens "$st" <A.txt || exit 1
expect 0 ss-retrieve build --index i.db A.tokens "$st"
python3 - i.db <<'PY' || fail "editing i.db"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE docs SET id = 'a\nfile: /etc/shadow' WHERE id = 'd\x7f\\'")
c.commit()
PY
raw() { # FILE: fails when FILE holds a control byte other than tab and newline (ESC, CR, C1...)
	python3 - "$1" <<'PY' || fail "$1 holds raw control bytes"
import re, sys
b = open(sys.argv[1], 'rb').read()
sys.exit(1 if re.search(rb'[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]', b) else 0)
PY
}
json_ok() { # FILE: every line valid UTF-8 JSON
	python3 - "$1" <<'PY' || fail "$1 is not valid UTF-8 JSON lines"
import json, sys
for line in open(sys.argv[1], 'rb'):
    json.loads(line.decode('utf-8', 'strict'))
PY
}

# --- list: one line per document, values escaped
expect 0 ss-retrieve list --index i.db
[ "$(wc -l <out)" -eq 4 ] || fail "list: $(wc -l <out) lines for 4 documents"
raw out
has out '^a\\nfile: /etc/shadow	'
has out '^esc\\x1b\[31m	'
has out '^caf\\xe9	'
has out '^c1\\xc2\\x9bx	'
has out '	[^	]*/s\\nfile: evil\.states	'
expect 0 ss-retrieve list --index i.db --json
json_ok out
has out "\"id\":\"caf$(printf '\357\277\275')\""
has out '"id":"c1\\u009bx"'
has out '"id":"esc\\u001b\[31m"'
has out '"id":"a\\nfile: /etc/shadow"'

# --- show: no forged line; the text keeps its layout, not its controls
expect 0 ss-retrieve show --index i.db "$(printf 'a\nfile: /etc/shadow')" "$(printf 'esc\033[31m')"
raw out
grep -q '^file: /etc/shadow' out && fail "show: an id forged a file line"
grep -q '^file: evil' out && fail "show: a path forged a file line"
has out '^id: a\\nfile: /etc/shadow$'
has out '^file: .*/s\\nfile: evil\.states$'
has out '^the fox\\x1b\]0;pwned\\x07 runs	far\\r$'
expect 0 ss-retrieve show --index i.db --json "$(printf 'caf\351')" "$(printf 'esc\033[31m')"
json_ok out
has out '"text":"the fox\\u001b\]0;pwned\\u0007 runs\\tfar\\r"'

# --- query --ids, plain and JSON
expect 0 ss-retrieve query --index i.db --query fox -k 4 --ids --text
[ "$(wc -l <out)" -eq 4 ] || fail "query --ids: $(wc -l <out) lines for 4 hits"
raw out
has out '	caf\\xe9	'
has out '	the fox\\x1b\]0;pwned\\x07 runs\\tfar\\r$'
expect 0 ss-retrieve query --index i.db --query fox -k 4 --ids --text --json
json_ok out
has out '"id":"c1\\u009bx"'
done_checks
