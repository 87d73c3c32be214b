/*
 * ss-encode — token stream (or plain text) → state stream: one Mamba-2
 * state per document (or one for all documents with --concat), computed on
 * the CPU without the lm_head. --shard I/N and --ids FILE pick which
 * documents of the inputs to encode (corpus shards; given retrieved ids).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "model_cli.h"
#include "ss.h"

static const char *usage =
	"ss-encode [--model DIR] [--device D] [--threads N] [--state-dtype f32|f16|bf16|q8|q4] [--batch N]\n"
	"                 [--concat [--id ID]] [--from-state FILE]\n"
	"                 [--text [--tokenizer FILE] [--max-doc SIZE]]\n"
	"                 [--shard I/N] [--ids FILE] [--deterministic] [--weights-dtype T]\n"
	"                 [--estimate] [-o FILE] [-q|-v] [FILE...]";

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Run each document of the token streams (stdin when no FILE or '-') through a\n"
	       "Mamba-2 model and write its final state (ssm, conv, logdecay of every layer)\n"
	       "as one record of a state stream, in input order.\n\n",
	       usage);
	printf("  --state-dtype T      storage dtype of conv and ssm: f32 (default), f16, bf16,\n"
	       "                       q8 (int8 with an f32 scale per block, ss-states(5)), q4\n"
	       "                       (4-bit codes, the same scales: 1/7.5 of f32's bytes)\n"
	       "  --batch N            documents per forward call (default 8); memory grows\n"
	       "                       with N, not with the corpus: two sets of N states,\n"
	       "                       one written while the next batch is encoded\n"
	       "  --deterministic      a document's state is the same bytes whatever --threads,\n"
	       "                       --batch and --shard (on the CPU, which it implies for\n"
	       "                       --device auto; the CPU's default unless SS_GEMM=blas)\n"
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
	       "  --estimate           write no states: read every selected document, encode\n"
	       "                       an evenly spaced sample of 32 to 63 of them, print the\n"
	       "                       bytes and time the whole encoding would take here\n"
	       "                       (key value lines; see ss-encode(1))\n");
	cli_common_help(23, CLI_HELP_MODEL | CLI_HELP_OUT | CLI_HELP_BASE, NULL);
	printf("\nThe output goes to stdout (never a terminal) without -o.\n"
	       "A document with no tokens gets the starting state (zero) with n_tokens 0.\n"
	       "-v ends with a summary: documents, tokens, and the seconds spent reading\n"
	       "the inputs, encoding and writing (not loading the model).\n\n");
	cli_defaults_help();
	exit(0);
}

/* The open output: a failed run leaves no partial file behind, as cli_init's
 * exit and signal handlers remove every unfinished output (ss_output_abort_all). */
