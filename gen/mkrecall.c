/*
 * mkrecall — seeded key-value recall data: a corpus of documents of
 * "KEY: VALUE" lines, queries that ask for one key's value with the
 * documents to compose (the one holding the key first), pretraining
 * sequences, and the tokenizer of the recall model. Formats, alphabets and
 * the determinism guarantee: formats/recall.md.
 *
 *   build/gen/mkrecall tokenizer [-o FILE]
 *   build/gen/mkrecall corpus  --docs N --pairs P [--seed S] [--flavour F] [-o FILE]
 *   build/gen/mkrecall queries --docs N --pairs P --k K --queries Q [--seed S]
 *       [--query-seed T] [--flavour F] [-o FILE]
 *   build/gen/mkrecall train --seqs N --pairs P --max-docs D --repeats R [--seed S]
 *       [--flavour F] [-o FILE]
 *
 * Every output is a function of the arguments alone (ss_rng: xoshiro256**
 * seeded by splitmix64; uniform integers by rejection, never a modulo bias
 * or a float), so the same arguments give the same bytes on every machine.
 * ref: RULER (Hsieh et al. 2024) niah_multikey for the ruler flavour's
 *      template; HF tokenizers' ByteLevel / GPT-2 bytes_to_unicode for the
 *      tokenizer.
 */
#include "ss.h"

#include <cJSON.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_KEYS 2500 /* 50 x 50: both flavours */
#define KEY_MAX 32 /* longer than any key ("Rafael Kowalski", "curious-notebook") */
#define LINE_MAX_LEN 256 /* longer than any line or query either flavour writes */

/* phonebook keys: "FIRST[k / 50] LAST[k % 50]". */
static const char *const FIRST[] = {
	"Ada", "Alan", "Alice", "Amir", "Anna", "Boris", "Carla", "Chen", "Clara", "Dario",
	"Diana", "Elena", "Emil", "Erik", "Eva", "Farah", "Felix", "Gina", "Hana", "Hugo",
	"Ines", "Ivan", "Jonas", "Julia", "Karl", "Kenji", "Lara", "Leo", "Lina", "Luca",
	"Maya", "Mila", "Nadia", "Nils", "Nora", "Omar", "Otto", "Paula", "Priya", "Rafael",
	"Rosa", "Sami", "Sara", "Tariq", "Tomas", "Uma", "Vera", "Viktor", "Yara", "Zoe",
};
static const char *const LAST[] = {
	"Abbott", "Baker", "Becker", "Costa", "Cruz", "Dalton", "Ellis", "Fischer", "Garcia",
	"Grant", "Hansen", "Hughes", "Ibrahim", "Jensen", "Kaur", "Keller", "Khan", "Kowalski",
	"Larsen", "Lopez", "Meyer", "Moreau", "Nakamura", "Novak", "Okafor", "Olsen", "Park",
	"Patel", "Petrov", "Quinn", "Reyes", "Rossi", "Sato", "Schmidt", "Silva", "Sousa",
	"Tanaka", "Torres", "Ueda", "Vargas", "Walsh", "Weber", "Wong", "Yilmaz", "Young",
	"Zhang", "Ziegler", "Brandt", "Dumont", "Ferreira",
};
/* ruler keys: "ADJ[k / 50]-NOUN[k % 50]", like RULER's adjective-noun
 * words keys; common lowercase words, none a prefix-with-hyphen of another. */
static const char *const ADJ[] = {
	"able", "amber", "ancient", "brave", "bright", "calm", "clever", "cold", "crisp",
	"curious", "dark", "eager", "early", "fancy", "fierce", "gentle", "giant", "golden",
	"green", "happy", "hidden", "humble", "icy", "jolly", "kind", "lazy", "little",
	"lively", "lucky", "mellow", "merry", "misty", "noble", "odd", "pale", "polite",
	"proud", "quick", "quiet", "rapid", "rusty", "shiny", "silent", "sleepy", "smooth",
	"steady", "sunny", "tall", "tender", "wild",
};
static const char *const NOUN[] = {
	"apple", "anchor", "badger", "basket", "beacon", "bottle", "bridge", "candle",
	"castle", "cloud", "comet", "copper", "desert", "dolphin", "engine", "falcon",
	"feather", "forest", "garden", "guitar", "harbor", "helmet", "island", "jacket",
	"kettle", "ladder", "lantern", "meadow", "mirror", "notebook", "orchard", "otter",
	"pebble", "pepper", "pillow", "pumpkin", "rabbit", "river", "saddle", "shadow",
	"spider", "teapot", "thunder", "tiger", "tunnel", "valley", "violin", "walnut",
	"window", "zebra",
};
#define COUNT(a) (sizeof(a) / sizeof *(a))
_Static_assert(COUNT(FIRST) == 50 && COUNT(LAST) == 50, "phonebook lists: 50 names each");
_Static_assert(COUNT(ADJ) == 50 && COUNT(NOUN) == 50, "ruler lists: 50 words each");

