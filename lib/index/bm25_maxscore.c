/* bm25_maxscore.c — the top k of the OR of a query's terms by MaxScore,
 * with block maxima; see bm25.h (the scores, the references) and
 * bm25_internal.h. Steps: open the terms' cursors (by ascending bound),
 * prime the top k from the rarest terms, then score the candidates of the
 * essential terms, looking the others up only while a candidate could
 * still reach the k-th score. */
#include "index/bm25_internal.h"

#include <stdlib.h>
#include <string.h>

/* A document's score as the sum of its terms' parts in query order,
 * whatever order the search met them in: the same bits in one index and
 * in a union of shards (where the bounds, and so the order, differ), so
 * that equal scores stay equal. v[q], rid[q]: term q's part and the
 * document it is of. */
typedef struct {
	double *v;
	uint32_t *rid;
	size_t n;
} term_sum;

static inline void term_sum_put(term_sum *t, int q, uint32_t rid, double v)
{
	t->v[q] = v;
	t->rid[q] = rid;
}

static double term_sum_of(const term_sum *t, uint32_t rid)
{
	double s = 0;
	for (size_t q = 0; q < t->n; q++)
		if (t->rid[q] == rid)
			s += t->v[q];
	return s;
}

/* One search: the cursors of the query's terms that some document holds,
 * c[0..m) by ascending bound, cum[i] the sum of the bounds of c[0..i];
 * the rids priming scored (ascending); the top-k heap hits[0..n_hits). */
typedef struct {
	cursor *c;
	int m;
	double *cum;
	term_sum ts;
	unsigned char *buf; /* a block's bytes, BLOCK_MAX_BYTES */
	int64_t *primed;
	size_t n_primed;
	ss_bm25_hit *hits;
	int k, n_hits;
	const int64_t *exclude;
	size_t n_exclude;
} maxscore;

static int cmp_ub(const void *a, const void *b)
{
	double x = ((const cursor *)a)->ub, y = ((const cursor *)b)->ub;
	return x < y ? -1 : x > y;
}

/* Opens the cursors of b->qterms into s, by ascending bound. */
static int ms_open(ss_bm25 *b, maxscore *s, char *errmsg)
{
	size_t n = b->n_q;
	s->c = calloc(n, sizeof *s->c);
	s->buf = malloc(BLOCK_MAX_BYTES);
	s->cum = malloc(n * sizeof *s->cum);
	s->ts = (term_sum){ malloc(n * sizeof *s->ts.v), malloc(n * sizeof *s->ts.rid), n };
	if (!s->c || !s->buf || !s->cum || !s->ts.v || !s->ts.rid)
		return SS_ERR_NOMEM;
	for (size_t q = 0; q < n; q++)
		s->ts.rid[q] = END;
	for (size_t i = 0; i < n; i++) {
		int64_t tid;
		int rc = bm25_cur_open(b, b->qterms[i], b->n_krow ? &b->krow[i] : NULL, b->g ? b->g->df[i] : -1,
				       &s->c[s->m], &tid, s->buf, errmsg);
		if (rc < 0)
			return rc;
		s->c[s->m].qi = (int)i;
		s->m += rc;
	}
	/* MaxScore: terms by ascending bound; the first `ess` of them are
	 * non-essential (their bounds together cannot lift a document that has
	 * none of the others above the k-th score), so only documents of the
	 * essential terms are candidates, and the others are looked up for a
	 * candidate only while its score could still reach the top k. */
	qsort(s->c, (size_t)s->m, sizeof *s->c, cmp_ub);
	for (int i = 0; i < s->m; i++)
		s->cum[i] = s->c[i].ub + (i ? s->cum[i - 1] : 0);
	return 0;
}

/* Priming: up to PRIME documents of the rarest terms, in rid order,
 * scored in full through copies of the cursors (sharing blob and skip
 * table) so that the search proper starts at block 0 with a useful k-th
 * score; it then skips these documents. A union's later shard starts with
 * the k-th score of the shards before it (g->theta), a better one than
 * priming finds: it is not primed. */
static int ms_prime(ss_bm25 *b, maxscore *s, char *errmsg)
{
	int m = s->m, rc = 0;
	int p0 = m - 1;
	for (int64_t sum = m ? s->c[m - 1].df : 0; p0 > 0 && sum + s->c[p0 - 1].df <= PRIME; p0--)
		sum += s->c[p0 - 1].df;
	cursor *pc = m ? malloc((size_t)m * sizeof *pc) : NULL;
	s->primed = malloc(PRIME * sizeof *s->primed);
	if (m && (!pc || !s->primed)) {
		free(pc);
		return SS_ERR_NOMEM;
	}
	if (m)
		memcpy(pc, s->c, (size_t)m * sizeof *pc);
	double avgdl = b->qavgdl;
	while (m && s->n_primed < PRIME && !(b->g && b->g->theta > 0)) {
		uint32_t d = END;
		for (int i = p0; i < m; i++)
			if (pc[i].cur < d)
				d = pc[i].cur;
		if (d == END)
			break;
		double dl;
		if ((rc = dl_of(b, d, &dl)))
			break;
		for (int i = 0; i < m && !rc; i++) {
			if (i < p0 && (rc = cur_seek(&pc[i], d, s->buf)))
				break;
			if (pc[i].cur == d) {
				term_sum_put(&s->ts, pc[i].qi, d, pc[i].idf * tf_weight(pc[i].tf[pc[i].pos], dl, avgdl, b->k1, b->b));
				if (i >= p0)
					rc = cur_next(&pc[i], s->buf);
			}
		}
		if (rc)
			break;
		s->primed[s->n_primed++] = d;
		if (!(s->n_exclude && excluded(d, s->exclude, s->n_exclude)))
			heap_offer(s->hits, &s->n_hits, s->k, (ss_bm25_hit){ d, term_sum_of(&s->ts, d) });
	}
	free(pc);
	return rc ? bm25_read_error(b, rc, errmsg) : 0;
}

