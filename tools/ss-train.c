/*
 * ss-train — fine-tunes a Mamba-2 model on the CPU (lib/ss_train.h: f32
 * master weights, forward with saved activations, backward, AdamW) and
 * writes checkpoints that every ss tool loads.
 *
 * Objectives (picaso.txt §5, §6):
 *   lm    next-token loss on the documents of a token stream, each window of
 *         a document from the zero state;
 *   bp2c  loss on an example's continuation given its query, starting from
 *         the composition of its chunks' stored states (a constant);
 *   bptc  the same loss, the chunks re-encoded in the step and the gradient
 *         taken through the composition into their encodings
 *         (lib/train/train_bptc.c).
 * bp2c and bptc share the example reader (ex_source), the choice of k
 * (ex_take_k) and the index of the chunks by id (chunk_db: bp2c over a
 * state stream, bptc over the chunks' token stream).
 *
 * The run's state (step, data position, RNG, hyperparameters) goes to
 * DIR/trainer_state.json, Adam's moments to DIR/optimizer.safetensors: a
 * run resumed from DIR continues bit for bit as if never stopped (same
 * --threads).
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "train_state.h"
#include "model_cli.h"
#include "ss.h"

static const char *usage =
	"ss-train --objective lm|bp2c|bptc -o DIR [--model DIR | --resume DIR] --data FILE\n"
	"                [--states FILE | --chunk-tokens FILE] [--mode MODE] [--steps N] [--until S] [--lr X]\n"
	"                [--min-lr X] [--warmup N] [--weight-decay X] [--clip X]\n"
	"                [--seq-len N] [--batch-tokens N] [--batch-seqs N] [--seed N]\n"
	"                [--max-k N] [--loss-after TEXT] [--save-every N] [--save-dtype T]\n"
	"                [--tokenizer FILE] [--threads N] [-q|-v]";

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Fine-tune a Mamba-2 model on the CPU and write it as a model directory\n"
	       "(config.json + model.safetensors) that every ss tool loads, plus the\n"
	       "optimiser state (trainer_state.json, optimizer.safetensors) --resume reads.\n"
	       "One JSON line per step on stdout: {\"step\", \"loss\", \"lr\", \"grad_norm\",\n"
	       "\"tokens\", \"seqs\"} (the loss of the weights before the step's update;\n"
	       "bp2c and bptc add \"k\": each example's number of composed chunks).\n\n"
	       "  --objective OBJ        lm: next-token loss on the documents of the token\n"
	       "                         stream --data, windows of --seq-len tokens, each\n"
	       "                         from the zero state; bp2c: continuation loss from\n"
	       "                         the composed stored states of an example's chunks;\n"
	       "                         bptc: the same loss, the chunks re-encoded in the\n"
	       "                         step and differentiated through the composition\n"
	       "  --data FILE            lm: a token stream (ss-tokens(5)); bp2c, bptc: JSON lines\n"
	       "                         {\"query\", \"continuation\", \"chunks\": [ids]} (or\n"
	       "                         \"query_tokens\"/\"continuation_tokens\" arrays),\n"
	       "                         chunks most relevant first; read again from the\n"
	       "                         start at its end\n"
	       "  --states FILE          bp2c: state stream holding every chunk id (ss-encode)\n"
	       "  --chunk-tokens FILE    bptc: token stream holding every chunk id (each chunk\n"
	       "                         is encoded whole: the step holds activations for\n"
	       "                         the longest chunk or --batch-tokens, the larger)\n"
	       "  --mode MODE            bp2c, bptc composition: picaso-r (default), picaso-s,\n"
	       "                         caso, soup\n"
	       "  --max-k N              bp2c, bptc: k drawn uniformly from 0..min(N, chunks) per\n"
	       "                         example (default 10); the first k chunks, the most\n"
	       "                         relevant composed last (nearest the query)\n"
	       "  -o, --output DIR       checkpoint directory (replaced whole at the end)\n"
	       "  --resume DIR           continue the run saved in DIR (its weights, optimiser,\n"
	       "                         data position, RNG and options; --steps and --until\n"
	       "                         may be given again)\n"
	       "  --steps N              length of the schedule in steps (default 100)\n"
	       "  --until S              stop after step S (default: --steps)\n"
	       "  --save-every N         also write the checkpoint every N steps\n"
	       "  --lr X                 peak learning rate (default 3e-4)\n"
	       "  --min-lr X             learning rate at the end of the cosine (default 0)\n"
	       "  --warmup N             linear warmup steps (default 0)\n"
	       "  --weight-decay X       AdamW decoupled weight decay (default 0.1)\n"
	       "  --clip X               clip the gradient's global L2 norm to X; 0 = none\n"
	       "                         (default 1)\n"
	       "  --seq-len N            lm: tokens per window (default 256)\n"
	       "  --loss-after TEXT      lm: count the loss only on the tokens after the first\n"
	       "                         occurrence of TEXT's tokens in each document (none\n"
	       "                         in a document without it): a context, then questions\n"
	       "  --batch-tokens N       tokens per step at most (default 1024; >= --seq-len)\n"
	       "  --batch-seqs N         sequences (windows, examples) per step at most\n"
	       "                         (default 16; each holds its states in memory)\n"
	       "  --seed N               seed of the RNG that draws k (default 1)\n"
	       "  --save-dtype T         dtype of the saved weights: f32, bf16, f16 (default:\n"
	       "                         the input model's)\n",
	       usage);
	cli_model_help(25);
	printf("  -q, -v                 quieter; more verbose\n"
	       "  -h, --help             this help;  -V, --version  the version\n\n"
	       "AdamW (beta1 0.9, beta2 0.95, eps 1e-8); learning rate: linear warmup to\n"
	       "--lr, then a cosine to --min-lr at --steps. Same --threads for bit-identical\n"
	       "resumption. Training runs on the CPU (--device cpu or auto); the master\n"
	       "weights are f32 (--weights-dtype is refused; see --save-dtype).\n\n");
	cli_defaults_help();
	exit(0);
}

/* ------------------------------------------------------------ the run */

/* Uniform in [0, n), from splitmix64 (a seeded generator whose whole state
 * is one integer: trainer_state.json's "rng"). */
static uint64_t rng_below(uint64_t *x, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)ss_splitmix64(x) * n) >> 64);
}