enum { PHONEBOOK, RULER };

/* ---------------------------------------------------------------- options */

enum { TOKENIZER = 1, CORPUS = 2, QUERIES = 4, TRAIN = 8 };

typedef struct {
	uint64_t seed, query_seed;
	int has_query_seed;
	long long docs, pairs, k, queries, seqs, max_docs, repeats;
	int flavour;
	const char *out;
} opts;

static void usage(FILE *f)
{
	fputs("usage: mkrecall tokenizer [-o FILE]\n"
	      "       mkrecall corpus  --docs N --pairs P [--seed S] [--flavour F] [-o FILE]\n"
	      "       mkrecall queries --docs N --pairs P --k K --queries Q [--seed S]\n"
	      "                        [--query-seed T] [--flavour F] [-o FILE]\n"
	      "       mkrecall train   --seqs N --pairs P --max-docs D --repeats R [--seed S]\n"
	      "                        [--flavour F] [-o FILE]\n"
	      "Seeded key-value recall data as JSON lines (formats/recall.md); the same\n"
	      "arguments give the same bytes.\n\n"
	      "  tokenizer        the recall model's tokenizer.json: byte-level BPE, 256 byte\n"
	      "                   tokens, no merges, 300 added tokens (names, \" 00\"..\" 99\",\n"
	      "                   \"00\"..\"99\"), vocabulary 556\n"
	      "  corpus           N documents of P \"KEY: VALUE\" lines, {\"id\", \"text\"}; a key\n"
	      "                   appears in one document only (N*P <= 2500)\n"
	      "  queries          Q queries over the corpus of the same --seed/--docs/--pairs/\n"
	      "                   --flavour: {\"id\", \"key\", \"query\", \"continuation\", \"chunks\",\n"
	      "                   \"gold\", \"gold_pos\"}, K chunks, the gold document first\n"
	      "  train            N sequences {\"id\", \"text\"}: d*P lines (d uniform in 1..D,\n"
	      "                   distinct keys), a blank line, then R copies of lines drawn\n"
	      "                   among them (train with ss-train --loss-after $'\\n\\n')\n\n"
	      "  --seed S         the data's seed (default 1)\n"
	      "  --query-seed T   queries: the seed of the queries drawn over the corpus\n"
	      "                   (default S+1)\n"
	      "  --flavour F      phonebook (\"Ada Abbott: 0042\", default) or ruler (RULER's\n"
	      "                   niah_multikey: \"One of the special magic numbers for\n"
	      "                   able-apple is: 1234567.\")\n"
	      "  -o FILE          write FILE whole (temporary file + rename); default stdout\n"
	      "  -h, --help       this help\n",
	      f);
}

static int bad(const char *opt, const char *what)
{
	fprintf(stderr, "mkrecall: %s: %s (mkrecall --help)\n", opt, what);
	return 2;
}

/* Parses v as a decimal integer in [lo, hi] into *out: digits only (no sign,
 * no space). Returns 0, or prints a usage line naming opt and returns 2. */
static int num(const char *opt, const char *v, unsigned long long lo, unsigned long long hi,
	       unsigned long long *out)
{
	char msg[96], *end;
	snprintf(msg, sizeof msg, "expected an integer in [%llu, %llu]", lo, hi);
	if (!v || *v < '0' || *v > '9')
		return bad(opt, msg);
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (*end || errno || x < lo || x > hi)
		return bad(opt, msg);
	*out = x;
	return 0;
}

/* Fills *o from argv[2..) for subcommand cmd. Returns 0, 1 for --help (printed),
 * or 2 after a one-line usage error on stderr. */
