/* bm25_clause.c — the search of a query with phrases, AND or proximity:
 * each clause's documents (a term's postings, a phrase's documents found
 * through the positions) merged in rid order and scored in full, then
 * BM25TP's proximity for the candidates whose bound can reach the top k;
 * see bm25.h (the scores, the references) and bm25_internal.h. */
#include "index/bm25_internal.h"

#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static int clause_push(clause *c, uint32_t rid, uint32_t tf)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 256;
		uint32_t *r = realloc(c->rid, cap * sizeof *r), *t;
		if (!r)
			return SS_ERR_NOMEM;
		c->rid = r;
		if (!(t = realloc(c->tf, cap * sizeof *t)))
			return SS_ERR_NOMEM;
		c->tf = t;
		c->cap = cap;
	}
	c->rid[c->n] = rid;
	c->tf[c->n++] = tf;
	return 0;
}

/* Every posting of `term` into c (empty when no document holds it):
 * bm25_cur_open's arguments and errors. */
static int term_clause(ss_bm25 *b, const char *term, const term_row *row, int64_t gdf, clause *c, unsigned char *buf,
		       char *errmsg)
{
	cursor t;
	int64_t tid;
	int rc = bm25_cur_open(b, term, row, gdf, &t, &tid, buf, errmsg);
	if (rc <= 0)
		return rc;
	rc = 0;
	c->idf = t.idf;
	c->tid = strchr(term, ' ') ? 0 : (uint32_t)tid;
	while (!rc && t.cur != END)
		if (!(rc = clause_push(c, t.cur, t.tf[t.pos])))
			rc = cur_next(&t, buf);
	bm25_cur_close(&t);
	if (rc && rc != SS_ERR_NOMEM)
		rc = rc == SS_ERR_IO ? bm25_sqlfail(b, errmsg, "reading postings")
				     : ss_errf(errmsg, rc, "damaged postings of term \"%s\"", term);
	return rc;
}

/* phrase_tf where a token's block is of varints: the positions' lists
 * merged, driven by the token with the fewest. */
static int64_t phrase_tf_varint(cursor *t, size_t m)
{
	const uint32_t *p[SS_BM25_MAX_PHRASE];
	uint32_t n[SS_BM25_MAX_PHRASE], at[SS_BM25_MAX_PHRASE];
	size_t r = 0; /* the token with the fewest positions here drives */
	n[0] = 0;
	for (size_t j = 0; j < m; j++) {
		int rc = bm25_cur_positions(&t[j], &p[j]);
		if (rc)
			return rc;
		n[j] = t[j].tf[t[j].pos];
		at[j] = 0;
		if (n[j] < n[r])
			r = j;
	}
	int64_t tf = 0;
	for (uint32_t i = 0; i < n[r]; i++) {
		if (p[r][i] < r)
			continue;
		uint64_t x = p[r][i] - r; /* the start */
		size_t j = 0;
		for (; j < m; j++) {
			if (j == r)
				continue;
			while (at[j] < n[j] && p[j][at[j]] < x + j)
				at[j]++;
			if (at[j] == n[j])
				return tf; /* token j has no position left: no later start either */
			if (p[j][at[j]] != x + j)
				break;
		}
		tf += j == m;
	}
	return tf;
}

/* c's first posting at pos or after with rid >= d, which one of its
 * decoded block's holds: 16 rids compared at once (no mispredicted exit
 * of a scan a rid at a time, as a phrase's common token has at each
 * document of the rare one's). */
