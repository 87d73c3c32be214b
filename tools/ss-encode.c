/*
 * ss-encode — token stream (or plain text) → state stream: one Mamba-2
 * state per document (or one for all documents with --concat), computed on
 * the CPU without the lm_head. --shard I/N and --ids FILE pick which
 * documents of the inputs to encode (corpus shards; given retrieved ids).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "model_cli.h"
#include "ss.h"

static const char *usage =
	"ss-encode [--model DIR] [--device D] [--threads N] [--state-dtype f32|f16|bf16|q8] [--batch N]\n"
	"                 [--concat [--id ID]] [--from-state FILE]\n"
	"                 [--text [--tokenizer FILE] [--max-doc SIZE]]\n"
	"                 [--shard I/N] [--ids FILE] [--deterministic] [--weights-dtype T]\n"
	"                 [-o FILE] [-q|-v] [FILE...]";

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Run each document of the token streams (stdin when no FILE or '-') through a\n"
	       "Mamba-2 model and write its final state (ssm, conv, logdecay of every layer)\n"
	       "as one record of a state stream, in input order.\n\n",
	       usage);
	cli_model_help(23);
	printf("  --state-dtype T      storage dtype of conv and ssm: f32 (default), f16, bf16,\n"
	       "                       q8 (int8 with an f32 scale per block, ss-states(5))\n"
	       "  --batch N            documents per forward call (default 8); memory grows\n"
	       "                       with N, not with the corpus\n"
	       "  --deterministic      a document's state is the same bytes whatever --threads,\n"
	       "                       --batch and --shard (on the CPU, which it implies for\n"
	       "                       --device auto; slower on short documents)\n"
	       "  --concat             one state for all documents concatenated in input order,\n"
	       "                       id \"concat(a,b,...)\"\n"
	       "  --id ID              the id of the --concat state\n"
	       "  --from-state FILE    start every document (or the concatenation) from the\n"
	       "                       first state in FILE instead of the zero state\n"
	       "  --text               inputs are UTF-8 text, one document per line (empty\n"
	       "                       lines skipped), id \"FILE:LINE\"; one document per\n"
	       "                       file: ss-tokenize --whole FILE... | ss-encode\n"
	       "  --max-doc SIZE       --text: refuse a line over SIZE bytes (k/M/G; 64M)\n"
	       "  --shard I/N          encode only the documents whose 0-based number i,\n"
	       "                       counted over all inputs, has i %% N == I: shard I of\n"
	       "                       a round-robin split in N (0 <= I < N)\n"
	       "  --ids FILE           encode only the documents whose id is a line of FILE,\n"
	       "                       in FILE's order (a listed id may repeat; the first\n"
	       "                       input document with the id is taken); they are read\n"
	       "                       into memory before encoding starts. An id missing\n"
	       "                       from the inputs is an error\n"
	       "  -o FILE              output file (default stdout, never a terminal); written\n"
	       "                       to a temporary file and renamed when complete\n"
	       "  -q, -v               quieter; more verbose (progress and a summary)\n"
	       "  -h, --help           this help;  -V, --version  the version\n\n"
	       "A document with no tokens gets the starting state (zero) with n_tokens 0.\n"
	       "-v ends with a summary: documents, tokens, and the seconds spent reading\n"
	       "the inputs, encoding and writing (not loading the model).\n\n");
	cli_defaults_help();
	exit(0);
}

/* The open output, aborted at exit unless closed: a failed run leaves no
 * partial file behind. */
static ss_writer *out_w;

static void abort_output(void)
{
	if (out_w)
		ss_writer_abort(out_w);
	out_w = NULL;
}

/* One input document. */
typedef struct {
	char *id;
	int32_t *tokens;
	int64_t n_tokens;
} doc;

static void doc_free(doc *d)
{
	free(d->id);
	free(d->tokens);
	memset(d, 0, sizeof *d);
}

/* Iterates over the documents of all inputs, as token records or text lines. */
typedef struct {
	char **files;
	int nfiles, cur;
	int text;
	ss_tokenizer *tok;
	ss_reader *r;
	FILE *tf;
	char *line;
	size_t line_cap;
	long lineno;
	uint64_t file_docs; /* --text: documents of the current file */
	int32_t vocab;
	uint64_t max_doc; /* --text: longest line (document) accepted */
	double total_bytes; /* sum of the inputs' sizes; 0: unknown (a pipe) */
	double done_bytes;  /* of the inputs already read */
	double pos;         /* bytes read of the current input */
} input;