static int parse(opts *o, int cmd, int argc, char **argv)
{
	static const struct {
		const char *name;
		int cmds;
		size_t off; /* a long long field, or SIZE_MAX for the special cases */
		long long lo, hi;
	} tab[] = {
		{"--docs", CORPUS | QUERIES, offsetof(opts, docs), 1, N_KEYS},
		{"--pairs", CORPUS | QUERIES | TRAIN, offsetof(opts, pairs), 1, N_KEYS},
		{"--k", QUERIES, offsetof(opts, k), 1, N_KEYS},
		{"--queries", QUERIES, offsetof(opts, queries), 0, 1000000000},
		{"--seqs", TRAIN, offsetof(opts, seqs), 0, 1000000000},
		{"--max-docs", TRAIN, offsetof(opts, max_docs), 1, N_KEYS},
		{"--repeats", TRAIN, offsetof(opts, repeats), 0, 1000000},
		{"--seed", CORPUS | QUERIES | TRAIN, SIZE_MAX, 0, 0},
		{"--query-seed", QUERIES, SIZE_MAX, 0, 0},
		{"--flavour", CORPUS | QUERIES | TRAIN, SIZE_MAX, 0, 0},
		{"-o", TOKENIZER | CORPUS | QUERIES | TRAIN, SIZE_MAX, 0, 0},
	};
	*o = (opts){ .seed = 1, .docs = -1, .pairs = -1, .k = -1, .queries = -1, .seqs = -1,
		     .max_docs = -1, .repeats = -1, .flavour = PHONEBOOK };
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 1;
		}
		size_t t = 0;
		while (t < COUNT(tab) && (strcmp(a, tab[t].name) || !(tab[t].cmds & cmd)))
			t++;
		if (t == COUNT(tab))
			return bad(a, "unknown option for this subcommand");
		if (!v)
			return bad(a, "missing value");
		i++;
		unsigned long long x;
		if (tab[t].off != SIZE_MAX) {
			if (num(a, v, (unsigned long long)tab[t].lo, (unsigned long long)tab[t].hi, &x))
				return 2;
			*(long long *)((char *)o + tab[t].off) = (long long)x;
		} else if (!strcmp(a, "--seed") || !strcmp(a, "--query-seed")) {
			if (num(a, v, 0, UINT64_MAX, &x))
				return 2;
			if (a[2] == 's') {
				o->seed = x;
			} else {
				o->query_seed = x;
				o->has_query_seed = 1;
			}
		} else if (!strcmp(a, "--flavour")) {
			if (!strcmp(v, "phonebook"))
				o->flavour = PHONEBOOK;
			else if (!strcmp(v, "ruler"))
				o->flavour = RULER;
			else
				return bad(a, "unknown flavour (phonebook, ruler)");
		} else {
			o->out = v;
		}
	}
	for (size_t t = 0; t < COUNT(tab); t++)
		if ((tab[t].cmds & cmd) && tab[t].off != SIZE_MAX &&
		    *(long long *)((char *)o + tab[t].off) < 0)
			return bad(tab[t].name, "required");
	if (!o->has_query_seed)
		o->query_seed = o->seed + 1;
	char what[96];
	if ((cmd & (CORPUS | QUERIES)) && o->docs * o->pairs > N_KEYS) {
		snprintf(what, sizeof what, "--docs %lld --pairs %lld", o->docs, o->pairs);
		return bad(what, "more keys than the 2500 there are");
	}
	if (cmd == QUERIES && o->k > o->docs) {
		snprintf(what, sizeof what, "--k %lld --docs %lld", o->k, o->docs);
		return bad(what, "more chunks than documents");
	}
	if (cmd == TRAIN && o->max_docs * o->pairs > N_KEYS) {
		snprintf(what, sizeof what, "--max-docs %lld --pairs %lld", o->max_docs, o->pairs);
		return bad(what, "more keys than the 2500 there are");
	}
	return 0;
}

/* ------------------------------------------------------------------ data */

static void die(const char *what, const char *msg)
{
	ss_output_abort_all();
	fprintf(stderr, "mkrecall: %s: %s\n", what, msg);
	exit(1);
}

/* Uniform in [0, n), n >= 1: rejection of the 2^64 mod n lowest draws, so
 * that every residue is equally likely. */
static uint64_t below(ss_rng *r, uint64_t n)
{
	uint64_t lim = (0 - n) % n, x;
	do
		x = ss_rng_next(r);
	while (x < lim);
	return x % n;
}