static inline int block_find(const cursor *c, int pos, uint32_t d)
{
#ifdef __SSE2__
	const __m128i flip = _mm_set1_epi32((int)0x80000000u), dv = _mm_xor_si128(_mm_set1_epi32((int)d), flip);
	for (; pos + 16 <= c->n; pos += 16) {
		const __m128i *r = (const __m128i *)(const void *)(c->rid + pos);
		__m128i l0 = _mm_cmplt_epi32(_mm_xor_si128(_mm_loadu_si128(r), flip), dv);
		__m128i l1 = _mm_cmplt_epi32(_mm_xor_si128(_mm_loadu_si128(r + 1), flip), dv);
		__m128i l2 = _mm_cmplt_epi32(_mm_xor_si128(_mm_loadu_si128(r + 2), flip), dv);
		__m128i l3 = _mm_cmplt_epi32(_mm_xor_si128(_mm_loadu_si128(r + 3), flip), dv);
		unsigned lt = (unsigned)_mm_movemask_epi8(_mm_packs_epi16(_mm_packs_epi32(l0, l1), _mm_packs_epi32(l2, l3)));
		if (lt != 0xffffu)
			return pos + __builtin_ctz(~lt);
	}
#endif
	while (c->rid[pos] < d)
		pos++;
	return pos;
}

/* cur_seek with block_find's scan. */
static int phrase_seek(cursor *c, uint32_t d, unsigned char *buf)
{
	if (c->cur >= d)
		return 0;
	int rc = cur_seek_block(c, d, buf);
	if (rc)
		return rc < 0 ? rc : 0;
	c->pos = block_find(c, c->pos, d);
	c->cur = c->rid[c->pos];
	return 0;
}

/* The starts x with a[i] == x and c[k] == x + 1, from two sorted lists of
 * distinct positions below 256, one byte each: of a 2-word phrase, in
 * blocks of one byte a position. Each of the shorter list's positions
 * (shifted by one) compared with 16 of the other's at once: no step
 * waits on the one before, as a merge's do; the lists lie in pbuf, whose
 * POS_SLACK bytes keep a 16-byte load inside it. */
static int64_t pair_tf_bytes(const unsigned char *a, uint32_t na, const unsigned char *c, uint32_t nc)
{
#ifdef __SSE2__
	/* the one in the shorter list is x = y - 1 against a, or y = x + 1
	 * against c; a byte wraps at 255 + 1 and 0 - 1, so those are left
	 * out (the last of a, the first of c: sorted) */
	const unsigned char *s = a, *l = c;
	uint32_t ns = na, nl = nc;
	int add = 1;
	if (nc < na) {
		s = c;
		ns = nc;
		l = a;
		nl = na;
		add = -1;
		if (ns && s[0] == 0)
			s++, ns--;
	} else if (ns && s[ns - 1] == 255) {
		ns--;
	}
	int64_t tf = 0;
	for (uint32_t k = 0; k < nl; k += 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(l + k));
		unsigned valid = nl - k >= 16 ? 0xffffu : (1u << (nl - k)) - 1;
		for (uint32_t i = 0; i < ns; i++) {
			__m128i x = _mm_set1_epi8((char)(unsigned char)(s[i] + add));
			tf += __builtin_popcount((unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, x)) & valid);
		}
	}
	return tf;
#else
	/* two sorted lists merged without a branch a step */
	uint32_t i = 0, k = 0;
	int64_t tf = 0;
	while (i < na && k < nc) {
		unsigned x = a[i] + 1u, y = c[k];
		tf += x == y;
		i += x <= y;
		k += y <= x;
	}
	return tf;
#endif
}

/* Whether y is among l[0..n) (bytes in pbuf, POS_SLACK after them). */
static inline int byte_in(const unsigned char *l, uint32_t n, unsigned y)
{
#ifdef __SSE2__
	__m128i v = _mm_set1_epi8((char)(unsigned char)y);
	for (uint32_t k = 0; k < n; k += 16) {
		unsigned valid = n - k >= 16 ? 0xffffu : (1u << (n - k)) - 1;
		if ((unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(l + k)), v)) &
		    valid)
			return 1;
	}
	return 0;
#else
	for (uint32_t k = 0; k < n && l[k] <= y; k++)
		if (l[k] == y)
			return 1;
	return 0;
#endif
}