/* Next document into *d. Returns 1, or 0 when all inputs are exhausted. */
static int input_next(input *in, doc *d)
{
	char err[SS_ERRMSG_MAX] = "";
	for (;;) {
		if (in->cur >= in->nfiles)
			return 0;
		const char *path = in->files[in->cur];
		struct stat st;
		if (!in->r && !in->tf && strcmp(path, "-") && !stat(path, &st) && S_ISDIR(st.st_mode))
			cli_die("%s: a directory: ss-tokenize reads one, a document per file (ss-tokenize %s | "
				"ss-encode)", path, path);
		if (!in->text) {
			if (!in->r && ss_reader_open(&in->r, path, cli_max_record(), err))
				cli_die("%s: %s", path, err);
			const ss_record *rec;
			int rc = ss_reader_next(in->r, &rec);
			if (rc < 0)
				cli_die("%s: %s", path, ss_reader_error(in->r));
			if (rc == 0) {
				ss_reader_close(in->r);
				in->r = NULL;
				in->cur++;
				in->done_bytes += in->pos;
				in->pos = 0;
				continue;
			}
			in->pos = (double)ss_record_offset(rec);
			if (strcmp(ss_record_format(rec), SS_FORMAT_TOKENS))
				cli_die("%s: record %llu (byte offset %llu): not a token record (format \"%s\")",
					path, (unsigned long long)ss_record_index(rec),
					(unsigned long long)ss_record_offset(rec), ss_record_format(rec));
			ss_tokens t;
			if (ss_record_tokens(rec, &t, err))
				cli_die("%s: record %llu (byte offset %llu): %s", path,
					(unsigned long long)ss_record_index(rec),
					(unsigned long long)ss_record_offset(rec), err);
			for (int64_t i = 0; i < t.n_tokens; i++)
				if (t.tokens[i] < 0 || t.tokens[i] >= in->vocab)
					cli_die("%s: record %llu (byte offset %llu, id \"%s\"): token %lld is %d, "
						"outside the model's vocabulary [0, %d)",
						path, (unsigned long long)ss_record_index(rec),
						(unsigned long long)ss_record_offset(rec), t.id, (long long)i,
						(int)t.tokens[i], (int)in->vocab);
			d->id = t.id;
			d->tokens = t.tokens;
			d->n_tokens = t.n_tokens;
			t.id = NULL;
			t.tokens = NULL;
			ss_tokens_free(&t);
			return 1;
		}
		if (!in->tf) {
			in->tf = strcmp(path, "-") ? fopen(path, "rb") : stdin;
			if (!in->tf)
				cli_die("%s: %m", path);
			in->lineno = 0;
		}
		/* Room for the line end: the limit is on the document. */
		long n = cli_getline(&in->line, &in->line_cap, in->tf, in->max_doc + 2);
		if (n < 0 && n != -2) {
			if (n == -3)
				cli_die("%s: read error: %s", path, strerror(errno));
			if (in->tf != stdin)
				fclose(in->tf);
			in->tf = NULL;
			cli_warn_line_docs(path, in->file_docs, in->nfiles,
					   "for one document per file: ss-tokenize --whole FILE... | ss-encode");
			in->file_docs = 0;
			in->cur++;
			in->done_bytes += in->pos;
			in->pos = 0;
			continue;
		}
		in->pos += (double)n;
		in->lineno++;
		while (n > 0 && (in->line[n - 1] == '\n' || in->line[n - 1] == '\r'))
			n--;
		if (n == -2 || (uint64_t)n > in->max_doc)
			cli_die("%s: line %ld: document longer than the --max-doc limit of %llu bytes", path,
				in->lineno, (unsigned long long)in->max_doc);
		if (n == 0)
			continue;
		size_t nids;
		int rc = ss_tokenizer_encode(in->tok, in->line, (size_t)n, &d->tokens, &nids, err);
		if (rc)
			cli_die("%s: line %ld: %s", path, in->lineno, err[0] ? err : ss_strerror(rc));
		d->n_tokens = (int64_t)nids;
		for (size_t i = 0; i < nids; i++)
			if (d->tokens[i] >= in->vocab)
				cli_die("%s: line %ld: token %d is outside the model's vocabulary [0, %d)",
					path, in->lineno, (int)d->tokens[i], (int)in->vocab);
		if (asprintf(&d->id, "%s:%ld", path, in->lineno) < 0)
			cli_die("out of memory");
		in->file_docs++;
		return 1;
	}
}