/* Draws a[0..m) as a uniform sample of m distinct elements of a[0..n)
 * without replacement, in random order (a partial Fisher-Yates shuffle). */
static void sample(ss_rng *r, int *a, int n, int m)
{
	for (int j = 0; j < m; j++) {
		int t = j + (int)below(r, (uint64_t)(n - j)), x = a[j];
		a[j] = a[t];
		a[t] = x;
	}
}

static int draw_value(ss_rng *r, int flavour)
{
	return flavour == PHONEBOOK ? (int)below(r, 10000) : 1000000 + (int)below(r, 9000000);
}

static void key_name(char *buf, int flavour, int key)
{
	if (flavour == PHONEBOOK)
		snprintf(buf, KEY_MAX, "%s %s", FIRST[key / 50], LAST[key % 50]);
	else
		snprintf(buf, KEY_MAX, "%s-%s", ADJ[key / 50], NOUN[key % 50]);
}

/* Appends the document line of (key, value) at *p; returns its length. */
static int put_line(char *p, int flavour, int key, int value)
{
	char k[KEY_MAX];
	key_name(k, flavour, key);
	if (flavour == PHONEBOOK)
		return snprintf(p, LINE_MAX_LEN, "%s: %04d\n", k, value);
	return snprintf(p, LINE_MAX_LEN, "One of the special magic numbers for %s is: %d.\n", k,
			value);
}

/* Writes o (and frees it) as one JSON line. */
static void put_json(FILE *f, cJSON *o)
{
	char *s = o ? cJSON_PrintUnformatted(o) : NULL;
	if (!s)
		die("json", "out of memory");
	fputs(s, f);
	fputc('\n', f);
	cJSON_free(s);
	cJSON_Delete(o);
}

static cJSON *record(const char *id_fmt, long long i, const char *text)
{
	char id[32];
	snprintf(id, sizeof id, id_fmt, i);
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "id", id) ||
	    (text && !cJSON_AddStringToObject(o, "text", text)))
		die("json", "out of memory");
	return o;
}

/* The corpus of (seed, docs, pairs): document i holds keys
 * perm[i*pairs .. (i+1)*pairs) with values val[] at the same places.
 * Draws: a shuffle of all 2500 keys, then the values in order. */
typedef struct {
	int perm[N_KEYS];
	int *val;
} corpus;

static void corpus_make(corpus *c, const opts *o)
{
	ss_rng r;
	ss_rng_seed(&r, o->seed);
	for (int k = 0; k < N_KEYS; k++)
		c->perm[k] = k;
	sample(&r, c->perm, N_KEYS, N_KEYS);
	int n = (int)(o->docs * o->pairs);
	if (!(c->val = malloc((size_t)n * sizeof *c->val)))
		die("corpus", "out of memory");
	for (int j = 0; j < n; j++)
		c->val[j] = draw_value(&r, o->flavour);
}

static void run_corpus(FILE *f, const opts *o)
{
	corpus c;
	corpus_make(&c, o);
	char *text = malloc((size_t)o->pairs * LINE_MAX_LEN + 1);
	if (!text)
		die("corpus", "out of memory");
	for (long long i = 0; i < o->docs; i++) {
		char *p = text;
		*p = 0;
		for (long long j = i * o->pairs; j < (i + 1) * o->pairs; j++)
			p += put_line(p, o->flavour, c.perm[j], c.val[j]);
		put_json(f, record("d%05lld", i, text));
	}
	free(text);
	free(c.val);
}

/* Per query, draws in this order: the gold document, the key's place in it,
 * the k-1 distractors (a sample of the other documents), gold_pos. */