/* Learning rate of step s (1-based): linear warmup, then cosine. */
static double lr_at(const run_state *r, int64_t s)
{
	if (s <= r->warmup)
		return r->lr * (double)s / (double)r->warmup;
	double span = (double)(r->steps - r->warmup);
	double p = span > 0 ? (double)(s - r->warmup) / span : 1;
	if (p > 1)
		p = 1;
	return r->min_lr + 0.5 * (r->lr - r->min_lr) * (1 + cos(M_PI * p));
}

/* A batch: packed sequences for ss_train_forward. */
typedef struct {
	int32_t *tokens, *targets; /* [batch_tokens] */
	int64_t *seq_start;        /* [max_seqs+1] */
	int nseq;
	int64_t T, ntargets;
	float *conv, *ssm;         /* [max_seqs][..] initial states (bp2c) */
} batch;

/* ------------------------------------------------- lm: token documents */

typedef struct {
	const char *path;
	ss_reader *r;
	ss_tokens doc;       /* current document (n_tokens 0: none) */
	int64_t doc_offset;  /* its record's byte offset */
	int64_t pos;
	int64_t epoch;
	int32_t vocab;
	int any;             /* a usable document was seen this epoch */
	int32_t *sep;        /* --loss-after's tokens [nsep], or NULL */
	size_t nsep;
	int64_t loss_from;   /* the first token of doc that is a counted target */
} lm_source;

/* The index of the first token after the first occurrence of s->sep in the
 * current document (0 without --loss-after; n_tokens when it does not
 * occur: the document then counts no target). */
static int64_t lm_loss_from(const lm_source *s)
{
	if (!s->sep)
		return 0;
	const int32_t *x = s->doc.tokens;
	for (int64_t i = 0; i + (int64_t)s->nsep <= s->doc.n_tokens; i++)
		if (!memcmp(x + i, s->sep, s->nsep * sizeof *x))
			return i + (int64_t)s->nsep;
	return s->doc.n_tokens;
}

static void lm_read_doc(lm_source *s)
{
	char err[SS_ERRMSG_MAX] = "";
	for (;;) {
		const ss_record *rec;
		int rc = ss_reader_next(s->r, &rec);
		if (rc < 0)
			cli_die("%s: %s", s->path, ss_reader_error(s->r));
		if (rc == 0) {
			if (!s->any)
				cli_die("%s: no document of 2 tokens or more", s->path);
			if ((rc = ss_reader_seek(s->r, 0)))
				cli_die("%s: cannot read it again from the start (%s): give a "
					"regular file", s->path, ss_strerror(rc));
			s->epoch++;
			s->any = 0;
			continue;
		}
		ss_tokens_free(&s->doc);
		if (strcmp(ss_record_format(rec), SS_FORMAT_TOKENS))
			cli_die("%s: record %llu: a %s record, expected tokens (ss-tokens(5))",
				s->path, (unsigned long long)ss_record_index(rec),
				ss_record_format(rec));
		if ((rc = ss_record_tokens(rec, &s->doc, err)))
			cli_die("%s: record %llu: %s", s->path,
				(unsigned long long)ss_record_index(rec), err);
		for (int64_t i = 0; i < s->doc.n_tokens; i++)
			if (s->doc.tokens[i] < 0 || s->doc.tokens[i] >= s->vocab)
				cli_die("%s: record %llu: token %lld is %d, outside the model's "
					"vocabulary [0, %d)", s->path,
					(unsigned long long)ss_record_index(rec), (long long)i,
					(int)s->doc.tokens[i], (int)s->vocab);
		s->doc_offset = (int64_t)ss_record_offset(rec);
		s->pos = 0;
		s->loss_from = lm_loss_from(s);
		if (s->doc.n_tokens >= 2) {
			s->any = 1;
			return;
		}
	}
}

static void lm_open(lm_source *s, const run_state *r, int32_t vocab, const char *tok_path,
		    const char *model_dir)
{
	char err[SS_ERRMSG_MAX] = "";
	memset(s, 0, sizeof *s);
	s->path = r->data;
	s->vocab = vocab;
	if (r->loss_after) {
		ss_tokenizer *tok = cli_tokenizer(tok_path, model_dir);
		int rc = ss_tokenizer_encode(tok, r->loss_after, strlen(r->loss_after), &s->sep,
					     &s->nsep, err);
		ss_tokenizer_free(tok);
		if (rc)
			cli_die("--loss-after: %s", err[0] ? err : ss_strerror(rc));
		if (!s->nsep)
			cli_die("--loss-after: the text is no token");
	}
	s->epoch = r->epoch;
	if (ss_reader_open(&s->r, r->data, cli_max_record(), err))
		cli_die("%s: %s", r->data, err);
	if (r->offset >= 0) {
		if (ss_reader_seek(s->r, (uint64_t)r->offset))
			cli_die("%s: cannot seek to byte %lld to resume", s->path,
				(long long)r->offset);
		s->any = 1;
		lm_read_doc(s);
		if (s->doc_offset != r->offset || r->pos >= s->doc.n_tokens - 1)
			cli_die("%s: not the stream the run was saved with (byte %lld)", s->path,
				(long long)r->offset);
		s->pos = r->pos;
	} else {
		lm_read_doc(s);
	}
}

/* Adds the next window of at most seq_len inputs to b when it fits in
 * `room` tokens; returns 0 (and consumes nothing) when it does not. The next
 * window starts at this one's last token, so every token after a
 * document's first is a target once. */
static int lm_take(lm_source *s, batch *b, int64_t seq_len, int64_t room)
{
	if (s->pos + 1 >= s->doc.n_tokens)
		lm_read_doc(s);
	int64_t n = s->doc.n_tokens - 1 - s->pos;
	if (n > seq_len)
		n = seq_len;
	if (n > room)
		return 0;
	const int32_t *x = s->doc.tokens + s->pos;
	memcpy(b->tokens + b->T, x, (size_t)n * sizeof *x);
	/* Target i is token pos + 1 + i of the document. */
	for (int64_t i = 0; i < n; i++) {
		int counted = s->pos + 1 + i >= s->loss_from;
		b->targets[b->T + i] = counted ? x[i + 1] : -1;
		b->ntargets += counted;
	}
	b->T += n;
	b->seq_start[++b->nseq] = b->T;
	s->pos += n;
	return 1;
}