static void input_close(input *in)
{
	if (in->r)
		ss_reader_close(in->r);
	if (in->tf && in->tf != stdin)
		fclose(in->tf);
	free(in->line);
}

/* Which input documents to encode: shard I of N (round robin over the
 * documents' 0-based numbers), then, with --ids, the listed ids. */
typedef struct {
	long shard_i, shard_n; /* every document when shard_n == 1 */
	long long seen;        /* input documents read so far */
	const char *ids_path;  /* NULL: no id list */
	char **ids;            /* [n_ids] as listed, owned */
	size_t n_ids;
	size_t *sorted;        /* [n_ids] list positions sorted by (id, position) */
	size_t *first;         /* [n_ids] position of the first entry with the same id */
	doc *found;            /* [n_ids] the document of a first entry, once read */
	size_t next;           /* next list position to hand out */
} selection;

static char **sort_ids; /* the list qsort compares through */

static int cmp_pos(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	int c = strcmp(sort_ids[x], sort_ids[y]);
	return c ? c : (x > y) - (x < y);
}

/* Reads the id list at sel->ids_path: one id per line, line ends (\n, \r\n)
 * removed, empty lines skipped. Dies with the file's name on failure. */
static void selection_load(selection *sel)
{
	const char *path = sel->ids_path;
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	if (!f)
		cli_die("%s: %m", path);
	char *line = NULL;
	size_t cap = 0, alloc = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, f)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		if (n == 0)
			continue;
		if (sel->n_ids == alloc) {
			alloc = alloc ? 2 * alloc : 16;
			char **t = realloc(sel->ids, alloc * sizeof *t);
			if (!t)
				cli_die("out of memory");
			sel->ids = t;
		}
		if (!(sel->ids[sel->n_ids++] = strdup(line)))
			cli_die("out of memory");
	}
	if (ferror(f))
		cli_die("%s: read error", path);
	free(line);
	if (f != stdin)
		fclose(f);
	if (sel->n_ids == 0)
		cli_die("%s: no ids", path);
	sel->sorted = malloc(sel->n_ids * sizeof *sel->sorted);
	sel->first = malloc(sel->n_ids * sizeof *sel->first);
	sel->found = calloc(sel->n_ids, sizeof *sel->found);
	if (!sel->sorted || !sel->first || !sel->found)
		cli_die("out of memory");
	for (size_t k = 0; k < sel->n_ids; k++)
		sel->sorted[k] = k;
	sort_ids = sel->ids;
	qsort(sel->sorted, sel->n_ids, sizeof *sel->sorted, cmp_pos);
	for (size_t k = 0; k < sel->n_ids; k++) {
		size_t p = sel->sorted[k];
		sel->first[p] = k && !strcmp(sel->ids[sel->sorted[k - 1]], sel->ids[p])
				? sel->first[sel->sorted[k - 1]] : p;
	}
}

/* The list position of the first entry equal to id, or -1. */
static long selection_find(const selection *sel, const char *id)
{
	size_t lo = 0, hi = sel->n_ids;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(sel->ids[sel->sorted[mid]], id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < sel->n_ids && !strcmp(sel->ids[sel->sorted[lo]], id))
		return (long)sel->first[sel->sorted[lo]];
	return -1;
}

/* Next input document of this shard into *d. Returns 1, or 0 at the end. */
static int shard_next(input *in, selection *sel, doc *d)
{
	while (input_next(in, d)) {
		if (sel->seen++ % sel->shard_n == sel->shard_i)
			return 1;
		doc_free(d);
	}
	return 0;
}

/* With --ids: reads all inputs, keeping the first document of each listed
 * id; dies naming the first listed id that no input document has. */
static void selection_gather(input *in, selection *sel)
{
	doc d = { 0 };
	while (shard_next(in, sel, &d)) {
		long p = selection_find(sel, d.id);
		if (p >= 0 && !sel->found[p].id)
			sel->found[p] = d;
		else
			doc_free(&d);
		memset(&d, 0, sizeof d);
	}
	for (size_t k = 0; k < sel->n_ids; k++)
		if (!sel->found[sel->first[k]].id)
			cli_die("%s: line %zu: id \"%s\" is not in the inputs%s", sel->ids_path, k + 1,
				sel->ids[k], sel->shard_n > 1 ? " (of this shard)" : "");
}