/* The occurrences of the phrase of t[0..m)'s terms in the document they
 * are all at (cursors with positions): the start positions x with token j
 * at x + j for every j, from each token's positions there. Returns them
 * (>= 0) or bm25_cur_positions' errors. */
static int64_t phrase_tf(cursor *t, size_t m)
{
	/* Blocks of one byte a position (positions below 256). */
	const unsigned char *b[SS_BM25_MAX_PHRASE];
	if (m == 2) {
		for (size_t j = 0; j < 2; j++) {
			int rc = cur_pos_bytes(&t[j], &b[j]);
			if (rc <= 0)
				return rc < 0 ? rc : phrase_tf_varint(t, m);
		}
		return pair_tf_bytes(b[0], t[0].tf[t[0].pos], b[1], t[1].tf[t[1].pos]);
	}
	/* The starts the first token gives, kept where each other token
	 * stands at its offset, those whose block's positions are read
	 * already first, then fewest positions first: the tokens after the
	 * first that leaves none are not read (their blocks' positions, most
	 * often, not at all). */
	size_t o[SS_BM25_MAX_PHRASE];
	uint64_t key[SS_BM25_MAX_PHRASE]; /* tokens whose block's positions are read already first */
	for (size_t j = 0; j < m; j++) {
		key[j] = (uint64_t)(t[j].pblk != t[j].blk) << 32 | t[j].tf[t[j].pos];
		size_t i = j;
		for (; i > 0 && key[o[i - 1]] > key[j]; i--)
			o[i] = o[i - 1];
		o[i] = j;
	}
	unsigned char x[256];
	uint32_t nx = 0;
	for (size_t q = 0; q < m; q++) {
		size_t j = o[q];
		int rc = cur_pos_bytes(&t[j], &b[j]);
		if (rc <= 0)
			return rc < 0 ? rc : phrase_tf_varint(t, m);
		uint32_t n = t[j].tf[t[j].pos], keep = 0;
		if (!q) {
			for (uint32_t i = 0; i < n && nx < 256; i++)
				if (b[j][i] >= j)
					x[nx++] = (unsigned char)(b[j][i] - j);
			continue;
		}
		for (uint32_t i = 0; i < nx; i++) {
			unsigned y = x[i] + (unsigned)j;
			if (y < 256 && byte_in(b[j], n, y))
				x[keep++] = x[i];
		}
		if (!(nx = keep))
			return 0;
	}
	return nx;
}

/* bm25_internal.h. Phrase p's documents, each with its number of
 * occurrences (every start position where its tokens stand in order,
 * overlaps counted: FTS5's phrase frequency), and its idf from their number. The documents holding every
 * token are found by the rarest token's postings, the others' cursors
 * seeking through their skip tables (a common token's blocks are decoded
 * only where the rare one has a document); in each such document the
 * tokens' own positions, stored beside their postings (term_positions),
 * are read; on an index without them (or for a token without them), the
 * document's positions. */
