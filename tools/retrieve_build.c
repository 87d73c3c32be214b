/*
 * retrieve_build.c — ss-retrieve's commands that write an index: add/build
 * (token and state streams, --state-url, --state-budget with --hits,
 * --stateless), delete, merge. See man/ss-retrieve.1 and lib/ss_index.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "retrieve.h"

/* ctx: [0] bytes of the inputs before this one, [1] all inputs' (0: unknown), [2] the start. */
static void build_progress(void *ctx, const char *path, const ss_index_add_stats *st)
{
	const double *pg = ctx;
	if ((st->n_text + st->n_states) % 512)
		return;
	double el = cli_now() - pg[2];
	cli_progress_of(pg[0] + (double)st->bytes, pg[1], "%s: %llu token records, %llu state records, %.3g MB/s",
			path, (unsigned long long)st->n_text, (unsigned long long)st->n_states,
			el > 0 ? (pg[0] + (double)st->bytes) / 1e6 / el : 0.0);
}

static void build_note(void *ctx, const char *id, int dropped, const char *why)
{
	(void)ctx;
	(void)dropped;
	cli_warn("document %s %s", id, why);
}

/* --hits FILE: one document id per line, each line one retrieval. An
 * error closes ix (rolling the build back) and exits. */
static void read_hits(ss_index *ix, const char *db, const char *path)
{
	char em[SS_ERRMSG_MAX], *line = NULL;
	size_t cap = 0;
	long n;
	unsigned long long lineno = 0;
	FILE *f = cli_open_regular(path);
	while ((n = ss_getline(&line, &cap, f, 1 << 20)) > 0 || n == SS_ERR_TOO_LARGE) {
		lineno++;
		const char *why = n == SS_ERR_TOO_LARGE ? "longer than 1 MiB: not a document id"
			: memchr(line, 0, (size_t)n) ? "a NUL byte: not a document id" : NULL;
		if (why) {
			ss_index_close(ix);
			cli_die("%s: line %llu: %s", path, lineno, why);
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		if (n > 0 && ss_index_add_hits(ix, line, 1, em)) {
			ss_index_close(ix);
			cli_die("%s: %s", db, em);
		}
	}
	if (n < 0) {
		int e = errno;
		ss_index_close(ix);
		if (n == SS_ERR_NOMEM)
			cli_die("out of memory");
		cli_die("%s: read error: %s", path, strerror(e));
	}
	if (f != stdin)
		fclose(f);
	free(line);
}

/* add --state-url PATH=URL, in the order given. */
static char **url_path, **url_to;
static int n_urls;

void retrieve_state_url_add(const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || !ss_url_is_http(eq + 1))
		cli_usage(usage_line, "--state-url: '%s' is not PATH=URL (an http:// or https:// URL)", arg);
	url_path = realloc(url_path, (size_t)(n_urls + 1) * sizeof *url_path);
	url_to = realloc(url_to, (size_t)(n_urls + 1) * sizeof *url_to);
	if (!url_path || !url_to || !(url_path[n_urls] = strndup(arg, (size_t)(eq - arg))) ||
	    !(url_to[n_urls] = strdup(eq + 1)))
		cli_die("out of memory");
	n_urls++;
}

/* The URL state stream `path` is indexed at (malloc'ed), or NULL: the
 * last --state-url naming it, or the folder (PATH/) it lies under. used[i]
 * is set for the mapping that applied. */
static char *state_url_of(const char *path, int *used)
{
	for (int i = n_urls - 1; i >= 0; i--) {
		size_t n = strlen(url_path[i]);
		int dir = n && url_path[i][n - 1] == '/';
		char *u = NULL;
		if (!strcmp(path, url_path[i]))
			u = strdup(url_to[i]);
		else if (dir && !strncmp(path, url_path[i], n) && path[n]) {
			if (asprintf(&u, "%s%s", url_to[i], path + n) < 0)
				u = NULL;
		} else
			continue;
		if (!u)
			cli_die("out of memory");
		used[i] = 1;
		return u;
	}
	return NULL;
}

/* The URL each of inputs[0..n_inputs) is indexed at (NULL: its path), as
 * state_url_of gives them (an array of n_inputs, malloc'ed, as its
 * strings). Every --state-url must name a STREAM: checked before anything
 * is read (a usage error, ix closed, when one names none). */
static char **state_urls(ss_index *ix, char **inputs, int n_inputs)
{
	char **urls = calloc((size_t)n_inputs + 1, sizeof *urls);
	int *used = calloc((size_t)n_urls + 1, sizeof *used);
	if (!urls || !used)
		cli_die("out of memory");
	for (int i = 0; i < n_inputs; i++)
		urls[i] = state_url_of(inputs[i], used);
	for (int i = 0; i < n_urls; i++)
		if (!used[i]) {
			ss_index_close(ix);
			cli_usage(usage_line, "--state-url %s=...: no STREAM is %s%s", url_path[i], url_path[i],
				  url_path[i][strlen(url_path[i]) - 1] == '/' ? " or lies under it" : "");
		}
	free(used);
	return urls;
}