/* Next document to encode into *d (owned by the caller). Returns 1, or 0. */
static int next_doc(input *in, selection *sel, doc *d)
{
	if (!sel->ids_path)
		return shard_next(in, sel, d);
	if (sel->next >= sel->n_ids)
		return 0;
	const doc *src = &sel->found[sel->first[sel->next++]];
	d->id = strdup(src->id);
	d->n_tokens = src->n_tokens;
	d->tokens = malloc((size_t)(src->n_tokens ? src->n_tokens : 1) * sizeof *d->tokens);
	if (!d->id || !d->tokens)
		cli_die("out of memory");
	if (src->n_tokens)
		memcpy(d->tokens, src->tokens, (size_t)src->n_tokens * sizeof *d->tokens);
	return 1;
}

static void selection_free(selection *sel)
{
	for (size_t k = 0; k < sel->n_ids; k++) {
		free(sel->ids[k]);
		if (sel->found)
			doc_free(&sel->found[k]);
	}
	free(sel->ids);
	free(sel->sorted);
	free(sel->first);
	free(sel->found);
}

/* Parses "I/N" with 0 <= I < N into sel; usage error otherwise. */
static void parse_shard(const char *s, selection *sel, const char *use)
{
	char *slash = strchr(s, '/'), *end;
	if (!slash)
		cli_usage(use, "--shard: '%s' is not I/N", s);
	errno = 0;
	long i = strtol(s, &end, 10);
	int bad = end != slash || slash == s || errno;
	long n = strtol(slash + 1, &end, 10);
	bad |= *end || end == slash + 1 || errno;
	if (bad || n < 1 || i < 0 || i >= n)
		cli_usage(use, "--shard: '%s' is not I/N with 0 <= I < N", s);
	sel->shard_i = i;
	sel->shard_n = n;
}

/* Resets s to the starting state: base's arrays and n_tokens, or zeros. */
static void start_state(ss_state *s, const ss_state *base, const ss_model *m, ss_dtype dtype)
{
	if (base) {
		size_t ns = ss_state_ssm_len(&base->dims), nc = ss_state_conv_len(&base->dims),
		       nl = ss_state_logdecay_len(&base->dims);
		memcpy(s->ssm, base->ssm, ns * sizeof(float));
		memcpy(s->conv, base->conv, nc * sizeof(float));
		memcpy(s->logdecay, base->logdecay, nl * sizeof(float));
		s->n_tokens = base->n_tokens;
	} else {
		memset(s->ssm, 0, ss_state_ssm_len(&s->dims) * sizeof(float));
		memset(s->conv, 0, ss_state_conv_len(&s->dims) * sizeof(float));
		memset(s->logdecay, 0, ss_state_logdecay_len(&s->dims) * sizeof(float));
		s->n_tokens = 0;
	}
	memcpy(s->fingerprint, m->fingerprint, SS_FINGERPRINT_MAX);
	s->dtype = dtype;
}

static void put_state(const char *out_path, ss_state *s)
{
	int rc = ss_writer_put_state(out_w, s, NULL);
	if (rc == SS_ERR_INVALID) /* a value the records cannot hold (ss_writer_put_state) */
		cli_die("%s: document %s: its state holds a NaN, an infinity or a value beyond %s's "
			"range: not written", out_path ? out_path : "-", s->id ? s->id : "?",
			ss_dtype_name(s->dtype));
	if (rc) {
		ss_writer *w = out_w;
		out_w = NULL;
		cli_writer_die(w, out_path, rc);
	}
}

/* Appends `add` to the growing string *acc (comma-separated). */
static void append_id(char **acc, size_t *len, size_t *cap, const char *add)
{
	size_t n = strlen(add) + 1;
	if (*len + n + 2 > *cap) {
		*cap = (*len + n + 2) * 2;
		char *t = realloc(*acc, *cap);
		if (!t)
			cli_die("out of memory");
		*acc = t;
	}
	if (*len)
		(*acc)[(*len)++] = ',';
	memcpy(*acc + *len, add, n);
	*len += n - 1;
}