int bm25_phrase_clause(ss_bm25 *b, size_t p, clause *c, unsigned char *buf, char *errmsg)
{
	size_t m = b->ph[p + 1] - b->ph[p], opened = 0, r = 0;
	cursor *t = calloc(m, sizeof *t);
	uint32_t tid[SS_BM25_MAX_PHRASE];
	int rc = t ? 0 : SS_ERR_NOMEM, said = 1; /* said: errmsg is set for rc */
	for (size_t j = 0; !rc && j < m; j++) {
		int64_t id;
		if ((rc = bm25_cur_open(b, b->ptok[b->ph[p] + j], NULL, -1, &t[j], &id, buf, errmsg)) <= 0)
			break; /* an error, or a token no document holds: no document */
		rc = 0;
		opened++;
		tid[j] = (uint32_t)id;
		if (t[j].df < t[r].df)
			r = j;
	}
	/* term positions for every token, or none used */
	int tp = b->term_pos && m > 1 && !rc && opened == m;
	for (size_t j = 0; tp && j < m; j++) {
		int o = bm25_cur_pos_open(b, &t[j], tid[j], errmsg);
		tp = o > 0;
		rc = o < 0 ? o : 0;
	}
	said = rc != 0;
	/* The others, rarest first: the first that lacks d moves the rarest
	 * on, without decoding the commoner tokens' blocks. */
	size_t ord[SS_BM25_MAX_PHRASE], n_ord = 0;
	for (size_t j = 0; j < opened; j++) {
		if (j == r)
			continue;
		size_t i = n_ord++;
		for (; i > 0 && t[ord[i - 1]].df > t[j].df; i--)
			ord[i] = ord[i - 1];
		ord[i] = j;
	}
	while (!rc && opened == m && t[r].cur != END) {
		uint32_t d = t[r].cur, next = d;
		for (size_t i = 0; !rc && i < n_ord && next == d; i++)
			if (!(rc = phrase_seek(&t[ord[i]], d, buf)))
				next = t[ord[i]].cur;
		if (rc)
			break;
		if (next == END)
			break;
		if (next != d) {
			rc = phrase_seek(&t[r], next, buf);
			continue;
		}
		/* one token: its postings' tf is its occurrences */
		size_t n = 0;
		uint32_t tf = m == 1 ? t[r].tf[t[r].pos] : 0;
		if (tp) {
			int64_t f = phrase_tf(t, m);
			if (f < 0) {
				rc = (int)f;
				break;
			}
			tf = f > UINT32_MAX ? UINT32_MAX : (uint32_t)f;
		} else if (m > 1 && (rc = bm25_read_positions(b, d, &n, errmsg))) {
			said = 1;
			break;
		}
		for (size_t i = 0; !tp && m > 1 && i + m <= n; i++) {
			size_t q = 0;
			while (q < m && b->dseq[i + q] == tid[q])
				q++;
			tf += q == m;
		}
		if ((tf && (rc = clause_push(c, d, tf))) || (rc = cur_next(&t[r], buf)))
			break;
	}
	if (rc && !said && rc != SS_ERR_NOMEM)
		rc = bm25_read_error(b, rc, errmsg);
	c->idf = bm25_idf(b, (double)(b->g ? b->g->pdf[p] : (int64_t)c->n));
	c->tid = 0;
	for (size_t j = 0; j < opened; j++)
		bm25_cur_close(&t[j]);
	free(t);
	return rc;
}

/* dl_of with errmsg set on failure. */
static int dl_get(ss_bm25 *b, uint32_t rid, double *dl, char *errmsg)
{
	int rc = dl_of(b, rid, dl);
	return rc == SS_ERR_IO ? bm25_sqlfail(b, errmsg, "reading document lengths") : rc;
}

/* A document scored by the clauses, before proximity: score, and the bound
 * of its score with proximity. */
typedef struct {
	uint32_t rid;
	double score, ub;
} cand;

static int cmp_cand_ub(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->ub != y->ub)
		return x->ub > y->ub ? -1 : 1;
	return x->rid < y->rid ? -1 : x->rid > y->rid;
}

/* BM25TP's proximity score of document rid (length dl) for the clauses
 * c[0..n) with a tid; acc: scratch, n doubles. */
static int tp_score(ss_bm25 *b, uint32_t rid, double dl, const clause *c, int n, double *acc, double *out,
		    char *errmsg)
{
	size_t len;
	int rc = bm25_read_positions(b, rid, &len, errmsg);
	if (rc)
		return rc;
	for (int j = 0; j < n; j++)
		acc[j] = 0;
	int last = -1;
	size_t last_p = 0;
	for (size_t p = 0; p < len; p++) {
		int j = 0;
		while (j < n && c[j].tid != b->dseq[p])
			j++;
		if (j == n)
			continue;
		if (last >= 0 && last != j) {
			double d = (double)(p - last_p);
			acc[j] += c[last].idf / (d * d);
			acc[last] += c[j].idf / (d * d);
		}
		last = j;
		last_p = p;
	}
	double kk = len_norm(dl, b->qavgdl, b->k1, b->b), s = 0;
	for (int j = 0; j < n; j++)
		if (acc[j] > 0)
			s += (c[j].idf < 1 ? c[j].idf : 1) * acc[j] * (b->k1 + 1) / (acc[j] + kk);
	*out = s;
	return 0;
}