/* The non-essential terms c[0..ess) of document d (length part norm),
 * most weighty first, added to *sum while the score could still reach
 * theta: a term's block that would hold d (found in the skip table alone)
 * bounds it more tightly than its maximum, so that a block is decoded only
 * when it could matter. Returns 0, 1 when d cannot reach theta (pruned), or
 * bm25_load_block's error. */
static inline int ms_rest(maxscore *s, int ess, uint32_t d, double norm, double k1, double theta, double *sum)
{
	cursor *c = s->c;
	double sc = *sum;
	for (int i = ess - 1; i >= 0; i--) {
		double rest = i ? s->cum[i - 1] : 0;
		if ((sc + c[i].ub + rest) * SLACK < theta)
			return 1;
		if (c[i].cur < d) {
			int64_t sb = bm25_cur_shallow(&c[i], d);
			if (sb == c[i].n_blocks)
				continue;
			if ((sc + block_ub(&c[i], sb) + rest) * SLACK < theta)
				return 1;
			int rc = cur_seek(&c[i], d, s->buf);
			if (rc)
				return rc;
		}
		if (c[i].cur == d) {
			double v = c[i].idf * w_of(c[i].tf[c[i].pos], norm, k1);
			sc += v;
			term_sum_put(&s->ts, c[i].qi, d, v);
		}
	}
	*sum = sc;
	return 0;
}

/* The search proper: each document of the essential terms c[ess..m),
 * in rid order, scored unless priming did; ess grows as theta, the score
 * a document must reach (the k-th's here or a union's earlier shards'
 * (ss_bm25_global.theta), whichever is higher), does. */
static int ms_run(ss_bm25 *b, maxscore *s, char *errmsg)
{
	cursor *c = s->c;
	ss_bm25_hit *hits = s->hits;
	int m = s->m, k = s->k, n_hits = s->n_hits, ess = 0, rc = 0;
	double avgdl = b->qavgdl, theta = b->g ? b->g->theta : 0;
	size_t next_primed = 0; /* primed[next_primed] is the first primed rid >= d */
	if (n_hits == k && hits[0].score > theta)
		theta = hits[0].score;
	while (theta > 0 && ess < m && s->cum[ess] * SLACK < theta)
		ess++;
	for (;;) {
		uint32_t d = END;
		for (int i = ess; i < m; i++)
			if (c[i].cur < d)
				d = c[i].cur;
		if (d == END)
			break;
		double dl, sc = 0;
		if ((rc = dl_of(b, d, &dl)))
			break;
		double norm = len_norm(dl, avgdl, b->k1, b->b);
		for (int i = ess; i < m && !rc; i++)
			if (c[i].cur == d) {
				double v = c[i].idf * w_of(c[i].tf[c[i].pos], norm, b->k1);
				sc += v;
				term_sum_put(&s->ts, c[i].qi, d, v);
				rc = cur_next(&c[i], s->buf);
			}
		if (rc)
			break;
		while (next_primed < s->n_primed && s->primed[next_primed] < d)
			next_primed++;
		if ((next_primed < s->n_primed && s->primed[next_primed] == d) ||
		    (s->n_exclude && excluded(d, s->exclude, s->n_exclude)))
			continue;
		int pruned = ms_rest(s, ess, d, norm, b->k1, theta, &sc);
		if (pruned < 0) {
			rc = pruned;
			break;
		}
		/* A pruned document cannot reach theta; one whose partial sum
		 * (in bound order) is that far below it cannot either. */
		if (pruned || sc * SLACK < theta || (n_hits == k && sc * SLACK < hits[0].score))
			continue;
		if (!heap_offer(hits, &n_hits, k, (ss_bm25_hit){ d, term_sum_of(&s->ts, d) }))
			continue;
		if (n_hits == k && hits[0].score > theta) {
			theta = hits[0].score;
			while (ess < m && s->cum[ess] * SLACK < theta)
				ess++;
		}
	}
	s->n_hits = n_hits;
	return rc ? bm25_read_error(b, rc, errmsg) : 0;
}

int bm25_maxscore_search(ss_bm25 *b, int k, const int64_t *exclude, size_t n_exclude, ss_bm25_hit *hits,
			 char *errmsg)
{
	maxscore s = { .hits = hits, .k = k, .exclude = exclude, .n_exclude = n_exclude };
	int rc = ms_open(b, &s, errmsg);
	if (!rc)
		rc = ms_prime(b, &s, errmsg);
	if (!rc)
		rc = ms_run(b, &s, errmsg);
	if (!rc) {
		qsort(hits, (size_t)s.n_hits, sizeof *hits, cmp_hit);
		rc = s.n_hits;
	}
	sqlite3_blob_close(b->dl_blob);
	b->dl_blob = NULL;
	for (int i = 0; s.c && i < s.m; i++)
		bm25_cur_close(&s.c[i]);
	free(s.c);
	free(s.primed);
	free(s.buf);
	free(s.cum);
	free(s.ts.v);
	free(s.ts.rid);
	return rc;
}