static ss_writer *out_w;

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
		long n = ss_getline(&in->line, &in->line_cap, in->tf, in->max_doc + 2);
		if (n == SS_ERR_NOMEM)
			cli_die("out of memory");
		if (n <= 0 && n != SS_ERR_TOO_LARGE) {
			if (n == SS_ERR_IO)
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
		if (n == SS_ERR_TOO_LARGE || (uint64_t)n > in->max_doc)
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
	FILE *f = cli_open_regular(path);
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

/* Resets s to the starting state: base's arrays and n_tokens, or zeros
 * (fresh 0), or (fresh 1) leaves the arrays to the prefill, which takes a
 * fresh sequence's state as zeros without reading it (ss_forward_seq.fresh). */
static void start_state(ss_state *s, const ss_state *base, const ss_model *m, ss_dtype dtype,
			int fresh)
{
	if (base) {
		size_t ns = ss_state_ssm_len(&base->dims), nc = ss_state_conv_len(&base->dims),
		       nl = ss_state_logdecay_len(&base->dims);
		memcpy(s->ssm, base->ssm, ns * sizeof(float));
		memcpy(s->conv, base->conv, nc * sizeof(float));
		memcpy(s->logdecay, base->logdecay, nl * sizeof(float));
		s->n_tokens = base->n_tokens;
	} else if (!fresh) {
		memset(s->ssm, 0, ss_state_ssm_len(&s->dims) * sizeof(float));
		memset(s->conv, 0, ss_state_conv_len(&s->dims) * sizeof(float));
		memset(s->logdecay, 0, ss_state_logdecay_len(&s->dims) * sizeof(float));
		s->n_tokens = 0;
	}
	memcpy(s->fingerprint, m->fingerprint, SS_FINGERPRINT_MAX);
	s->dtype = dtype;
}

/* Dies with ss_writer_put_state's failure rc on state s. */
static void put_failed(const char *out_path, const ss_state *s, int rc) __attribute__((noreturn));
static void put_failed(const char *out_path, const ss_state *s, int rc)
{
	if (rc == SS_ERR_INVALID) /* a value the records cannot hold (ss_writer_put_state) */
		cli_die("%s: document %s: its state holds a NaN, an infinity or a value beyond %s's "
			"range: not written", out_path ? out_path : "-", s->id ? s->id : "?",
			ss_dtype_name(s->dtype));
	ss_writer *w = out_w;
	out_w = NULL;
	cli_writer_die(w, out_path, rc);
}

static void put_state(const char *out_path, ss_state *s)
{
	int rc = ss_writer_put_state(out_w, s, NULL);
	if (rc)
		put_failed(out_path, s, rc);
}

/* The writer thread: writes a batch's states to out_w while the next batch
 * is encoded into the other set of states, so that their checks (finite),
 * checksums and writes leave the prefill's path: about 5 ms a 19 MB state
 * to /dev/null here, the file system's pace to a file. One batch at a time;
 * the main thread touches out_w only while the thread is idle. */
static struct {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int started;
	ss_state *job;       /* the states to write, NULL when idle */
	int n;               /* how many */
	int stop;            /* end once the batch handed over is written */
	int rc;              /* the first failure of ss_writer_put_state, or 0 */
	const ss_state *bad; /* its state */
} wt = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void *writer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wt.mu);
	for (;;) {
		while (!wt.job && !wt.stop)
			pthread_cond_wait(&wt.cv, &wt.mu);
		if (!wt.job) /* stopped, and the last batch written */
			break;
		for (int i = 0; i < wt.n && !wt.rc; i++) {
			ss_state *s = &wt.job[i];
			pthread_mutex_unlock(&wt.mu);
			int rc = ss_writer_put_state(out_w, s, NULL);
			pthread_mutex_lock(&wt.mu);
			if (rc)
				wt.rc = rc, wt.bad = s;
		}
		wt.job = NULL;
		pthread_cond_broadcast(&wt.cv);
	}
	pthread_mutex_unlock(&wt.mu);
	return NULL;
}

/* Waits until the writer thread is idle; dies with its failure, if any. */
static void writer_wait(const char *out_path)
{
	pthread_mutex_lock(&wt.mu);
	while (wt.job)
		pthread_cond_wait(&wt.cv, &wt.mu);
	int rc = wt.rc;
	const ss_state *bad = wt.bad;
	pthread_mutex_unlock(&wt.mu);
	if (rc)
		put_failed(out_path, bad, rc);
}

/* Stops the writer thread once the batch handed over is written, and
 * joins it. At exit too (atexit, before cli's handler removes an
 * unfinished output file): a run that dies on its input writes what it
 * encoded before, whole, as it did without the thread. */
static void writer_stop(void)
{
	if (!wt.started)
		return;
	pthread_mutex_lock(&wt.mu);
	wt.stop = 1;
	pthread_cond_broadcast(&wt.cv);
	pthread_mutex_unlock(&wt.mu);
	pthread_join(wt.th, NULL);
	wt.started = 0;
}