/* One search: its clauses c[0..n_cl) (the terms, then the phrases); the
 * terms that take part in proximity, tpc[0..n_tp) (shallow copies of
 * clauses, in query order) and which clauses they are (is_tp); the
 * candidates for proximity cd[0..n_cd); the top-k heap hits[0..n_hits). */
typedef struct {
	clause *c;
	int n_cl;
	unsigned char *buf; /* a block's bytes, BLOCK_MAX_BYTES */
	double *acc;        /* tp_score's scratch, n_cl */
	clause *tpc;
	char *is_tp;
	int n_tp;
	cand *cd;
	size_t n_cd, cap_cd;
	ss_bm25_hit *hits;
	int k, n_hits;
} clause_set;

/* Reads every clause's documents into s->c: the terms' postings, the
 * phrases' documents (those ss_bm25_stats found when it kept them,
 * scored by the union's df). */
static int cs_open(ss_bm25 *b, clause_set *s, char *errmsg)
{
	int n_cl = s->n_cl = (int)(b->n_q + b->n_ph), rc = 0;
	s->c = calloc((size_t)n_cl, sizeof *s->c);
	s->buf = malloc(BLOCK_MAX_BYTES);
	s->acc = malloc((size_t)n_cl * sizeof *s->acc);
	s->tpc = malloc((size_t)n_cl * sizeof *s->tpc);
	s->is_tp = calloc((size_t)n_cl, 1);
	if (!s->c || !s->buf || !s->acc || !s->tpc || !s->is_tp)
		return SS_ERR_NOMEM;
	for (size_t i = 0; i < b->n_q && !rc; i++)
		rc = term_clause(b, b->qterms[i], b->n_krow ? &b->krow[i] : NULL, b->g ? b->g->df[i] : -1, &s->c[i],
				 s->buf, errmsg);
	for (size_t p = 0; p < b->n_ph && !rc; p++) {
		clause *c = &s->c[b->n_q + p];
		if (!b->n_kph) {
			rc = bm25_phrase_clause(b, p, c, s->buf, errmsg);
			continue;
		}
		*c = b->kph[p];
		b->kph[p] = (clause){ 0 };
		c->idf = bm25_idf(b, (double)b->g->pdf[p]);
	}
	return rc;
}

/* The terms with positions, in query order (the clauses keep theirs: a
 * score sums its parts in query order, as bm25_maxscore_search's do);
 * none unless two or more. */
static void cs_proximity_terms(ss_bm25 *b, clause_set *s)
{
	for (int i = 0; i < (int)b->n_q; i++)
		if (s->c[i].tid && s->c[i].n) {
			s->tpc[s->n_tp++] = s->c[i];
			s->is_tp[i] = 1;
		}
	if (s->n_tp < 2)
		s->n_tp = 0;
}

static int cand_push(clause_set *s, cand x)
{
	if (s->n_cd == s->cap_cd) {
		size_t cap = s->cap_cd ? 2 * s->cap_cd : 1024;
		cand *cd = realloc(s->cd, cap * sizeof *cd);
		if (!cd)
			return SS_ERR_NOMEM;
		s->cd = cd;
		s->cap_cd = cap;
	}
	s->cd[s->n_cd++] = x;
	return 0;
}

/* Every document of the clauses (all of them when `all`), in rid order,
 * scored in full: into the heap, or, when two proximity terms are in it,
 * among the candidates for proximity with its bound. */