int main(int argc, char **argv)
{
	cli_init("ss-encode");
	const char *from_path = NULL, *out_path = NULL, *concat_id = NULL;
	cli_model_opts mo = { 0 };
	int concat = 0, text = 0, deterministic = 0;
	uint64_t max_doc = (uint64_t)64 << 20; /* as ss-tokenize's default */
	long batch = 8;
	ss_dtype dtype = SS_DTYPE_F32;
	selection sel = { .shard_n = 1 };
	enum { O_DTYPE = 256, O_CONCAT, O_FROM, O_BATCH, O_TEXT, O_ID, O_SHARD, O_IDS, O_DET,
	       O_MAXDOC };
	static const struct option opts[] = {
		{ "state-dtype", required_argument, 0, O_DTYPE },
		{ "concat", no_argument, 0, O_CONCAT },
		{ "id", required_argument, 0, O_ID },
		{ "from-state", required_argument, 0, O_FROM },
		{ "batch", required_argument, 0, O_BATCH },
		{ "deterministic", no_argument, 0, O_DET },
		{ "text", no_argument, 0, O_TEXT },
		{ "max-doc", required_argument, 0, O_MAXDOC },
		{ "shard", required_argument, 0, O_SHARD },
		{ "ids", required_argument, 0, O_IDS },
		{ 0, 0, 0, 0 },
	};
	const cli_options co = { NULL, opts, usage, help, &out_path, &mo };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case O_DTYPE:
			if (ss_dtype_parse(optarg, &dtype))
				cli_usage(usage, "--state-dtype: '%s' is not f32, f16, bf16 or q8", optarg);
			break;
		case O_CONCAT: concat = 1; break;
		case O_ID: concat_id = optarg; break;
		case O_FROM: from_path = optarg; break;
		case O_BATCH: batch = cli_long("--batch", optarg, 1, 4096, usage); break;
		case O_DET: deterministic = 1; break;
		case O_TEXT: text = 1; break;
		case O_MAXDOC:
			if (!(max_doc = cli_size(optarg)))
				cli_usage(usage, "--max-doc: '%s' is not a size (bytes, with optional k/M/G)", optarg);
			break;
		case O_SHARD: parse_shard(optarg, &sel, usage); break;
		case O_IDS: sel.ids_path = optarg; break;
		}
	}
	if (concat_id && !concat)
		cli_usage(usage, "--id needs --concat");
	if (mo.tokenizer && !text)
		cli_usage(usage, "--tokenizer needs --text");
	const char *model_dir = cli_model_dir(mo.model, usage);
	if (deterministic && !strcmp(mo.device, "auto"))
		mo.device = "cpu"; /* only the CPU promises it */
	ss_device *dev = mcli_device(mo.device, usage);

	char *stdin_only[] = { "-" };
	input in = { 0 };
	in.files = optind < argc ? argv + optind : stdin_only;
	in.nfiles = optind < argc ? argc - optind : 1;
	in.text = text;
	in.max_doc = max_doc;
	in.total_bytes = cli_inputs_size(in.files, in.nfiles);
	if (sel.ids_path && !strcmp(sel.ids_path, "-"))
		for (int i = 0; i < in.nfiles; i++)
			if (!strcmp(in.files[i], "-"))
				cli_usage(usage, "--ids - and an input both read standard input");
	for (int i = 0; i < in.nfiles; i++)
		cli_out_not_input(out_path, in.files[i]);
	cli_out_not_input(out_path, from_path);
	cli_out_not_input(out_path, sel.ids_path);
	cli_out_not_input(out_path, mo.tokenizer);

	/* State extraction never needs an untied lm_head: do not keep it. */
	ss_model *m = mcli_load_model(model_dir, SS_MODEL_SKIP_LM_HEAD, mo.wtype, usage);
	in.vocab = mcli_vocab(m);
	if (text)
		in.tok = cli_tokenizer(mo.tokenizer, model_dir);
	ss_state_dims dims;
	ss_model_state_dims(m, &dims);

	char err[SS_ERRMSG_MAX] = "";
	ss_forward_ctx *ctx = mcli_forward_ctx(m, model_dir, dev, mo.threads);
	if (deterministic && ss_forward_ctx_set_deterministic(ctx, 1))
		cli_die("--deterministic: only the CPU promises it, not --device %s", mo.device);
	if (ss_writer_open(&out_w, out_path ? out_path : "-", 0, err))
		cli_die("%s: %s", out_path ? out_path : "standard output", err);
	atexit(abort_output);

	int nst = concat ? 1 : (int)batch;
	ss_state *st = calloc((size_t)nst, sizeof *st);
	doc *docs = calloc((size_t)nst, sizeof *docs);
	ss_forward_seq *seqs = calloc((size_t)nst, sizeof *seqs);
	if (!st || !docs || !seqs)
		cli_die("out of memory");
	for (int i = 0; i < nst; i++)
		if (ss_state_alloc(&st[i], &dims))
			cli_die("out of memory (state of %d documents)", nst);

	/* The clock covers reading the inputs (the starting state, the documents),
	 * encoding and writing, as ss-compose's covers reading, composing and
	 * writing; not loading the model or setting up the device. */
	double t0 = cli_now();
	cli_progress_begin();
	ss_state base = { 0 }, *basep = NULL;
	if (from_path) {
		mcli_states src;
		mcli_states_open(&src, from_path, 0);
		mcli_states_next(&src, m, model_dir, &base);
		mcli_states_close(&src);
		basep = &base;
	}
	if (sel.ids_path) {
		selection_load(&sel);
		selection_gather(&in, &sel);
	}
	long long n_docs = 0, n_tok = 0;
	char *cid = NULL;
	size_t cid_len = 0, cid_cap = 0;
	if (concat)
		start_state(&st[0], basep, m, dtype);
	for (;;) {
		int nb = 0;
		while (nb < nst && next_doc(&in, &sel, &docs[nb]))
			nb++;
		if (nb == 0)
			break;
		for (int i = 0; i < nb; i++) {
			ss_state *s = concat ? &st[0] : &st[i];
			if (!concat)
				start_state(s, basep, m, dtype);
			seqs[i] = (ss_forward_seq){ .tokens = docs[i].tokens,
						    .n_tokens = docs[i].n_tokens, .state = s };
			n_tok += docs[i].n_tokens;
		}
		if (ss_forward_prefill(ctx, seqs, nb, SS_LOGITS_NONE, err))
			cli_die("%s: document \"%s\": %s", model_dir, docs[0].id, err);
		for (int i = 0; i < nb; i++) {
			if (concat) {
				append_id(&cid, &cid_len, &cid_cap, docs[i].id);
			} else {
				free(st[i].id);
				st[i].id = docs[i].id;
				docs[i].id = NULL;
				put_state(out_path, &st[i]);
			}
			doc_free(&docs[i]);
		}
		n_docs += nb;
		double elapsed_s = cli_now() - t0;
		cli_progress_of(in.done_bytes + in.pos, sel.ids_path ? 0 : in.total_bytes,
				"%lld %s, %lld tokens, %.0f tokens/s", n_docs,
				cli_plural((uint64_t)n_docs, "document", "documents"), n_tok,
				elapsed_s > 0 ? n_tok / elapsed_s : 0.0);
	}
	if (concat) {
		/* Each call above is one sequence per state, so documents in one
		 * batch were fed in order: the result is the concatenation. */
		free(st[0].id);
		if (concat_id) {
			st[0].id = strdup(concat_id);
		} else if (asprintf(&st[0].id, "concat(%s)", cid ? cid : "") < 0) {
			st[0].id = NULL;
		}
		if (!st[0].id)
			cli_die("out of memory");
		put_state(out_path, &st[0]);
	}
	cli_progress_end();
	ss_writer *w = out_w;
	out_w = NULL;
	if (ss_writer_close(w, err))
		cli_die("%s: %s", out_path ? out_path : "standard output", err[0] ? err : "write failed");
	if (cli_verbosity >= 2) {
		double elapsed_s = cli_now() - t0;
		fprintf(stderr, "ss-encode: %lld %s, %lld tokens in %.3g s (%.0f tokens/s)\n",
			n_docs, cli_plural((uint64_t)n_docs, "document", "documents"), n_tok, elapsed_s, elapsed_s > 0 ? n_tok / elapsed_s : 0.0);
	}

	free(cid);
	for (int i = 0; i < nst; i++)
		ss_state_free(&st[i]);
	free(st);
	free(docs);
	free(seqs);
	ss_state_free(&base);
	ss_forward_ctx_free(ctx);
	ss_device_close(dev);
	input_close(&in);
	selection_free(&sel);
	ss_tokenizer_free(in.tok);
	ss_model_free(m);
	return 0;
}