int retrieve_build(const char *db, char **inputs, int n_inputs, int64_t budget, const char *hits,
		     const stateless_opts *so)
{
	char em[SS_ERRMSG_MAX];
	double t0 = cli_now();
	char fp[SS_FINGERPRINT_MAX] = "";
	int32_t vocab = 0;
	if (so->model) {
		/* Before the build's lock: its fingerprint and vocabulary are all
		 * it takes from the model, which has no cheaper way to them than
		 * a load. */
		ss_model *m = mcli_load_model(so->model, SS_MODEL_SKIP_LM_HEAD, NULL, usage_line);
		memcpy(fp, m->fingerprint, sizeof fp);
		vocab = mcli_vocab(m);
		ss_model_free(m);
	}
	ss_index *ix;
	int rc = ss_index_build_open(&ix, db, em);
	if (rc)
		cli_die("%s: %s", db, em);
	if ((budget >= 0 && ss_index_set_state_budget(ix, budget, em)) ||
	    (so->model && (ss_index_set_stateless(ix, fp, ss_dtype_name(so->dtype), em) ||
			   ss_index_set_vocab(ix, vocab, em)))) {
		ss_index_close(ix);
		cli_die("%s: %s", db, em);
	}
	if (hits)
		read_hits(ix, db, hits);
	char **urls = state_urls(ix, inputs, n_inputs);
	ss_index_add_stats total = {0};
	uint64_t max_record = cli_max_record();
	double pg[3] = { 0, cli_inputs_size(inputs, n_inputs), t0 };
	cli_progress_begin();
	for (int i = 0; i < n_inputs; i++) {
		ss_index_add_stats st = {0};
		pg[0] = (double)total.bytes;
		rc = ss_index_add_stream_url(ix, inputs[i], urls[i], max_record, &st, build_progress, pg, em);
		free(urls[i]);
		total.n_text += st.n_text;
		total.n_states += st.n_states;
		total.bytes += st.bytes;
		if (rc) {
			ss_index_close(ix); /* rolls the build back: DB stays as it was */
			cli_die("%s: %s", inputs[i], em);
		}
	}
	cli_progress_end();
	free(urls);
	ss_index_build_stats bs;
	rc = ss_index_commit(ix, build_note, NULL, &bs, em);
	ss_index_close(ix);
	if (rc)
		cli_die("%s: %s", db, em);
	if (cli_verbosity >= 2)
		fprintf(stderr,
			"%s: %s: %lld %s (%lld added, %lld replaced, %lld left out) in %.2f s; records "
			"read: %llu token, %llu state\n",
			cli_prog, db, (long long)bs.n_docs, cli_plural((uint64_t)bs.n_docs, "document", "documents"),
			(long long)bs.n_added, (long long)bs.n_replaced,
			(long long)bs.n_dropped, cli_now() - t0, (unsigned long long)total.n_text,
			(unsigned long long)total.n_states);
	if (cli_verbosity >= 2 && budget >= 0)
		fprintf(stderr, "%s: %s: state budget %lld bytes: %lld bytes of states stored, %lld documents "
			"stateless (%lld dropped by this build)\n",
			cli_prog, db, (long long)budget, (long long)bs.state_bytes, (long long)bs.n_stateless,
			(long long)bs.n_dropped_states);
	if (cli_verbosity >= 2 && so->model)
		fprintf(stderr, "%s: %s: %lld %s made stateless (model %s, recomputed in %s)\n", cli_prog, db,
			(long long)bs.n_made_stateless,
			cli_plural((uint64_t)bs.n_made_stateless, "document", "documents"), fp,
			ss_dtype_name(so->dtype));
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* delete: every id or none (one transaction, rolled back at the first
 * unknown id). */
int retrieve_delete(const char *db, char **ids, int n_ids)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (access(db, F_OK) != 0) /* a build open would create it */
		cli_die("%s: %s", db, strerror(errno));
	if (ss_index_build_open(&ix, db, em))
		cli_die("%s: %s", db, em);
	/* Sorted, so that an id given twice is deleted once. */
	qsort(ids, (size_t)n_ids, sizeof *ids, cmp_str);
	for (int i = 0; i < n_ids; i++)
		if ((i == 0 || strcmp(ids[i], ids[i - 1])) && ss_index_delete(ix, ids[i], em)) {
			ss_index_close(ix); /* rolls back the deletes so far */
			cli_die("%s: %s: nothing deleted", db, em);
		}
	ss_index_build_stats bs;
	int rc = ss_index_commit(ix, build_note, NULL, &bs, em);
	ss_index_close(ix);
	if (rc)
		cli_die("%s: %s", db, em);
	if (cli_verbosity >= 2)
		fprintf(stderr, "%s: %s: %lld deleted, %lld left\n", cli_prog, db, (long long)bs.n_deleted,
			(long long)bs.n_docs);
	return 0;
}

/* merge: the shards into OUT, whole or not at all. */
int retrieve_merge(const char *out, char **args, int n_args)
{
	char em[SS_ERRMSG_MAX];
	for (int i = 0; i < n_args; i++)
		retrieve_index_add(args[i]);
	if (!retrieve_n_dbs)
		cli_usage(usage_line, "merge: no index given");
	for (int i = 0; i < retrieve_n_dbs; i++)
		cli_out_not_input(out, retrieve_dbs[i]);
	double t0 = cli_now();
	ss_index_build_stats bs;
	if (ss_index_merge(out, (const char *const *)retrieve_dbs, retrieve_n_dbs, &bs, em))
		cli_die("%s", em);
	if (cli_verbosity >= 2)
		fprintf(stderr, "%s: %s: %lld %s from %d %s in %.2f s\n", cli_prog, out, (long long)bs.n_docs,
			cli_plural((uint64_t)bs.n_docs, "document", "documents"), retrieve_n_dbs,
			retrieve_n_dbs == 1 ? "index" : "indexes", cli_now() - t0);
	return 0;
}