/* Hands the idle thread n states to write (started at the first). */
static void writer_post(ss_state *st, int n)
{
	if (!wt.started) {
		int err = pthread_create(&wt.th, NULL, writer_main, NULL);
		if (err)
			cli_die("cannot start the writer thread: %s", strerror(err));
		wt.started = 1;
		atexit(writer_stop);
	}
	pthread_mutex_lock(&wt.mu);
	wt.job = st;
	wt.n = n;
	pthread_cond_broadcast(&wt.cv);
	pthread_mutex_unlock(&wt.mu);
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

/* The command line. */
typedef struct {
	const char *from_path, *out_path, *concat_id, *model_dir;
	cli_model_opts mo;
	int concat, text, deterministic, estimate;
	uint64_t max_doc;
	long batch;
	ss_dtype dtype;
	selection sel;
} encode_opts;

/* Reads the options into o; exits 2 on a usage error. */
static void parse_args(int argc, char **argv, encode_opts *o)
{
	enum { O_DTYPE = 256, O_CONCAT, O_FROM, O_BATCH, O_TEXT, O_ID, O_SHARD, O_IDS, O_DET,
	       O_MAXDOC, O_ESTIMATE };
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
		{ "estimate", no_argument, 0, O_ESTIMATE },
		{ 0, 0, 0, 0 },
	};
	*o = (encode_opts){ .max_doc = (uint64_t)64 << 20, /* as ss-tokenize's default */
			    .batch = 8, .dtype = SS_DTYPE_F32, .sel = { .shard_n = 1 } };
	const cli_options co = { NULL, opts, usage, help, &o->out_path, &o->mo };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case O_DTYPE:
			o->dtype = (ss_dtype)cli_dtype("--state-dtype", optarg, SS_DTYPE_STATES, usage);
			break;
		case O_CONCAT: o->concat = 1; break;
		case O_ID: o->concat_id = optarg; break;
		case O_FROM: o->from_path = optarg; break;
		case O_BATCH: o->batch = cli_long("--batch", optarg, 1, 4096, usage); break;
		case O_DET: o->deterministic = 1; break;
		case O_TEXT: o->text = 1; break;
		case O_MAXDOC:
			if (!(o->max_doc = cli_size(optarg)))
				cli_usage(usage, "--max-doc: '%s' is not a size (bytes, with optional k/M/G)", optarg);
			break;
		case O_SHARD: parse_shard(optarg, &o->sel, usage); break;
		case O_IDS: o->sel.ids_path = optarg; break;
		case O_ESTIMATE: o->estimate = 1; break;
		}
	}
	if (o->estimate && (o->concat || o->out_path))
		cli_usage(usage, "--estimate writes no states: not with %s", o->concat ? "--concat" : "-o");
	if (o->concat_id && !o->concat)
		cli_usage(usage, "--id needs --concat");
	if (o->mo.tokenizer && !o->text)
		cli_usage(usage, "--tokenizer needs --text");
	o->model_dir = cli_model_dir(o->mo.model, usage);
	if (o->deterministic && !strcmp(o->mo.device, "auto"))
		o->mo.device = "cpu"; /* only the CPU promises it */
}

/* The inputs (FILE..., or stdin), none of them the output. */
static void open_inputs(int argc, char **argv, const encode_opts *o, input *in)
{
	static char *stdin_only[] = { "-" };
	*in = (input){ 0 };
	in->files = optind < argc ? argv + optind : stdin_only;
	in->nfiles = optind < argc ? argc - optind : 1;
	in->text = o->text;
	in->max_doc = o->max_doc;
	in->total_bytes = cli_inputs_size(in->files, in->nfiles);
	if (o->sel.ids_path && !strcmp(o->sel.ids_path, "-"))
		for (int i = 0; i < in->nfiles; i++)
			if (!strcmp(in->files[i], "-"))
				cli_usage(usage, "--ids - and an input both read standard input");
	for (int i = 0; i < in->nfiles; i++)
		cli_out_not_input(o->out_path, in->files[i]);
	cli_out_not_input(o->out_path, o->from_path);
	cli_out_not_input(o->out_path, o->sel.ids_path);
	cli_out_not_input(o->out_path, o->mo.tokenizer);
}