static void run_queries(FILE *f, const opts *o)
{
	corpus c;
	corpus_make(&c, o);
	int nd = (int)o->docs, *others = malloc((size_t)nd * sizeof *others);
	if (!others)
		die("queries", "out of memory");
	ss_rng r;
	ss_rng_seed(&r, o->query_seed);
	for (long long q = 0; q < o->queries; q++) {
		int gold = (int)below(&r, (uint64_t)nd);
		int j = gold * (int)o->pairs + (int)below(&r, (uint64_t)o->pairs);
		for (int d = 0, n = 0; d < nd; d++)
			if (d != gold)
				others[n++] = d;
		sample(&r, others, nd - 1, (int)o->k - 1);
		int gold_pos = (int)below(&r, (uint64_t)o->k);

		char key[KEY_MAX], query[LINE_MAX_LEN], cont[16], id[16];
		key_name(key, o->flavour, c.perm[j]);
		if (o->flavour == PHONEBOOK) {
			snprintf(query, sizeof query, "\n%s:", key);
			snprintf(cont, sizeof cont, " %04d", c.val[j]);
		} else {
			snprintf(query, sizeof query,
				 "\nWhat is the special magic number for %s mentioned in the provided "
				 "text? The special magic number for %s mentioned in the provided text is",
				 key, key);
			snprintf(cont, sizeof cont, " %d", c.val[j]);
		}
		cJSON *rec = record("q%05lld", q, NULL), *chunks = cJSON_CreateArray();
		if (!chunks || !cJSON_AddStringToObject(rec, "key", key) ||
		    !cJSON_AddStringToObject(rec, "query", query) ||
		    !cJSON_AddStringToObject(rec, "continuation", cont))
			die("json", "out of memory");
		for (int t = 0; t < o->k; t++) {
			snprintf(id, sizeof id, "d%05d", t ? others[t - 1] : gold);
			cJSON *s = cJSON_CreateString(id);
			if (!s || !cJSON_AddItemToArray(chunks, s))
				die("json", "out of memory");
		}
		snprintf(id, sizeof id, "d%05d", gold);
		if (!cJSON_AddItemToObject(rec, "chunks", chunks) ||
		    !cJSON_AddStringToObject(rec, "gold", id) ||
		    !cJSON_AddNumberToObject(rec, "gold_pos", gold_pos))
			die("json", "out of memory");
		put_json(f, rec);
	}
	free(others);
	free(c.val);
}

/* Per sequence, draws: d, the d*pairs keys (a sample of all 2500), their
 * values, then the repeats' line indices. */
static void run_train(FILE *f, const opts *o)
{
	int keys[N_KEYS], m_max = (int)(o->max_docs * o->pairs);
	int *val = malloc((size_t)m_max * sizeof *val);
	char *text = malloc((size_t)(m_max + o->repeats) * LINE_MAX_LEN + 1);
	if (!val || !text)
		die("train", "out of memory");
	ss_rng r;
	ss_rng_seed(&r, o->seed);
	for (long long s = 0; s < o->seqs; s++) {
		int m = (int)((1 + (long long)below(&r, (uint64_t)o->max_docs)) * o->pairs);
		for (int k = 0; k < N_KEYS; k++)
			keys[k] = k;
		sample(&r, keys, N_KEYS, m);
		for (int j = 0; j < m; j++)
			val[j] = draw_value(&r, o->flavour);
		size_t len = 0;
		for (int j = 0; j < m; j++)
			len += (size_t)put_line(text + len, o->flavour, keys[j], val[j]);
		if (o->repeats)
			text[len++] = '\n', text[len] = 0; /* a blank line, then the questions */
		for (long long q = 0; q < o->repeats; q++) {
			int j = (int)below(&r, (uint64_t)m);
			len += (size_t)put_line(text + len, o->flavour, keys[j], val[j]);
		}
		put_json(f, record("s%05lld", s, text));
	}
	free(text);
	free(val);
}

/* tokenizer.json: GPT-2's bytes_to_unicode alphabet as ids 0..255 (bytes
 * '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for themselves, the others for
 * U+0100.. in byte order), no merges, then the added tokens. */
