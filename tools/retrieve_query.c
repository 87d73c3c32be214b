/*
 * retrieve_query.c — ss-retrieve query: a query's hits written as a state
 * stream (stored records copied after their rank/score annotation, a plan
 * frame ahead; stateless documents recomputed with --model), or as --ids
 * lines; reranking (--rerank, tools/rerank.h). Batches from stdin:
 * retrieve_batch.c. See man/ss-retrieve.1 and lib/ss_index.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "defaults.h"
#include "retrieve.h"

/* Stateless documents re-encoded per forward call (the memory of this many
 * states). */
#define RECOMPUTE_BATCH 8

/* Loads the --model once (dying on failure, as ss-encode does). */
static void recompute_load(qopts *o)
{
	if (o->fwd)
		return;
	double t0 = cli_now();
	if (o->deterministic && !strcmp(o->mo->device, "auto"))
		o->mo->device = "cpu"; /* only the CPU promises it */
	o->dev = mcli_device(o->mo->device, usage_line);
	/* State extraction never needs an untied lm_head; reranking does. */
	o->m = mcli_load_model(o->mo->model, o->rr.n ? 0 : SS_MODEL_SKIP_LM_HEAD,
			       o->mo->weights_dtype, usage_line);
	ss_model_state_dims(o->m, &o->dims);
	o->fwd = mcli_forward_ctx(o->m, o->mo->model, o->dev, o->mo->threads);
	if (o->deterministic && ss_forward_ctx_set_deterministic(o->fwd, 1))
		cli_die("--deterministic: only the CPU promises it, not --device %s", o->mo->device);
	if (o->rr.n) {
		o->tok = cli_tokenizer(o->mo->tokenizer, o->mo->model);
		rerank_init(&o->rk, &o->rr, o->fwd, o->m, o->tok, (o->qflags & SS_INDEX_QUERY_PHRASES) != 0,
			    usage_line);
		if (!(o->rr_scores = calloc((size_t)o->rr.n, sizeof *o->rr_scores)))
			cli_die("out of memory");
	}
	o->load_s += cli_now() - t0;
}

static void recompute_free(qopts *o)
{
	if (o->rr.n && o->fwd) {
		rerank_free(&o->rk);
		ss_tokenizer_free(o->tok);
		free(o->rr_scores);
	}
	ss_forward_ctx_free(o->fwd);
	ss_device_close(o->dev);
	ss_model_free(o->m);
}

/* Encodes hits h[0..n) (stateless, their tokens fetched with the query)
 * from the zero state (fresh sequences: not read, as ss-encode) in one
 * forward call into st[0..n): the records ss-encode would write (id, the
 * model's fingerprint, n_tokens, the hit's dtype). Returns 0, or 1 after
 * reporting the error, naming the document that failed (st freed). */
static int recompute(qopts *o, const char *label, const ss_index_hit *const *h, int n, ss_state *st)
{
	ss_forward_seq seqs[RECOMPUTE_BATCH];
	char em[SS_ERRMSG_MAX];
	double t0 = cli_now();
	for (int i = 0; i < n; i++) {
		if (ss_state_alloc(&st[i], &o->dims) || !(st[i].id = strdup(h[i]->id)))
			cli_die("out of memory (%d states)", n);
		memcpy(st[i].fingerprint, o->m->fingerprint, SS_FINGERPRINT_MAX);
		st[i].dtype = h[i]->dtype;
		seqs[i] = (ss_forward_seq){ .tokens = h[i]->tokens, .n_tokens = h[i]->n_stored_tokens,
					    .state = &st[i], .fresh = 1 };
		o->n_recomputed_tokens += h[i]->n_stored_tokens;
	}
	if (ss_forward_prefill(o->fwd, seqs, n, SS_LOGITS_NONE, em)) {
		/* errmsg names the sequence ("sequence I: what"): name its
		 * document instead. */
		int seq = -1, at = 0;
		if (sscanf(em, "sequence %d: %n", &seq, &at) != 1 || at == 0 || seq < 0 || seq >= n)
			seq = -1;
		if (seq >= 0)
			cli_warn("%s%s: document %s: %s", label, o->mo->model, h[seq]->id, em + at);
		else
			cli_warn("%s%s: %s", label, o->mo->model, em);
		for (int i = 0; i < n; i++)
			ss_state_free(&st[i]);
		return 1;
	}
	o->n_recomputed += n;
	o->recompute_s += cli_now() - t0;
	return 0;
}