/* The position run_state records: the next window's start. */
static void lm_tell(lm_source *s, run_state *r)
{
	if (s->pos + 1 >= s->doc.n_tokens)
		lm_read_doc(s);
	r->offset = s->doc_offset;
	r->pos = s->pos;
	r->epoch = s->epoch;
}

static void lm_close(lm_source *s)
{
	ss_tokens_free(&s->doc);
	ss_reader_close(s->r);
	free(s->sep);
}

/* ------------------------------------ bp2c / bptc: retrieval examples */

/* One example: query and continuation tokens and its chunks' ids (most
 * relevant first). What bp2c and BPTC read alike. */
typedef struct {
	int32_t *q, *c;
	size_t nq, nc;
	char **chunks;
	size_t n_chunks;
	char where[600];
} example;

static void example_free(example *e)
{
	free(e->q);
	free(e->c);
	for (size_t i = 0; i < e->n_chunks; i++)
		free(e->chunks[i]);
	free(e->chunks);
	memset(e, 0, sizeof *e);
}

typedef struct {
	mcli_jsonl j;
	ss_tokenizer *tok;
	const char *tok_path, *model_dir;
	int32_t vocab;
	example next;       /* read ahead, not yet in a batch */
	int have_next;
	int64_t next_offset; /* byte offset of its line */
	int64_t epoch;
	int any;
} ex_source;

static int32_t *ex_ids(ex_source *s, const cJSON *o, const char *key, const char *key_tokens,
		       size_t *n, const char *where)
{
	int32_t *ids = mcli_json_token_ids(o, key_tokens, n, where);
	if (!ids) {
		const cJSON *str = cJSON_GetObjectItemCaseSensitive(o, key);
		char err[SS_ERRMSG_MAX] = "";
		if (!cJSON_IsString(str))
			cli_die("%s: missing \"%s\" (a string) or \"%s\"", where, key, key_tokens);
		if (!s->tok)
			s->tok = cli_tokenizer(s->tok_path, s->model_dir);
		int rc = ss_tokenizer_encode(s->tok, str->valuestring, strlen(str->valuestring),
					     &ids, n, err);
		if (rc)
			cli_die("%s: %s", where, err[0] ? err : ss_strerror(rc));
	}
	for (size_t i = 0; i < *n; i++)
		if (ids[i] < 0 || ids[i] >= s->vocab)
			cli_die("%s: %s token %zu is %d, outside the model's vocabulary [0, %d)",
				where, key, i, (int)ids[i], (int)s->vocab);
	return ids;
}

/* Reads the next example into s->next, from the start again at the end. */
static void ex_read(ex_source *s)
{
	for (;;) {
		long off = ftell(s->j.f);
		cJSON *o = mcli_jsonl_next(&s->j, "{\"query\": \"text\", \"continuation\": \"text\", "
						  "\"chunks\": [\"id\"]}");
		if (!o) {
			if (!s->any)
				cli_die("%s: no example", s->j.path);
			if (fseek(s->j.f, 0, SEEK_SET))
				cli_die("%s: cannot read it again from the start: give a regular "
					"file", s->j.path);
			s->j.lineno = 0;
			s->epoch++;
			s->any = 0;
			continue;
		}
		example *e = &s->next;
		const char *where = s->j.where;
		snprintf(e->where, sizeof e->where, "%s", where);
		e->q = ex_ids(s, o, "query", "query_tokens", &e->nq, where);
		e->c = ex_ids(s, o, "continuation", "continuation_tokens", &e->nc, where);
		if (!e->nq || !e->nc)
			cli_die("%s: empty %s", where, !e->nq ? "query" : "continuation");
		const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "chunks"), *x;
		if (!cJSON_IsArray(ch))
			cli_die("%s: missing \"chunks\" (an array of chunk ids)", where);
		size_t n = (size_t)cJSON_GetArraySize(ch);
		if (!(e->chunks = calloc(n ? n : 1, sizeof *e->chunks)))
			cli_die("out of memory");
		cJSON_ArrayForEach(x, ch) {
			char buf[32];
			if (cJSON_IsString(x))
				e->chunks[e->n_chunks] = strdup(x->valuestring);
			else if (cJSON_IsNumber(x))
				snprintf(buf, sizeof buf, "%.17g", x->valuedouble),
					e->chunks[e->n_chunks] = strdup(buf);
			else
				cli_die("%s: \"chunks\" entry %zu is not an id", where, e->n_chunks);
			if (!e->chunks[e->n_chunks++])
				cli_die("out of memory");
		}
		cJSON_Delete(o);
		s->next_offset = off;
		s->have_next = 1;
		s->any = 1;
		return;
	}
}

static void ex_open(ex_source *s, const run_state *r, const char *tok_path, const char *model_dir,
		    int32_t vocab)
{
	memset(s, 0, sizeof *s);
	s->tok_path = tok_path;
	s->model_dir = model_dir;
	s->vocab = vocab;
	s->epoch = r->epoch;
	mcli_jsonl_open(&s->j, r->data);
	if (r->offset > 0) {
		if (fseek(s->j.f, (long)r->offset, SEEK_SET))
			cli_die("%s: cannot seek to byte %lld to resume", r->data,
				(long long)r->offset);
		s->any = 1;
	}
	ex_read(s);
}

/* Takes the read-ahead example out (the caller frees it) and reads on. */
static void ex_take(ex_source *s, example *out)
{
	*out = s->next;
	memset(&s->next, 0, sizeof s->next);
	ex_read(s);
}

/* k for one example: uniform in {0, ..., min(max_k, available)}
 * (picaso.txt §6.2), from the run's RNG. */
static size_t ex_take_k(uint64_t *rng, size_t available, int64_t max_k)
{
	size_t hi = available < (size_t)max_k ? available : (size_t)max_k;
	return (size_t)rng_below(rng, hi + 1);
}

static void ex_tell(const ex_source *s, run_state *r)
{
	r->offset = s->next_offset;
	r->pos = 0;
	r->epoch = s->epoch;
}

static void ex_close(ex_source *s)
{
	example_free(&s->next);
	mcli_jsonl_close(&s->j);
	ss_tokenizer_free(s->tok);
}