/* The encoding: the model, its context, and the states of a batch. */
typedef struct {
	const encode_opts *o;
	ss_model *m;
	ss_forward_ctx *ctx;
	int nst;              /* states a set: 1 with --concat, else --batch */
	ss_state *set[2];     /* [nst] each: one encoded while the writer thread
			       * writes the other (set[1] made for a second batch) */
	ss_state *st;         /* the set the next batch goes into */
	int sync;             /* write in the main thread (--estimate) */
	doc *docs;            /* [nst] */
	ss_forward_seq *seqs; /* [nst] */
	ss_state base, *basep; /* --from-state's, or NULL */
	long long n_docs, n_tok;
	char *cid;            /* --concat: the ids joined */
	size_t cid_len, cid_cap;
} encoder;

/* A set of e->nst states. */
static ss_state *set_alloc(const encoder *e)
{
	ss_state_dims dims;
	ss_model_state_dims(e->m, &dims);
	ss_state *st = calloc((size_t)e->nst, sizeof *st);
	if (!st)
		cli_die("out of memory");
	for (int i = 0; i < e->nst; i++)
		if (ss_state_alloc(&st[i], &dims))
			cli_die("out of memory (states of %d documents)", e->nst);
	return st;
}

static void encoder_alloc(encoder *e)
{
	e->nst = e->o->concat ? 1 : (int)e->o->batch;
	e->docs = calloc((size_t)e->nst, sizeof *e->docs);
	e->seqs = calloc((size_t)e->nst, sizeof *e->seqs);
	if (!e->docs || !e->seqs)
		cli_die("out of memory");
	e->st = e->set[0] = set_alloc(e);
}

/* Encodes nb documents e->docs[0..nb) in one prefill and writes their
 * states: hands them to the writer thread and takes the other set, or
 * (e->sync) writes them; --concat: folds them into st[0]. */
static void encode_batch(encoder *e, int nb)
{
	char err[SS_ERRMSG_MAX] = "";
	const int concat = e->o->concat;
	if (!e->st)
		e->st = e->set[1] = set_alloc(e);
	for (int i = 0; i < nb; i++) {
		ss_state *s = concat ? &e->st[0] : &e->st[i];
		if (!concat)
			start_state(s, e->basep, e->m, e->o->dtype, 1);
		e->seqs[i] = (ss_forward_seq){ .tokens = e->docs[i].tokens,
					       .n_tokens = e->docs[i].n_tokens, .state = s,
					       .fresh = !concat && !e->basep };
		e->n_tok += e->docs[i].n_tokens;
	}
	if (ss_forward_prefill(e->ctx, e->seqs, nb, SS_LOGITS_NONE, err))
		cli_die("%s: document \"%s\": %s", e->o->model_dir, e->docs[0].id, err);
	for (int i = 0; i < nb; i++) {
		if (concat) {
			append_id(&e->cid, &e->cid_len, &e->cid_cap, e->docs[i].id);
		} else {
			free(e->st[i].id);
			e->st[i].id = e->docs[i].id;
			e->docs[i].id = NULL;
			if (e->sync)
				put_state(e->o->out_path, &e->st[i]);
		}
		doc_free(&e->docs[i]);
	}
	e->n_docs += nb;
	if (!concat && !e->sync) {
		writer_wait(e->o->out_path); /* done with the other set */
		writer_post(e->st, nb);
		e->st = e->st == e->set[0] ? e->set[1] : e->set[0]; /* NULL: made by the next batch */
	}
}

/* Reads, encodes and writes every selected document; t0 starts the clock of
 * the progress line. */
static void encode_all(encoder *e, input *in, selection *sel, double t0)
{
	if (e->o->concat)
		start_state(&e->st[0], e->basep, e->m, e->o->dtype, 0);
	for (;;) {
		int nb = 0;
		while (nb < e->nst && next_doc(in, sel, &e->docs[nb]))
			nb++;
		if (nb == 0)
			break;
		encode_batch(e, nb);
		double elapsed_s = cli_now() - t0;
		cli_progress_of(in->done_bytes + in->pos, sel->ids_path ? 0 : in->total_bytes,
				"%lld %s, %lld tokens, %.0f tokens/s", e->n_docs,
				cli_plural((uint64_t)e->n_docs, "document", "documents"), e->n_tok,
				elapsed_s > 0 ? e->n_tok / elapsed_s : 0.0);
	}
	if (e->o->concat) {
		/* Each call above is one sequence per state, so documents in one
		 * batch were fed in order: the result is the concatenation. */
		free(e->st[0].id);
		if (e->o->concat_id) {
			e->st[0].id = strdup(e->o->concat_id);
		} else if (asprintf(&e->st[0].id, "concat(%s)", e->cid ? e->cid : "") < 0) {
			e->st[0].id = NULL;
		}
		if (!e->st[0].id)
			cli_die("out of memory");
		put_state(e->o->out_path, &e->st[0]);
	}
	writer_wait(e->o->out_path);
	writer_stop();
}