/* Index in hits[] of the i-th document to write, in the order asked for. */
static int out_index(const qopts *o, int i, int n)
{
	return o->best_first ? i : n - 1 - i;
}

static void print_ids(qopts *o, const char *qid, const ss_index_hit *hits, int n)
{
	/* Same order as the state stream. */
	for (int i = 0; i < n; i++) {
		/* The text was read with the hits (ss_index_set_fetch): of
		 * their snapshot, whatever a build committed since. */
		const ss_index_hit *h = &hits[out_index(o, i, n)];
		if (o->json) {
			cJSON *j = cJSON_CreateObject();
			if (!j)
				cli_die("out of memory");
			if (qid)
				json_add_str(j, "query", qid, (size_t)-1);
			cJSON_AddNumberToObject(j, "rank", h->rank);
			json_add_str(j, "id", h->id, (size_t)-1);
			cJSON_AddNumberToObject(j, "score", h->score);
			if (o->rr.n)
				cJSON_AddNumberToObject(j, "rerank_score", o->rr_scores[out_index(o, i, n)]);
			if (h->text)
				json_add_str(j, "text", h->text, h->text_len);
			else if (o->text)
				cJSON_AddNullToObject(j, "text");
			json_line(o->text_out, j);
		} else {
			if (qid) {
				tsv_field(o->text_out, qid);
				fputc('\t', o->text_out);
			}
			fprintf(o->text_out, "%d\t", h->rank);
			tsv_field(o->text_out, h->id);
			fprintf(o->text_out, "\t%.9g", h->score);
			if (o->rr.n)
				fprintf(o->text_out, "\t%.9g", o->rr_scores[out_index(o, i, n)]);
			if (o->text) {
				fputc('\t', o->text_out);
				ss_escape(o->text_out, h->text ? h->text : "", h->text_len, SS_ESC_PLAIN);
			}
			fputc('\n', o->text_out);
		}
	}
}