/* The chunks' records by id: id → byte offset of its record in a stream
 * (bp2c: the states of --states; BPTC: the chunks' token records). */
typedef struct {
	char *id;
	uint64_t offset;
} chunk_ref;

typedef struct {
	const char *path;
	ss_reader *r;
	chunk_ref *ref;
	size_t n;
	int64_t max_tokens; /* token records: the longest one's n_tokens */
} chunk_db;

static int ref_cmp(const void *a, const void *b)
{
	return strcmp(((const chunk_ref *)a)->id, ((const chunk_ref *)b)->id);
}

/* Indexes every record of `path`, each of format `format` (SS_FORMAT_STATES:
 * made by the model of `fingerprint` with the dims of cfg; SS_FORMAT_TOKENS:
 * fingerprint and cfg unused). Memory: the ids and offsets. */
static void db_open(chunk_db *db, const char *path, const char *format, const char *fingerprint,
		    const ss_model_config *cfg)
{
	char err[SS_ERRMSG_MAX] = "";
	size_t cap = 0;
	ss_state_dims want;
	ss_model dims_of = { .cfg = *cfg };
	memset(db, 0, sizeof *db);
	db->path = path;
	ss_model_state_dims(&dims_of, &want);
	if (ss_reader_open(&db->r, path, cli_max_record(), err))
		cli_die("%s: %s", path, err);
	if (!ss_reader_seekable(db->r))
		cli_die("%s: not a regular file (its records are read by id)", path);
	const ss_record *rec;
	int rc;
	while ((rc = ss_reader_next_meta(db->r, &rec)) > 0) {
		uint64_t i = ss_record_index(rec);
		char *id = NULL;
		if (strcmp(ss_record_format(rec), format))
			cli_die("%s: record %llu: a %s record, expected %s", path,
				(unsigned long long)i, ss_record_format(rec), format);
		if (!strcmp(format, SS_FORMAT_STATES)) {
			ss_state s;
			if ((rc = ss_record_state_meta(rec, &s, err)))
				cli_die("%s: record %llu: %s", path, (unsigned long long)i, err);
			if (strcmp(s.fingerprint, fingerprint))
				cli_die("%s: record %llu: made by model %s, not by the model trained "
					"(%s)", path, (unsigned long long)i, s.fingerprint, fingerprint);
			if (ss_state_dims_check(&s.dims, &want, err))
				cli_die("%s: record %llu: not the dims of the model trained (%s)", path,
					(unsigned long long)i, err);
			id = strdup(s.id ? s.id : "");
			ss_state_free(&s);
		} else {
			ss_tokens t;
			if ((rc = ss_record_tokens(rec, &t, err)))
				cli_die("%s: record %llu: %s", path, (unsigned long long)i, err);
			id = strdup(t.id ? t.id : "");
			if (t.n_tokens > db->max_tokens)
				db->max_tokens = t.n_tokens;
			ss_tokens_free(&t);
		}
		if (!id)
			cli_die("out of memory");
		db->ref = mcli_grow(db->ref, db->n, &cap, sizeof *db->ref);
		db->ref[db->n].id = id;
		db->ref[db->n++].offset = ss_record_offset(rec);
	}
	if (rc < 0)
		cli_die("%s: %s", path, ss_reader_error(db->r));
	qsort(db->ref, db->n, sizeof *db->ref, ref_cmp);
}

/* The record of chunk `id` (valid until the next read of db); dies naming
 * the example. */
static const ss_record *db_get(chunk_db *db, const char *id, const char *where)
{
	chunk_ref key = { (char *)id, 0 };
	const chunk_ref *f = bsearch(&key, db->ref, db->n, sizeof *db->ref, ref_cmp);
	const ss_record *rec;
	if (!f)
		cli_die("%s: chunk \"%s\" is not in %s", where, id, db->path);
	if (ss_reader_seek(db->r, f->offset) || ss_reader_next(db->r, &rec) != 1)
		cli_die("%s: %s", db->path, ss_reader_error(db->r));
	return rec;
}

/* Reads the state of chunk `id` into *s; dies naming the example. */
static void db_get_state(chunk_db *db, const char *id, ss_state *s, const char *where)
{
	char err[SS_ERRMSG_MAX] = "";
	if (ss_record_state(db_get(db, id, where), s, err))
		cli_die("%s: %s", db->path, err);
}

static void db_close(chunk_db *db)
{
	for (size_t i = 0; i < db->n; i++)
		free(db->ref[i].id);
	free(db->ref);
	ss_reader_close(db->r);
}

/* Appends example e to b as one sequence from the composition of its first
 * k chunks (the most relevant last, nearest the query; k = 0: the zero
 * state): inputs q ++ c without c's last token, targets c. */
static void bp2c_add(batch *b, const example *e, size_t k, chunk_db *db, ss_compose_mode mode,
		     size_t conv_len, size_t ssm_len)
{
	char err[SS_ERRMSG_MAX] = "";
	float *conv = b->conv + (size_t)b->nseq * conv_len, *ssm = b->ssm + (size_t)b->nseq * ssm_len;
	if (k == 0) {
		memset(conv, 0, conv_len * sizeof *conv);
		memset(ssm, 0, ssm_len * sizeof *ssm);
	} else {
		ss_state *in = calloc(k, sizeof *in), out;
		const ss_state **pin = calloc(k, sizeof *pin);
		if (!in || !pin)
			cli_die("out of memory");
		for (size_t i = 0; i < k; i++) {
			db_get_state(db, e->chunks[k - 1 - i], &in[i], e->where);
			pin[i] = &in[i];
		}
		ss_compose_opts o = { .mode = mode };
		if (ss_compose(&o, pin, k, &out, err))
			cli_die("%s: %s", e->where, err);
		memcpy(conv, out.conv, conv_len * sizeof *conv);
		memcpy(ssm, out.ssm, ssm_len * sizeof *ssm);
		ss_state_free(&out);
		for (size_t i = 0; i < k; i++)
			ss_state_free(&in[i]);
		free(in);
		free(pin);
	}
	int64_t T = b->T;
	for (size_t i = 0; i < e->nq; i++) {
		b->tokens[T + (int64_t)i] = e->q[i];
		b->targets[T + (int64_t)i] = -1;
	}
	for (size_t i = 0; i + 1 < e->nc; i++)
		b->tokens[T + (int64_t)(e->nq + i)] = e->c[i];
	for (size_t i = 0; i < e->nc; i++)
		b->targets[T + (int64_t)(e->nq - 1 + i)] = e->c[i];
	b->T += (int64_t)(e->nq + e->nc - 1);
	b->ntargets += (int64_t)e->nc;
	b->seq_start[++b->nseq] = b->T;
}

