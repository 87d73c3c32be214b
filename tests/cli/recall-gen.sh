#!/bin/sh
# gen/mkrecall (formats/recall.md): the same arguments give the same bytes and another seed other
# bytes; a corpus key names one document; each query's gold document holds its key's line, first
# among K distinct chunks, no other chunk holding the key; each pretraining sequence's queries
# repeat its earlier lines; the tokenizer loads and reads "Vera Rossi: 7297\n" as 6 tokens;
# usage errors exit 2 with one line. Run by tests/run from the repo root (SS_TOP, PATH with
# build/bin).
set -eu
LC_ALL=C; export LC_ALL
mk=$SS_TOP/${SS_BUILD:-build}/gen/mkrecall
[ -x "$mk" ] || { echo "skipped: no $mk (run make)"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }
# usage CMD...: exits 2 with one line on stderr that names $want
usage() {
	set +e; "$mk" "$@" >out 2>err; rc=$?; set -e
	[ "$rc" -eq 2 ] || fail "mkrecall $*: exit $rc, expected 2"
	[ "$(wc -l <err)" -eq 1 ] || fail "mkrecall $*: stderr is not one line: $(cat err)"
	grep -q -- "$want" err || fail "mkrecall $*: stderr does not name $want: $(cat err)"
	[ ! -s out ] || fail "mkrecall $*: wrote to stdout"
}

"$mk" --help >out && grep -q '^usage: mkrecall' out || fail "--help"
"$mk" queries --help >out && grep -q -- '--query-seed' out || fail "queries --help"

# Tokenizer: GPT-2's byte alphabet as ids 0..255, then the 300 added tokens in their order.
"$mk" tokenizer -o tok.json
python3 - <<'PY' || fail "tokenizer.json"
import json
t = json.load(open("tok.json"))
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
want = {chr(c): b for b, c in zip(bs, cs)}
m = t["model"]
assert m["type"] == "BPE" and m["merges"] == [] and m["vocab"] == want, "byte vocab"
assert t["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True}, t["pre_tokenizer"]
assert t["decoder"]["type"] == "ByteLevel" and t["normalizer"] == {"type": "NFC"}
a = t["added_tokens"]
assert [x["id"] for x in a] == list(range(256, 556)), "added ids"
c = [x["content"] for x in a]
assert (c[0], c[49], c[50], c[99]) == ("Ada", "Zoe", " Abbott", " Ferreira"), c[:100]
assert c[100:200] == [" %02d" % i for i in range(100)] and c[200:] == ["%02d" % i for i in range(100)]
assert len(set(c[:100])) == 100 and all(n[0].isupper() and n.isalpha() for n in c[:50])
assert all(not x[f] for x in a for f in ("special", "normalized", "lstrip", "rstrip", "single_word"))
PY
printf 'Vera Rossi: 7297\n' >vr.txt
[ "$(ss-tokenize --whole --ids -t tok.json vr.txt)" = "302 337 58 428 553 10" ] ||
	fail "Vera Rossi: $(ss-tokenize --whole --ids -t tok.json vr.txt), expected [Vera][ Rossi][:][ 72][97][\\n]"
ss-tokenize -q --whole -t tok.json -o vr.tok vr.txt
ss-cat vr.tok | grep -q '"n_tokens":6,.*"text":"Vera Rossi: 7297\\n"' || fail "ss-cat: $(ss-cat vr.tok)"
ss-tokenize --decode --whole -t tok.json -o vr.dec vr.tok
cmp vr.txt vr.dec || fail "Vera Rossi does not decode back"

# Determinism: the same arguments, the same bytes (stdout or -o); another seed, other bytes.
for f in phonebook ruler; do
	C="--docs 250 --pairs 10 --flavour $f"
	"$mk" corpus --seed 5 $C >c1.$f
	"$mk" corpus --seed 5 $C -o c2.$f
	cmp c1.$f c2.$f || fail "$f corpus: two runs differ"
	"$mk" corpus --seed 6 $C >c3.$f
	cmp -s c1.$f c3.$f && fail "$f corpus: seeds 5 and 6 give the same bytes"
	Q="--seed 5 $C --k 7 --queries 300"
	"$mk" queries $Q >q1.$f
	"$mk" queries $Q -o q2.$f
	cmp q1.$f q2.$f || fail "$f queries: two runs differ"
	"$mk" queries $Q --query-seed 6 >q3.$f
	cmp q1.$f q3.$f || fail "$f queries: the default --query-seed is not --seed + 1"
	"$mk" queries $Q --query-seed 9 >q4.$f
	cmp -s q1.$f q4.$f && fail "$f queries: --query-seed 9 gives the bytes of 6"
	T="--seqs 60 --pairs 4 --max-docs 5 --repeats 6 --flavour $f"
	"$mk" train --seed 5 $T >t1.$f
	"$mk" train --seed 5 $T -o t2.$f
	cmp t1.$f t2.$f || fail "$f train: two runs differ"
	"$mk" train --seed 6 $T >t3.$f
	cmp -s t1.$f t3.$f && fail "$f train: seeds 5 and 6 give the same bytes"
done
ls | grep -q tmp && fail "temporary files left: $(ls)"

# The contents: 250 x 10 keys use the whole key space, each key in one document; queries and
# sequences as formats/recall.md says.
python3 - <<'PY' || fail "corpus, queries or train contents"
import json, re
PAT = {"phonebook": (r"([A-Z][a-z]+ [A-Z][a-z]+): (\d{4})\n", 0, 9999),
       "ruler": (r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d{7})\.\n",
                 1000000, 9999999)}