static void run_tokenizer(FILE *f)
{
	cJSON *root = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
	cJSON *added = cJSON_CreateArray();
	if (!root || !vocab || !added)
		die("json", "out of memory");
	int extra = 0;
	for (int b = 0; b < 256; b++) {
		int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
		unsigned cp = keep ? (unsigned)b : 256u + (unsigned)extra++;
		char u[3] = { 0 };
		if (cp < 0x80) {
			u[0] = (char)cp;
		} else {
			u[0] = (char)(0xC0 | cp >> 6);
			u[1] = (char)(0x80 | (cp & 0x3F));
		}
		if (!cJSON_AddNumberToObject(vocab, u, b))
			die("json", "out of memory");
	}
	int id = 256;
	for (int i = 0; i < 300; i++) {
		char c[16];
		if (i < 50)
			snprintf(c, sizeof c, "%s", FIRST[i]);
		else if (i < 100)
			snprintf(c, sizeof c, " %s", LAST[i - 50]);
		else if (i < 200)
			snprintf(c, sizeof c, " %02d", i - 100);
		else
			snprintf(c, sizeof c, "%02d", i - 200);
		cJSON *t = cJSON_CreateObject();
		if (!t || !cJSON_AddNumberToObject(t, "id", id++) ||
		    !cJSON_AddStringToObject(t, "content", c) ||
		    !cJSON_AddFalseToObject(t, "single_word") || !cJSON_AddFalseToObject(t, "lstrip") ||
		    !cJSON_AddFalseToObject(t, "rstrip") || !cJSON_AddFalseToObject(t, "normalized") ||
		    !cJSON_AddFalseToObject(t, "special") || !cJSON_AddItemToArray(added, t))
			die("json", "out of memory");
	}
	cJSON *norm = cJSON_CreateObject(), *pre = cJSON_CreateObject(), *dec = cJSON_CreateObject();
	cJSON *model = cJSON_CreateObject(), *merges = cJSON_CreateArray();
	int ok = norm && pre && dec && model && merges &&
		 cJSON_AddStringToObject(root, "version", "1.0") &&
		 cJSON_AddNullToObject(root, "truncation") && cJSON_AddNullToObject(root, "padding") &&
		 cJSON_AddItemToObject(root, "added_tokens", added) &&
		 cJSON_AddStringToObject(norm, "type", "NFC") &&
		 cJSON_AddItemToObject(root, "normalizer", norm);
	cJSON *bl[2] = { pre, dec };
	for (int i = 0; ok && i < 2; i++)
		ok = cJSON_AddStringToObject(bl[i], "type", "ByteLevel") &&
		     cJSON_AddFalseToObject(bl[i], "add_prefix_space") &&
		     cJSON_AddTrueToObject(bl[i], "trim_offsets") &&
		     cJSON_AddTrueToObject(bl[i], "use_regex");
	ok = ok && cJSON_AddItemToObject(root, "pre_tokenizer", pre) &&
	     cJSON_AddNullToObject(root, "post_processor") &&
	     cJSON_AddItemToObject(root, "decoder", dec) &&
	     cJSON_AddStringToObject(model, "type", "BPE") && cJSON_AddNullToObject(model, "dropout") &&
	     cJSON_AddNullToObject(model, "unk_token") &&
	     cJSON_AddNullToObject(model, "continuing_subword_prefix") &&
	     cJSON_AddNullToObject(model, "end_of_word_suffix") &&
	     cJSON_AddFalseToObject(model, "fuse_unk") &&
	     cJSON_AddFalseToObject(model, "byte_fallback") &&
	     cJSON_AddItemToObject(model, "vocab", vocab) &&
	     cJSON_AddItemToObject(model, "merges", merges) &&
	     cJSON_AddItemToObject(root, "model", model);
	if (!ok)
		die("json", "out of memory");
	put_json(f, root);
}

int main(int argc, char **argv)
{
	static const struct { const char *name; int cmd; } cmds[] = {
		{"tokenizer", TOKENIZER}, {"corpus", CORPUS}, {"queries", QUERIES}, {"train", TRAIN},
	};
	if (argc < 2)
		return bad("subcommand", "missing (tokenizer, corpus, queries, train)");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	int cmd = 0;
	for (size_t i = 0; i < COUNT(cmds); i++)
		if (!strcmp(argv[1], cmds[i].name))
			cmd = cmds[i].cmd;
	if (!cmd)
		return bad(argv[1], "unknown subcommand (tokenizer, corpus, queries, train)");
	opts o;
	int rc = parse(&o, cmd, argc, argv);
	if (rc)
		return rc == 1 ? 0 : rc;

	char em[SS_ERRMSG_MAX];
	const char *name = o.out ? o.out : "stdout";
	ss_output *out;
	if (ss_output_open(&out, o.out, em))
		die(name, em);
	FILE *f = ss_output_file(out);
	switch (cmd) {
	case TOKENIZER: run_tokenizer(f); break;
	case CORPUS: run_corpus(f, &o); break;
	case QUERIES: run_queries(f, &o); break;
	default: run_train(f, &o); break;
	}
	if (ss_output_commit(out, em))
		die(name, em);
	if (fclose(stdout))
		die("stdout", "write error");
	return 0;
}