/* --estimate: an evenly spaced sample of the selected documents, kept while
 * all of them are read: document i (0-based) while i % stride == 0; when the
 * sample reaches 2 * ESTIMATE_SAMPLE, the stride doubles and every other kept
 * document goes. ESTIMATE_SAMPLE..2*ESTIMATE_SAMPLE-1 documents stay (all of
 * them when there are fewer); their tokens are the only ones held. */
enum { ESTIMATE_SAMPLE = 32 };
typedef struct {
	doc kept[2 * ESTIMATE_SAMPLE];
	int n;
	uint64_t stride;
	long long n_docs, n_tok; /* of all the selected documents */
} sample;

static void sample_add(sample *s, doc *d)
{
	uint64_t i = (uint64_t)s->n_docs++;
	s->n_tok += d->n_tokens;
	if (i % s->stride) {
		doc_free(d);
		return;
	}
	s->kept[s->n++] = *d;
	memset(d, 0, sizeof *d);
	if (s->n < 2 * ESTIMATE_SAMPLE)
		return;
	int n = 0;
	for (int j = 0; j < s->n; j++) {
		if (j % 2)
			doc_free(&s->kept[j]);
		else
			s->kept[n++] = s->kept[j];
	}
	s->n = n;
	s->stride *= 2;
}

/* --estimate: reads every selected document (tokenizing --text), encodes the
 * sample into a temporary stream in $TMPDIR (removed), and prints what the
 * whole encoding would write and take: the written bytes per record and the
 * sample's tokens/s scaled to all the tokens, plus the time the reading took. */
static void estimate(encoder *e, input *in, selection *sel)
{
	char err[SS_ERRMSG_MAX] = "";
	sample s = { .stride = 1 };
	e->sync = 1;
	doc d = { 0 };
	double t0 = cli_now();
	while (next_doc(in, sel, &d))
		sample_add(&s, &d);
	double read_s = cli_now() - t0;
	const char *tmpdir = getenv("TMPDIR");
	char *tmp = NULL;
	if (asprintf(&tmp, "%s/ss-estimate.%ld", tmpdir && *tmpdir ? tmpdir : "/tmp", (long)getpid()) < 0)
		cli_die("out of memory");
	if (ss_writer_open(&out_w, tmp, 0, err))
		cli_die("%s: %s", tmp, err);
	long long sample_tok = 0;
	for (int j = 0; j < s.n; j++)
		sample_tok += s.kept[j].n_tokens;
	double t1 = cli_now();
	for (int j = 0; j < s.n;) {
		int nb = 0;
		while (nb < e->nst && j < s.n)
			e->docs[nb++] = s.kept[j++];
		encode_batch(e, nb);
	}
	ss_writer *w = out_w;
	out_w = NULL;
	if (ss_writer_close(w, err))
		cli_die("%s: %s", tmp, err[0] ? err : "write failed");
	double encode_s = cli_now() - t1;
	struct stat st;
	if (stat(tmp, &st))
		cli_die("%s: %s", tmp, strerror(errno));
	unlink(tmp);
	free(tmp);
	double per_record = s.n ? (double)st.st_size / s.n : 0;
	/* Time scales with the tokens (the prefill), or with the documents when the
	 * sample has none (each is then a state copied out). */
	double scale = sample_tok ? (double)s.n_tok / (double)sample_tok : s.n ? (double)s.n_docs / s.n : 0;
	printf("documents         %lld\n"
	       "tokens            %lld\n"
	       "sample_documents  %d\n"
	       "sample_tokens     %lld\n"
	       "sample_seconds    %.3f\n"
	       "tokens_per_s      %.0f\n"
	       "record_bytes      %.0f\n"
	       "state_bytes       %.0f\n"
	       "read_seconds      %.3f\n"
	       "encode_seconds    %.3f\n",
	       s.n_docs, s.n_tok, s.n, sample_tok, encode_s,
	       encode_s > 0 ? (double)sample_tok / encode_s : 0.0, per_record, per_record * (double)s.n_docs,
	       read_s, read_s + encode_s * scale);
}