/* A query id usable as a file name in --out-dir. */
static int safe_name(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= 200 && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Checks hit h, stateless, before anything is written: --model given, its
 * tokens stored (read with the hits), the model's fingerprint its
 * state's. Returns 0, or 1 after reporting the error. */
static int recompute_check(qopts *o, const char *label, const ss_index_hit *h)
{
	if (!o->mo) {
		cli_warn("%s%s: document %s has no stored state (it is stateless): query with "
			 "--model DIR to recompute it", label, o->db, h->id);
		return 1;
	}
	if (!h->tokens) {
		cli_warn("%s%s: document %s has no stored state and no tokens stored to recompute it from", label,
			 o->db, h->id);
		return 1;
	}
	recompute_load(o);
	if (strcmp(h->fingerprint, o->m->fingerprint)) {
		cli_warn("%s%s: document %s: its state was of model %s, --model %s is %s", label, o->db, h->id,
			 h->fingerprint, o->mo->model, o->m->fingerprint);
		return 1;
	}
	return 0;
}

/* Checks every hit before anything is written (a stored one by its
 * record's metadata, read now; a stateless one by recompute_check) and
 * gathers the plan frame: every record's logdecay, in output order, when
 * every hit is stored (a recomputed one's is known only once computed).
 * *plan: [n][*H] (malloc'ed), or NULL for none. Returns 0, or 1 after
 * reporting the error. */
static int check_hits(ss_index *ix, qopts *o, const char *label, const ss_index_hit *h, int n, float **planp,
		      size_t *Hp)
{
	char em[SS_ERRMSG_MAX], shown[4096];
	const ss_record *rec;
	float *plan = NULL;
	size_t H = 0;
	int bad = 0;
	for (int i = 0; i < n && !bad; i++) {
		const ss_index_hit *hi = &h[out_index(o, i, n)];
		ss_state m;
		if (hi->stateless) {
			bad = recompute_check(o, label, hi);
			free(plan);
			plan = NULL;
			H = (size_t)-1;
		} else if (ss_index_read(ix, hi, 1, &rec, em) || ss_record_state_meta(rec, &m, em)) {
			cli_warn("%s%s: %s: %s", label, o->db, ss_url_redact(hi->path, shown, sizeof shown), em);
			bad = 1;
		} else {
			size_t mh = ss_state_logdecay_len(&m.dims);
			if (H == 0 && (size_t)n * mh * sizeof *plan > SS_PLAN_MAX)
				H = (size_t)-1; /* too large for a plan frame (Mamba-1 at large k) */
			if (H == 0 && !(plan = malloc((size_t)n * mh * sizeof *plan)))
				cli_die("out of memory");
			if (H == 0 || H == mh) {
				memcpy(plan + (size_t)i * mh, m.logdecay, mh * sizeof *plan);
				H = mh;
			} else { /* dims an index never mixes: no plan */
				free(plan);
				plan = NULL;
				H = (size_t)-1;
			}
			ss_state_free(&m);
		}
	}
	*planp = plan;
	*Hp = H;
	return bad;
}

/* The states of stateless hits, recomputed a batch at a time (in output
 * order) and written one by one: st[next..n) computed, not yet written. */
typedef struct {
	ss_state st[RECOMPUTE_BATCH];
	int n, next;
} recomputed;

/* Writes the state of hits[out_index(i)], stateless, after its
 * annotation: from rs, recomputing the next batch (this and the following
 * stateless hits) when rs holds none. Returns 0, or 1 after reporting. */
static int emit_recomputed(qopts *o, const char *label, const ss_index_hit *h, int n, int i, ss_writer *w,
			   recomputed *rs, const char *path)
{
	const ss_index_hit *hi = &h[out_index(o, i, n)];
	if (rs->next == rs->n) {
		const ss_index_hit *bh[RECOMPUTE_BATCH];
		rs->n = rs->next = 0;
		for (int j = i; j < n && rs->n < RECOMPUTE_BATCH; j++) {
			int x = out_index(o, j, n);
			if (h[x].stateless)
				bh[rs->n++] = &h[x];
		}
		if (recompute(o, label, bh, rs->n, rs->st)) {
			rs->n = 0;
			return 1;
		}
	}
	if (o->rr.n)
		ss_writer_set_rerank_score(w, o->rr_scores[out_index(o, i, n)]);
	int rc = ss_writer_put_annotation(w, hi->rank, hi->score);
	if (!rc)
		rc = ss_writer_put_state(w, &rs->st[rs->next], NULL);
	ss_state_free(&rs->st[rs->next++]);
	if (rc) {
		cli_warn("%s%s: %s", label, path, strerror(errno));
		return 1;
	}
	return 0;
}

/* Writes the hits' states (most relevant last, or first with --order
 * best-first) to `path` ("-" = stdout), each after its rank/score
 * annotation frame: a stored frame copied verbatim, a stateless document's
 * state recomputed (--model; RECOMPUTE_BATCH per forward call, in output
 * order). Every record is first validated (check_hits) so that a missing
 * or replaced shard fails the query before anything is written (but the
 * rest of a record over HTTP streamed into a named file, checked as it
 * arrives: its failure takes the file back). Returns 0, or 1 after
 * reporting the error. */
static int emit_states(ss_index *ix, qopts *o, const char *label, const ss_index_hit *h, int n,
		       const char *path)
{
	char em[SS_ERRMSG_MAX], shown[4096];
	recomputed rs = { .n = 0, .next = 0 };
	int bad = 0;
	float *plan = NULL;
	size_t H = 0;
	ss_writer *w = NULL;
	if (ss_writer_open(&w, path, 0, em)) {
		cli_warn("%s: %s", path, em);
		bad = 1;
	}
	/* The hits served over HTTP, fetched in parallel before they are
	 * read (each one's failure is its ss_index_read's): whole when the
	 * output could not be taken back, else their records' heads (the
	 * rest then streams into the output). */
	if (!bad && n > 0 && ss_index_prefetch(ix, h, n, !ss_writer_discards_on_abort(w), em)) {
		cli_warn("%s%s: %s", label, o->db, em);
		bad = 1;
	}
	if (!bad)
		bad = check_hits(ix, o, label, h, n, &plan, &H);
	/* A plan too large for a frame (SS_ERR_INVALID) is left out. */
	if (!bad && plan && ss_writer_put_plan(w, (size_t)n, H, plan) == SS_ERR_IO) {
		cli_warn("%s%s: %s", label, path, strerror(errno));
		bad = 1;
	}
	free(plan);
	for (int i = 0; i < n && !bad; i++) {
		const ss_index_hit *hi = &h[out_index(o, i, n)];
		if (hi->stateless) {
			bad = emit_recomputed(o, label, h, n, i, w, &rs, path);
			continue;
		}
		if (o->rr.n)
			ss_writer_set_rerank_score(w, o->rr_scores[out_index(o, i, n)]);
		if (ss_index_copy(ix, hi, w, em)) {
			/* An empty message means the output failed (errno kept). */
			if (em[0])
				cli_warn("%s%s: %s: %s", label, o->db, ss_url_redact(hi->path, shown, sizeof shown), em);
			else
				cli_warn("%s%s: %s", label, path, strerror(errno));
			bad = 1;
		}
	}
	while (rs.next < rs.n)
		ss_state_free(&rs.st[rs.next++]);
	if (bad) {
		ss_writer_abort(w);
		return 1;
	}
	if (ss_writer_close(w, em)) {
		cli_warn("%s: %s", path, em);
		return 1;
	}
	return 0;
}

/* rerank_hits' states of stateless hits h[0..n): checked and recomputed
 * as emit_states does, RECOMPUTE_BATCH per forward call. */
static int rerank_recompute(void *ctx, const char *label, const ss_index_hit *const *h, int n, ss_state *st)
{
	qopts *o = ctx;
	for (int i = 0; i < n; i++)
		if (recompute_check(o, label, h[i]))
			return 1;
	for (int i = 0; i < n; i += RECOMPUTE_BATCH)
		if (recompute(o, label, h + i, n - i < RECOMPUTE_BATCH ? n - i : RECOMPUTE_BATCH, st + i)) {
			for (int j = 0; j < i; j++)
				ss_state_free(&st[j]);
			return 1;
		}
	return 0;
}

/* Runs one query. qid: NULL for --query (single) mode. Returns 0 or 1. */
int retrieve_run_query(ss_index *ix, qopts *o, const char *qid, const char *text, int k,
		     const char **exclude, size_t n_exclude)
{
	char em[SS_ERRMSG_MAX], label[256] = "";
	if (qid)
		snprintf(label, sizeof label, "query %s: ", qid);
	ss_index_hit *h;
	if (o->rr.n && k > o->rr.n) {
		cli_warn("%sk %d is above --rerank %d", label, k, o->rr.n);
		return 1;
	}
	int n = ss_index_query(ix, text, o->rr.n ? o->rr.n : k, exclude, n_exclude, &h, em);
	if (n < 0) {
		/* A bad query is the query's; anything else is the index's (a
		 * damaged file: name it). */
		if (n == SS_ERR_INVALID)
			cli_warn("%s%s", label, em);
		else
			cli_warn("%s: %s%s", o->db, label, em);
		return 1;
	}
	int bad = 0;
	if (o->rr.n && n > 0) {
		recompute_load(o);
		int kept = rerank_hits(&o->rk, ix, o->db, label, text, h, n, k, rerank_recompute, o, o->rr_scores);
		if (kept < 0) {
			ss_index_hits_free(h, n);
			return 1;
		}
		n = kept;
	}
	if (n == 0) {
		o->n_empty++;
		if (qid && !o->empty_ok)
			cli_warn("%sno document matched", label);
	}
	if (o->ids) {
		print_ids(o, qid, h, n);
	} else if (qid) {
		char *path = NULL;
		if (!safe_name(qid)) {
			cli_warn("%squery id is not usable as a file name in %s", label, o->out_dir);
			bad = 1;
		} else if (asprintf(&path, "%s/%s.states", o->out_dir, qid) < 0) {
			cli_die("out of memory");
		} else {
			bad = emit_states(ix, o, label, h, n, path);
		}
		free(path);
	} else {
		bad = emit_states(ix, o, label, h, n, o->out ? o->out : "-");
	}
	ss_index_hits_free(h, n);
	return bad;
}

/* ss_index_files: -o must not replace a state file the index reads. */
static int out_not_state(void *ctx, const char *path)
{
	if (!ss_url_is_http(path))
		cli_out_not_input(ctx, path);
	return 0;
}

int retrieve_query(const char *db, qopts *o, const char *query)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	/* The texts (--text) and a stateless hit's tokens (--model) are read
	 * with the hits, in the query's one snapshot. */
	ix = retrieve_open(db);
	if (ss_index_set_bm25(ix, o->k1, o->b, em) ||
	    ss_index_set_query(ix, o->qflags, em) ||
	    ss_index_set_http(ix, o->http_timeout, o->http_retries, em) ||
	    ss_index_set_fetch(ix, (o->text ? SS_INDEX_FETCH_TEXT : 0) |
			   (o->mo && (!o->ids || o->rr.n) ? SS_INDEX_FETCH_TOKENS : 0), em))
		cli_die("%s: %s", db, em);
	/* A query that cannot be read is a usage error, found before any
	 * output is opened. */
	if (query && ss_index_query_check(ix, query, em)) {
		fprintf(stderr, "%s: --query: %s\n", cli_prog, em);
		exit(CLI_EXIT_USAGE);
	}
	if (o->out && strcmp(o->out, "-")) {
		for (int i = 0; i < retrieve_n_dbs; i++)
			cli_out_not_input(o->out, retrieve_dbs[i]);
		if (ss_index_files(ix, out_not_state, (void *)o->out, em))
			cli_die("%s: %s", db, em);
	}
	o->text_out = stdout;
	if (o->ids && o->out && strcmp(o->out, "-")) {
		o->text_out = fopen(o->out, "w");
		if (!o->text_out)
			cli_die("%s: %s", o->out, strerror(errno));
	}
	if (o->out_dir) {
		struct stat sb;
		if (stat(o->out_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
			cli_die("%s: not a directory", o->out_dir);
	}
	int bad = query ? retrieve_run_query(ix, o, NULL, query, o->k, o->exclude, o->n_exclude) : retrieve_run_batch(ix, o);
	ss_index_close(ix);
	if (o->mo && cli_verbosity >= 2)
		fprintf(stderr, "%s: %s: %lld stateless documents recomputed (%lld tokens) in %.3f s; model loaded in "
			"%.3f s\n", cli_prog, db, o->n_recomputed, o->n_recomputed_tokens, o->recompute_s, o->load_s);
	if (o->rr.n && o->fwd && cli_verbosity >= 2)
		fprintf(stderr, "%s: %s: %ld queries reranked (%d candidates each) in %.3f s: %.3f ms a query\n",
			cli_prog, db, o->rk.n_queries, o->rr.n, o->rk.secs,
			o->rk.n_queries ? o->rk.secs / (double)o->rk.n_queries * 1e3 : 0.0);
	recompute_free(o);
	if (o->text_out != stdout && fclose(o->text_out) != 0)
		cli_die("%s: %s", o->out, strerror(errno));
	return bad || (o->n_empty && !o->empty_ok) ? CLI_EXIT_FAIL : 0;
}