/* Multiplies every gradient by f. */
static void grads_scale(ss_train_params *G, double f)
{
	const float s = (float)f;
	for (size_t i = 0; i < G->n; i++)
		G->data[i] *= s;
}

/* One BPTC step over the examples es[0..n), es[i] composing its first
 * ks[i] chunks (token records in db, the most relevant composed last):
 * leaves in G the gradient of the mean NLL over all n examples'
 * continuation tokens (ntargets of them, as bp2c's batch loss) and returns
 * that loss. ss_train_bptc adds the gradient of one example's own mean
 * NLL, g_i; the step wants Σ w_i·g_i with w_i = n_cont_i / ntargets, so
 * before example i the sum so far is rescaled by w_(i-1) / w_i (G then
 * holds Σ_(j<=i) (w_j / w_i)·g_j) and by w_(n-1) after the last. */
static double bptc_step(ss_train *t, ss_train_params *G, const example *es, const int *ks, int n,
			int64_t ntargets, chunk_db *db, ss_compose_mode mode, int64_t step)
{
	char err[SS_ERRMSG_MAX] = "";
	double sum = 0, w_prev = 1;
	ss_train_zero_grad(t);
	for (int i = 0; i < n; i++) {
		const example *e = &es[i];
		const size_t k = (size_t)ks[i];
		ss_tokens *tk = calloc(k + 1, sizeof *tk);
		const int32_t **chunks = calloc(k + 1, sizeof *chunks);
		int64_t *len = calloc(k + 1, sizeof *len);
		if (!tk || !chunks || !len)
			cli_die("out of memory");
		for (size_t j = 0; j < k; j++) {
			const char *id = e->chunks[k - 1 - j];
			if (ss_record_tokens(db_get(db, id, e->where), &tk[j], err))
				cli_die("%s: %s", db->path, err);
			if (tk[j].n_tokens < 1)
				cli_die("%s: chunk \"%s\" has no tokens", e->where, id);
			chunks[j] = tk[j].tokens;
			len[j] = tk[j].n_tokens;
		}
		const double w = (double)e->nc / (double)ntargets;
		if (i > 0)
			grads_scale(G, w_prev / w);
		ss_train_bptc_example x = { .chunks = chunks, .chunk_len = len, .k = (int)k,
					    .query = e->q, .n_query = (int64_t)e->nq,
					    .cont = e->c, .n_cont = (int64_t)e->nc, .mode = (int)mode };
		double loss;
		int rc = ss_train_bptc(t, &x, &loss);
		if (rc)
			cli_die("step %lld: %s: BPTC: %s", (long long)step, e->where, ss_strerror(rc));
		sum += loss * (double)e->nc;
		w_prev = w;
		for (size_t j = 0; j < k; j++)
			ss_tokens_free(&tk[j]);
		free(tk), free(chunks), free(len);
	}
	grads_scale(G, w_prev);
	return sum / (double)ntargets;
}

/* ------------------------------------------------------ checkpoints */

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4200];
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	rmdir(dir);
}

static void copy_file(const char *from, const char *to)
{
	size_t len;
	FILE *in = fopen(from, "rb");
	if (!in)
		return; /* no tokenizer beside the model: the defaults find one */
	fclose(in);
	char *buf = mcli_read_file(from, &len);
	FILE *f = cli_out_open(to);
	if (fwrite(buf, 1, len, f) != len)
		cli_die("%s: write error", to);
	cli_out_close(f);
	free(buf);
}

/* The checkpoint directory being written, removed if the program exits
 * before it is renamed into place. */
static char save_tmp[4096];

static void save_cleanup(void)
{
	if (save_tmp[0])
		rm_tree(save_tmp);
}

/* Writes the checkpoint into a fresh directory beside `dir`, then puts it in
 * dir's place: dir holds a whole checkpoint, the old or the new one. */
static void save(const char *dir, const run_state *r, ss_train *t, const ss_model_config *cfg,
		 const float *am, const float *av, const char *model_dir)
{
	char err[SS_ERRMSG_MAX] = "", tmp[4096], old[4096], p[4200], q[4200];
	ss_train_params *P = ss_train_params_of(t);
	/* a non-finite checkpoint would replace the last good one in dir */
	const struct { const char *what; const float *x; int nonneg; } chk[] = {
		{ "", P->data, 0 }, { "Adam's m: ", am, 0 }, { "Adam's v: ", av, 1 } };
	for (int i = 0; i < 3; i++)
		if (ss_train_params_check(cfg, P, chk[i].x, chk[i].nonneg, err))
			cli_die("%s: step %lld: %s%s; the checkpoint is not written", dir,
				(long long)r->step, chk[i].what, err);
	snprintf(tmp, sizeof tmp, "%s.tmp-%ld", dir, (long)getpid());
	snprintf(old, sizeof old, "%s.old-%ld", dir, (long)getpid());
	rm_tree(tmp);
	snprintf(save_tmp, sizeof save_tmp, "%s", tmp);
	if (mkdir(tmp, 0777))
		cli_die("%s: %s", tmp, strerror(errno));
	if (ss_train_save_model(tmp, cfg, P, r->save_dtype, err))
		goto fail;
	ss_tensor_f32 opt[3] = {
		{ "m", 1, { (int64_t)P->n }, am },
		{ "v", 1, { (int64_t)P->n }, av },
		{ "master", 1, { (int64_t)P->n }, P->data },
	};
	snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
	/* the f32 master weights too when the model is saved rounded */
	if (ss_safetensors_save(p, opt, r->save_dtype == SS_DTYPE_F32 ? 2 : 3, SS_DTYPE_F32, err))
		goto fail;
	cJSON *js = train_state_json(r);
	char *text = cJSON_Print(js);
	cJSON_Delete(js);
	if (!text)
		cli_die("out of memory");
	snprintf(p, sizeof p, "%s/trainer_state.json", tmp);
	FILE *f = cli_out_open(p);
	fprintf(f, "%s\n", text);
	cli_out_close(f);
	free(text);
	snprintf(p, sizeof p, "%s/tokenizer.json", model_dir);
	snprintf(q, sizeof q, "%s/tokenizer.json", tmp);
	copy_file(p, q);
	struct stat st;
	int had = stat(dir, &st) == 0;
	if (had && rename(dir, old))
		cli_die("%s: %s", dir, strerror(errno));
	if (rename(tmp, dir))
		cli_die("%s: %s", dir, strerror(errno));
	save_tmp[0] = 0;
	if (had)
		rm_tree(old);
	return;
fail:
	cli_die("%s", err);
}