static void encoder_free(encoder *e)
{
	free(e->cid);
	for (int k = 0; k < 2 && e->set[k]; k++) {
		for (int i = 0; i < e->nst; i++)
			ss_state_free(&e->set[k][i]);
		free(e->set[k]);
	}
	free(e->docs);
	free(e->seqs);
	ss_state_free(&e->base);
	ss_forward_ctx_free(e->ctx);
}

/* Closes the output (renamed into place) and prints -v's summary. */
static void finish(const encoder *e, double t0)
{
	char err[SS_ERRMSG_MAX] = "";
	const char *out_path = e->o->out_path;
	ss_writer *w = out_w;
	out_w = NULL;
	if (ss_writer_close(w, err))
		cli_die("%s: %s", out_path ? out_path : "standard output", err[0] ? err : "write failed");
	if (cli_verbosity >= 2) {
		double elapsed_s = cli_now() - t0;
		fprintf(stderr, "ss-encode: %lld %s, %lld tokens in %.3g s (%.0f tokens/s)\n",
			e->n_docs, cli_plural((uint64_t)e->n_docs, "document", "documents"), e->n_tok,
			elapsed_s, elapsed_s > 0 ? e->n_tok / elapsed_s : 0.0);
	}
}

int main(int argc, char **argv)
{
	cli_init("ss-encode");
	encode_opts o;
	input in;
	parse_args(argc, argv, &o);
	ss_device *dev = mcli_device(o.mo.device, usage);
	open_inputs(argc, argv, &o, &in);

	/* State extraction never needs an untied lm_head: do not keep it. */
	encoder e = { .o = &o };
	e.m = mcli_load_model(o.model_dir, SS_MODEL_SKIP_LM_HEAD, o.mo.weights_dtype, usage);
	in.vocab = mcli_vocab(e.m);
	if (o.text)
		in.tok = cli_tokenizer(o.mo.tokenizer, o.model_dir);
	char err[SS_ERRMSG_MAX] = "";
	e.ctx = mcli_forward_ctx(e.m, o.model_dir, dev, o.mo.threads);
	if (o.deterministic && ss_forward_ctx_set_deterministic(e.ctx, 1))
		cli_die("--deterministic: only the CPU promises it, not --device %s", o.mo.device);
	if (!o.estimate && ss_writer_open(&out_w, o.out_path ? o.out_path : "-", 0, err))
		cli_die("%s: %s", o.out_path ? o.out_path : "standard output", err);
	encoder_alloc(&e);

	/* The clock covers reading the inputs (the starting state, the documents),
	 * encoding and writing, as ss-compose's covers reading, composing and
	 * writing; not loading the model or setting up the device. */
	double t0 = cli_now();
	cli_progress_begin();
	if (o.from_path) {
		mcli_states src;
		mcli_states_open(&src, o.from_path, 0);
		mcli_states_next(&src, e.m, o.model_dir, &e.base);
		mcli_states_close(&src);
		e.basep = &e.base;
	}
	if (o.sel.ids_path) {
		selection_load(&o.sel);
		selection_gather(&in, &o.sel);
	}
	if (o.estimate) {
		estimate(&e, &in, &o.sel);
	} else {
		encode_all(&e, &in, &o.sel, t0);
		cli_progress_end();
		finish(&e, t0);
	}
	encoder_free(&e);
	ss_device_close(dev);
	input_close(&in);
	selection_free(&o.sel);
	ss_tokenizer_free(in.tok);
	ss_model_free(e.m);
	return 0;
}