def lines(text, pat):
    out = []
    while text:
        m = re.match(pat, text)
        assert m, "bad line: %r" % text[:80]
        out.append(m.groups()); text = text[m.end():]
    return out
for f, (pat, lo, hi) in PAT.items():
    docs = [json.loads(l) for l in open("c1." + f)]
    assert [x["id"] for x in docs] == ["d%05d" % i for i in range(250)], f + " ids"
    where, val = {}, {}
    for x in docs:
        kv = lines(x["text"], pat)
        assert len(kv) == 10, (f, x["id"], len(kv))
        for k, v in kv:
            assert k not in where, "%s: key %s in %s and %s" % (f, k, where[k], x["id"])
            assert lo <= int(v) <= hi, v
            where[k], val[k] = x["id"], v
    assert len(where) == 2500
    vals = [int(v) for v in val.values()]
    assert min(vals) < lo + (hi - lo) // 10 and max(vals) > hi - (hi - lo) // 10, "values not spread"
    text = {x["id"]: x["text"] for x in docs}
    qs = [json.loads(l) for l in open("q1." + f)]
    assert [q["id"] for q in qs] == ["q%05d" % i for i in range(300)]
    golds, pos = set(), set()
    for q in qs:
        assert list(q) == ["id", "key", "query", "continuation", "chunks", "gold", "gold_pos"], list(q)
        k, c, ch = q["key"], q["continuation"], q["chunks"]
        assert len(ch) == 7 and len(set(ch)) == 7 and ch[0] == q["gold"], q
        assert all(x in text for x in ch), q
        assert 0 <= q["gold_pos"] < 7, q
        assert where[k] == q["gold"] and c == " " + val[k], q
        if f == "phonebook":
            assert q["query"] == "\n" + k + ":", q
            assert ("\n" + text[q["gold"]]).count(q["query"] + c + "\n") == 1, q
        else:
            assert q["query"] == ("\nWhat is the special magic number for %s mentioned in the provided "
                                  "text? The special magic number for %s mentioned in the provided "
                                  "text is" % (k, k)), q
            assert "for %s is:%s.\n" % (k, c) in text[q["gold"]], q
        assert not any(k + ":" in text[x] or k + " is:" in text[x] for x in ch[1:]), q
        golds.add(q["gold"]); pos.add(q["gold_pos"])
    assert len(golds) > 100 and pos == set(range(7)), (len(golds), pos)
    seqs = [json.loads(l) for l in open("t1." + f)]
    assert [s["id"] for s in seqs] == ["s%05d" % i for i in range(60)]
    sizes = set()
    for s in seqs:
        kv = lines(s["text"].replace("\n\n", "\n", 1), pat)
        n = len(kv) - 6
        assert n % 4 == 0 and 1 <= n // 4 <= 5, (s["id"], len(kv))
        sizes.add(n // 4)
        assert len({k for k, v in kv[:n]}) == n, s["id"] + ": keys repeat among the lines"
        assert all(x in kv[:n] for x in kv[n:]), s["id"] + ": a query line is not an earlier line"
        assert len(set(kv[n:])) > 1 or n == 4, s["id"] + ": the queries are one line"
        # a blank line between the documents' lines and the queries, nowhere else
        assert s["text"].count("\n\n") == 1 and s["text"].split("\n\n")[1].count("\n") == 6, s["id"]
    assert sizes == {1, 2, 3, 4, 5}, sizes
PY

# Usage errors: exit 2, one line naming the option, no output file.
want='--docs 300 --pairs 9'; usage corpus --docs 300 --pairs 9 -o bad.jsonl
want='--docs 300 --pairs 9'; usage queries --docs 300 --pairs 9 --k 3 --queries 1
want='--k 6 --docs 5'; usage queries --docs 5 --pairs 2 --k 6 --queries 1
want='--max-docs'; usage train --seqs 1 --pairs 26 --max-docs 100 --repeats 1
want='--flavour'; usage corpus --docs 2 --pairs 2 --flavour haystack
want='--docs'; usage corpus --docs 2x --pairs 2
want='--seed'; usage corpus --docs 2 --pairs 2 --seed -1
want='--pairs'; usage corpus --docs 2 --pairs
want='--pairs'; usage corpus --docs 2
want='--k'; usage corpus --docs 2 --pairs 2 --k 1
want='--bogus'; usage train --bogus 1
want='nope'; usage nope
want='subcommand'; usage
[ ! -e bad.jsonl ] || fail "a refused run left bad.jsonl"
set +e; "$mk" corpus --docs 1 --pairs 1 -o nodir/x.jsonl 2>err; rc=$?; set -e
[ "$rc" -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q 'nodir/x.jsonl' err ||
	fail "-o into a missing directory: exit $rc, $(cat err)"
echo ok