/* Reads DIR/trainer_state.json into r (train_state_parse: every field
 * checked against the bounds of its option); dies naming the file and the
 * field. */
static void load_state(const char *dir, run_state *r)
{
	char p[4200], err[SS_ERRMSG_MAX] = "";
	size_t len;
	snprintf(p, sizeof p, "%s/trainer_state.json", dir);
	char *text = mcli_read_file(p, &len);
	int rc = train_state_parse(text, len, p, r, err);
	free(text);
	if (rc)
		cli_die("%s", err);
}

/* ------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	cli_init("ss-train");
	atexit(save_cleanup);
	const char *out_dir = NULL, *resume = NULL, *objective = NULL, *mode = NULL, *sdtype = NULL;
	run_state r = { .steps = 100, .lr = 3e-4, .weight_decay = 0.1, .clip = 1, .seq_len = 256,
			.batch_tokens = 1024, .batch_seqs = 16, .max_k = 10, .seed = 1, .mode = SS_COMPOSE_PICASO_R,
			.offset = -1 };
	int64_t until = -1, save_every = 0;
	int given_steps = 0, given_hyper = 0;
	cli_model_opts mo = { 0 };
	enum { O_OBJ = 256, O_DATA, O_STATES, O_CHUNK_TOKENS, O_MODE, O_MAXK, O_RESUME, O_STEPS, O_UNTIL, O_LR,
	       O_MINLR, O_WARMUP, O_WD, O_CLIP, O_SEQ, O_BATCH, O_BSEQS, O_SEED, O_SDTYPE, O_SAVE_EVERY,
	       O_LOSS_AFTER };
	static const struct option opts[] = {
		{ "objective", required_argument, 0, O_OBJ },
		{ "data", required_argument, 0, O_DATA },
		{ "states", required_argument, 0, O_STATES },
		{ "chunk-tokens", required_argument, 0, O_CHUNK_TOKENS },
		{ "mode", required_argument, 0, O_MODE },
		{ "max-k", required_argument, 0, O_MAXK },
		{ "resume", required_argument, 0, O_RESUME },
		{ "steps", required_argument, 0, O_STEPS },
		{ "until", required_argument, 0, O_UNTIL },
		{ "lr", required_argument, 0, O_LR },
		{ "min-lr", required_argument, 0, O_MINLR },
		{ "warmup", required_argument, 0, O_WARMUP },
		{ "weight-decay", required_argument, 0, O_WD },
		{ "clip", required_argument, 0, O_CLIP },
		{ "seq-len", required_argument, 0, O_SEQ },
		{ "batch-tokens", required_argument, 0, O_BATCH },
		{ "batch-seqs", required_argument, 0, O_BSEQS },
		{ "seed", required_argument, 0, O_SEED },
		{ "save-dtype", required_argument, 0, O_SDTYPE },
		{ "save-every", required_argument, 0, O_SAVE_EVERY },
		{ "loss-after", required_argument, 0, O_LOSS_AFTER },
		{ 0, 0, 0, 0 },
	};
	const cli_options co = { NULL, opts, usage, help, &out_dir, &mo };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		given_hyper += c != O_DATA && c != O_STATES && c != O_CHUNK_TOKENS && c != O_RESUME && c != O_STEPS &&
			       c != O_UNTIL && c != O_SAVE_EVERY;
		switch (c) {
		case O_OBJ: objective = optarg; break;
		case O_DATA: r.data = strdup(optarg); break;
		case O_STATES: r.states = strdup(optarg); break;
		case O_CHUNK_TOKENS: r.chunk_tokens = strdup(optarg); break;
		case O_MODE: mode = optarg; break;
		case O_MAXK: r.max_k = cli_long("--max-k", optarg, 0, 1 << 20, usage); break;
		case O_RESUME: resume = optarg; break;
		case O_STEPS:
			r.steps = cli_long("--steps", optarg, 1, 1L << 40, usage);
			given_steps = 1;
			break;
		case O_UNTIL: until = cli_long("--until", optarg, 1, 1L << 40, usage); break;
		case O_LR: r.lr = cli_double("--lr", optarg, 0, 10, usage); break;
		case O_MINLR: r.min_lr = cli_double("--min-lr", optarg, 0, 10, usage); break;
		case O_WARMUP: r.warmup = cli_long("--warmup", optarg, 0, 1L << 40, usage); break;
		case O_WD: r.weight_decay = cli_double("--weight-decay", optarg, 0, 10, usage); break;
		case O_CLIP: r.clip = cli_double("--clip", optarg, 0, 1e30, usage); break;
		case O_SEQ: r.seq_len = cli_long("--seq-len", optarg, 1, 1L << 24, usage); break;
		case O_BATCH:
			r.batch_tokens = cli_long("--batch-tokens", optarg, 1, 1L << 24, usage);
			break;
		case O_BSEQS:
			r.batch_seqs = cli_long("--batch-seqs", optarg, 1, 1 << 16, usage);
			break;
		case O_SEED: r.seed = (uint64_t)cli_long("--seed", optarg, 0, LONG_MAX, usage); break;
		case O_SDTYPE: sdtype = optarg; break;
		case O_LOSS_AFTER: r.loss_after = strdup(optarg); break;
		case O_SAVE_EVERY:
			save_every = cli_long("--save-every", optarg, 1, 1L << 40, usage);
			break;
		}
	}
	if (optind < argc)
		cli_usage(usage, "unexpected argument '%s'", argv[optind]);
	if (!out_dir)
		cli_usage(usage, "-o DIR is required (the checkpoint directory)");
	if (resume && mo.model)
		cli_usage(usage, "--resume DIR is the model: no --model");
	if (mo.wtype)
		cli_usage(usage, "--weights-dtype: ss-train keeps f32 master weights (the saved "
				 "dtype is --save-dtype)");
	if (strcmp(mo.device, "cpu") && strcmp(mo.device, "auto"))
		cli_usage(usage, "--device %s: ss-train runs on the CPU", mo.device);
	if (resume && given_hyper > 0)
		cli_usage(usage, "with --resume the run's options come from %s/trainer_state.json "
				 "(only --steps, --until, --save-every, --data, --states and --chunk-tokens "
				 "may be given)", resume);
	int64_t steps_given = r.steps;
	if (resume) {
		load_state(resume, &r);
		if (given_steps)
			r.steps = steps_given;
		if (r.step > r.steps)
			cli_usage(usage, "--steps %lld: the run in %s is at step %lld", (long long)r.steps,
				  resume, (long long)r.step);
		if (until >= 0 && until < r.step)
			cli_usage(usage, "--until %lld: the run in %s is at step %lld", (long long)until,
				  resume, (long long)r.step);
	} else {
		if (!objective)
			cli_usage(usage, "--objective lm|bp2c|bptc is required");
		r.objective = -1;
		for (int i = 0; i < OBJ_COUNT; i++)
			if (!strcmp(objective, train_objective_names[i]))
				r.objective = i;
		if (r.objective < 0)
			cli_usage(usage, "--objective: '%s': lm, bp2c or bptc", objective);
		if (mode && (ss_compose_mode_parse(mode, &r.mode) || r.mode == SS_COMPOSE_SUM ||
			     r.mode == SS_COMPOSE_MAX))
			cli_usage(usage, "--mode: '%s': picaso-r, picaso-s, caso or soup", mode);
		if (!r.data)
			cli_usage(usage, "--data FILE is required");
		if (r.objective == OBJ_BP2C && !r.states)
			cli_usage(usage, "--objective bp2c needs --states FILE");
		if (r.objective == OBJ_BPTC && !r.chunk_tokens)
			cli_usage(usage, "--objective bptc needs --chunk-tokens FILE");
		if (r.loss_after && r.objective != OBJ_LM)
			cli_usage(usage, "--loss-after belongs to lm (bp2c and bptc count the "
					 "continuation only)");
		if (r.objective == OBJ_LM && r.batch_tokens < r.seq_len)
			cli_usage(usage, "--batch-tokens %lld is less than --seq-len %lld",
				  (long long)r.batch_tokens, (long long)r.seq_len);
		r.rng = r.seed;
	}
	if ((r.states && r.objective != OBJ_BP2C) || (r.chunk_tokens && r.objective != OBJ_BPTC))
		cli_usage(usage, "--states belongs to bp2c, --chunk-tokens to bptc (the objective is %s)",
			  train_objective_names[r.objective]);
	if (until < 0)
		until = r.steps;
	if (until > r.steps)
		cli_usage(usage, "--until %lld is past --steps %lld", (long long)until,
			  (long long)r.steps);

	const char *model_dir = resume ? resume : cli_model_dir(mo.model, usage);
	ss_blas_threads(mo.threads);
	ss_model *m = mcli_load_model(model_dir, 0, "f32", usage);
	if (ss_model_is_mamba1(&m->cfg))
		cli_die("%s: a Mamba-1 model: ss-train fine-tunes Mamba-2 models only", model_dir);
	ss_model_config cfg = m->cfg;
	if (!resume) {
		snprintf(r.base_fingerprint, sizeof r.base_fingerprint, "%s", m->fingerprint);
		r.save_dtype = m->weight_dtype;
		if (sdtype && ss_dtype_parse(sdtype, &r.save_dtype))
			cli_usage(usage, "--save-dtype: '%s': f32, bf16 or f16", sdtype);
	}
	const int max_seqs = (int)(r.batch_seqs < r.batch_tokens ? r.batch_seqs : r.batch_tokens);
	/* bptc encodes each chunk whole: room for the longest one too. */
	chunk_db db = { 0 };
	int64_t max_tokens = r.batch_tokens;
	if (r.objective == OBJ_BPTC) {
		db_open(&db, r.chunk_tokens, SS_FORMAT_TOKENS, NULL, &cfg);
		if (db.max_tokens > max_tokens)
			max_tokens = db.max_tokens;
	}
	ss_train *t = NULL;
	int rc = ss_train_init(&t, m, max_tokens, max_seqs);
	if (!rc)
		rc = ss_train_set_threads(t, mo.threads < SS_TRAIN_MAX_THREADS ? mo.threads
									: SS_TRAIN_MAX_THREADS);
	if (rc)
		cli_die("%s: %s", model_dir, ss_strerror(rc));
	const size_t conv_len = ss_train_conv_len(t), ssm_len = ss_train_ssm_len(t);
	ss_train_params *P = ss_train_params_of(t), *G = ss_train_grads_of(t);
	float *am = calloc(P->n, sizeof *am), *av = calloc(P->n, sizeof *av);
	batch b = { 0 };
	b.tokens = malloc((size_t)r.batch_tokens * sizeof *b.tokens);
	b.targets = malloc((size_t)r.batch_tokens * sizeof *b.targets);
	b.seq_start = malloc(((size_t)max_seqs + 1) * sizeof *b.seq_start);
	int *ks = malloc((size_t)max_seqs * sizeof *ks);
	if (!ks || !am || !av || !b.tokens || !b.targets || !b.seq_start)
		cli_die("out of memory");
	if (resume) {
		char err[SS_ERRMSG_MAX] = "", p[4200];
		snprintf(p, sizeof p, "%s/optimizer.safetensors", resume);
		if (ss_safetensors_load_f32(p, "m", am, P->n, err) ||
		    ss_safetensors_load_f32(p, "v", av, P->n, err) ||
		    (r.save_dtype != SS_DTYPE_F32 &&
		     ss_safetensors_load_f32(p, "master", P->data, P->n, err)))
			cli_die("%s", err);
		/* a negative v makes every weight NaN in the first update */
		if (ss_train_params_check(&cfg, P, am, 0, err))
			cli_die("%s: \"m\": %s", p, err);
		if (ss_train_params_check(&cfg, P, av, 1, err))
			cli_die("%s: \"v\": %s", p, err);
		if (ss_train_params_check(&cfg, P, P->data, 0, err)) {
			if (r.save_dtype == SS_DTYPE_F32)
				snprintf(p, sizeof p, "%s/model.safetensors", resume);
			cli_die("%s: %s%s", p, r.save_dtype == SS_DTYPE_F32 ? "" : "\"master\": ", err);
		}
	}
	const int32_t vocab = mcli_vocab(m);
	ss_model_free(m);

	lm_source lm = { 0 };
	ex_source ex = { 0 };
	if (r.objective == OBJ_LM) {
		lm_open(&lm, &r, vocab, mo.tokenizer, model_dir);
	} else if (r.objective == OBJ_BP2C) {
		b.conv = malloc((size_t)max_seqs * conv_len * sizeof *b.conv);
		b.ssm = malloc((size_t)max_seqs * ssm_len * sizeof *b.ssm);
		if (!b.conv || !b.ssm)
			cli_die("out of memory");
		db_open(&db, r.states, SS_FORMAT_STATES, r.base_fingerprint, &cfg);
		ex_open(&ex, &r, mo.tokenizer, model_dir, vocab);
	} else {
		ex_open(&ex, &r, mo.tokenizer, model_dir, vocab);
	}
	example *exs = calloc((size_t)max_seqs, sizeof *exs); /* bptc: the step's examples */
	if (!exs)
		cli_die("out of memory");

	double t0 = cli_now();
	while (r.step < until) {
		b.T = b.ntargets = 0;
		b.nseq = 0;
		b.seq_start[0] = 0;
		if (r.objective == OBJ_LM) {
			while (b.nseq < max_seqs && lm_take(&lm, &b, r.seq_len, r.batch_tokens - b.T))
				;
		} else {
			while (b.nseq < max_seqs) {
				const example *e = &ex.next;
				int64_t len = (int64_t)(e->nq + e->nc - 1);
				if (len > r.batch_tokens)
					cli_die("%s: %lld tokens, more than --batch-tokens %lld",
						e->where, (long long)len, (long long)r.batch_tokens);
				if (b.T + len > r.batch_tokens)
					break;
				example cur;
				ex_take(&ex, &cur);
				size_t k = ex_take_k(&r.rng, cur.n_chunks, r.max_k);
				ks[b.nseq] = (int)k;
				if (r.objective == OBJ_BPTC) {
					exs[b.nseq++] = cur;
					b.T += len;
					b.ntargets += (int64_t)cur.nc;
					continue;
				}
				bp2c_add(&b, &cur, k, &db, r.mode, conv_len, ssm_len);
				example_free(&cur);
			}
		}
		double loss;
		if (r.objective == OBJ_BPTC) {
			loss = bptc_step(t, G, exs, ks, b.nseq, b.ntargets, &db, r.mode, r.step + 1);
			for (int i = 0; i < b.nseq; i++)
				example_free(&exs[i]);
		} else {
			if ((rc = ss_train_forward(t, b.tokens, b.targets, b.seq_start, b.nseq, b.conv,
						   b.ssm, NULL, &loss)))
				cli_die("step %lld: forward: %s", (long long)r.step + 1, ss_strerror(rc));
			ss_train_zero_grad(t);
			if ((rc = ss_train_backward(t, NULL, NULL, NULL)))
				cli_die("step %lld: backward: %s", (long long)r.step + 1, ss_strerror(rc));
		}
		double norm2 = 0;
		for (size_t i = 0; i < G->n; i++)
			norm2 += (double)G->data[i] * G->data[i];
		double norm = sqrt(norm2);
		if (!isfinite(norm))
			cli_die("step %lld: the gradient is not finite (loss %g)",
				(long long)r.step + 1, loss);
		if (r.clip > 0 && norm > r.clip) {
			float s = (float)(r.clip / norm);
			for (size_t i = 0; i < G->n; i++)
				G->data[i] *= s;
		}
		r.step++;
		double lr = lr_at(&r, r.step);
		ss_adamw h = { .lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
			       .weight_decay = (float)r.weight_decay };
		if ((rc = ss_adamw_update(P->data, G->data, am, av, P->n, &h, r.step)))
			cli_die("step %lld: AdamW: %s", (long long)r.step, ss_strerror(rc));
		printf("{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%lld,"
		       "\"seqs\":%d",
		       (long long)r.step, loss, lr, norm, (long long)b.ntargets, b.nseq);
		if (r.objective != OBJ_LM)
			for (int i = 0; i < b.nseq; i++)
				printf(i ? ",%d" : ",\"k\":[%d", ks[i]);
		printf(r.objective != OBJ_LM ? "]}\n" : "}\n");
		/* each step's line as it ends: a log file or `tail -f` sees every
		 * finished step, and a killed run's log ends at its last one */
		if (fflush(stdout) != 0 || ferror(stdout))
			cli_die("write error: %s", strerror(errno));
		double dt = cli_now() - t0;
		cli_progress_of((double)r.step, (double)until, "step %lld, loss %.4f, %.0f tokens/s",
				(long long)r.step, loss, dt > 0 ? (double)b.ntargets / dt : 0);
		if (save_every && r.step % save_every == 0 && r.step < until) {
			if (r.objective == OBJ_LM)
				lm_tell(&lm, &r);
			else
				ex_tell(&ex, &r);
			save(out_dir, &r, t, &cfg, am, av, model_dir);
		}
		t0 = cli_now();
	}
	cli_progress_end();
	if (r.objective == OBJ_LM)
		lm_tell(&lm, &r);
	else
		ex_tell(&ex, &r);
	save(out_dir, &r, t, &cfg, am, av, model_dir);

	if (r.objective == OBJ_LM)
		lm_close(&lm);
	else
		ex_close(&ex), db_close(&db);
	ss_train_free(t);
	free(am), free(av), free(ks), free(exs);
	free(b.tokens), free(b.targets), free(b.seq_start), free(b.conv), free(b.ssm);
	free(r.data), free(r.states), free(r.chunk_tokens), free(r.loss_after);
	return 0;
}