static int cs_merge(ss_bm25 *b, clause_set *s, int all, const int64_t *exclude, size_t n_exclude, char *errmsg)
{
	clause *c = s->c;
	int n_cl = s->n_cl, n_tp = s->n_tp, rc;
	for (;;) {
		uint32_t d = END;
		for (int i = 0; i < n_cl; i++)
			if (c[i].at < c[i].n && c[i].rid[c[i].at] < d)
				d = c[i].rid[c[i].at];
		if (d == END)
			return 0;
		double dl, sc = 0, ub = 0;
		int n_in = 0, n_tp_in = 0;
		if ((rc = dl_get(b, d, &dl, errmsg)))
			return rc;
		double norm = len_norm(dl, b->qavgdl, b->k1, b->b);
		for (int i = 0; i < n_cl; i++)
			if (c[i].at < c[i].n && c[i].rid[c[i].at] == d) {
				sc += c[i].idf * w_of(c[i].tf[c[i].at], norm, b->k1);
				n_in++;
				if (n_tp && s->is_tp[i]) {
					n_tp_in++;
					ub += (c[i].idf < 1 ? c[i].idf : 1) * (b->k1 + 1);
				}
				c[i].at++;
			}
		if ((all && n_in < n_cl) || (n_exclude && excluded(d, exclude, n_exclude)))
			continue;
		if (n_tp_in < 2)
			heap_offer(s->hits, &s->n_hits, s->k, (ss_bm25_hit){ d, sc });
		else if ((rc = cand_push(s, (cand){ d, sc, sc + ub })))
			return rc;
	}
}

/* Proximity: the candidates by bound, best first, until no bound reaches
 * the k-th score (or a union's earlier shards' theta). */
static int cs_proximity(ss_bm25 *b, clause_set *s, char *errmsg)
{
	if (s->n_cd) /* cd is NULL while empty */
		qsort(s->cd, s->n_cd, sizeof *s->cd, cmp_cand_ub);
	double theta0 = b->g ? b->g->theta : 0;
	for (size_t i = 0; i < s->n_cd; i++) {
		const cand *x = &s->cd[i];
		if ((s->n_hits == s->k && x->ub * SLACK < s->hits[0].score) || x->ub * SLACK < theta0)
			break;
		double dl, tp;
		int rc;
		if ((rc = dl_get(b, x->rid, &dl, errmsg)) || (rc = tp_score(b, x->rid, dl, s->tpc, s->n_tp, s->acc, &tp, errmsg)))
			return rc;
		heap_offer(s->hits, &s->n_hits, s->k, (ss_bm25_hit){ x->rid, x->score + tp });
	}
	return 0;
}

/* bm25_internal.h. Every candidate is scored (no pruning); proximity reads
 * positions only for the candidates whose bound can reach the top k. */
int bm25_clause_search(ss_bm25 *b, unsigned flags, int k, const int64_t *exclude, size_t n_exclude,
		       ss_bm25_hit *hits, char *errmsg)
{
	clause_set s = { .hits = hits, .k = k };
	int all = (flags & SS_BM25_ALL) != 0, rc = cs_open(b, &s, errmsg);
	if (!rc && (flags & SS_BM25_PROXIMITY))
		cs_proximity_terms(b, &s);
	int empty = 0; /* all, and a clause no document holds */
	for (int i = 0; !rc && all && i < s.n_cl; i++)
		empty |= !s.c[i].n;
	if (!rc && !empty && !(rc = cs_merge(b, &s, all, exclude, n_exclude, errmsg)) &&
	    !(rc = cs_proximity(b, &s, errmsg))) {
		qsort(hits, (size_t)s.n_hits, sizeof *hits, cmp_hit);
		rc = s.n_hits;
	}
	sqlite3_blob_close(b->dl_blob);
	b->dl_blob = NULL;
	sqlite3_blob_close(b->pos_blob);
	b->pos_blob = NULL;
	for (int i = 0; s.c && i < s.n_cl; i++) {
		free(s.c[i].rid);
		free(s.c[i].tf);
	}
	free(s.c);
	free(s.cd);
	free(s.buf);
	free(s.acc);
	free(s.tpc);
	free(s.is_tp);
	return rc;
}
