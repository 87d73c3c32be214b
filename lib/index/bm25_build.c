/* bm25_build.c — a document's term vector and positions (ss_bm25_terms)
 * and the commit that writes the postings and the corpus statistics from
 * every document's term vector (ss_bm25_commit); see bm25.h. */
#include "index/bm25_internal.h"

#include <stdlib.h>
#include <string.h>

static int on_doc_token(void *ctx, int flags, const char *tok, int n, int start, int end)
{
	(void)start;
	(void)end;
	ss_bm25 *b = ctx;
	int plain = !(flags & FTS5_TOKEN_COLOCATED);
	if (plain)
		b->n_words++;
	vocab *v = &b->v;
	if (bm25_vocab_reserve(v))
		return SQLITE_NOMEM;
	size_t j = bm25_vocab_slot(v, tok, (size_t)n);
	if (!v->tid[j]) {
		if (v->next_tid > UINT32_MAX || !(v->term[j] = strndup(tok, (size_t)n)))
			return SQLITE_NOMEM;
		v->tid[j] = (uint32_t)v->next_tid++;
		v->n++;
		/* A failed bind leaves its message on the connection, as a
		 * failed step does (ss_bm25_terms reports it). */
		int rc = sqlite3_bind_int64(b->ins_term, 1, v->tid[j]);
		if (rc == SQLITE_OK)
			rc = sqlite3_bind_text(b->ins_term, 2, v->term[j], n, SQLITE_STATIC);
		if (rc == SQLITE_OK && (rc = sqlite3_step(b->ins_term)) == SQLITE_DONE)
			rc = SQLITE_OK;
		sqlite3_reset(b->ins_term);
		if (rc != SQLITE_OK)
			return rc;
	}
	if (b->n_tids == b->cap_tids) {
		size_t cap = b->cap_tids ? 2 * b->cap_tids : 1024;
		uint32_t *t = realloc(b->tids, cap * sizeof *t);
		if (!t)
			return SQLITE_NOMEM;
		b->tids = t;
		b->cap_tids = cap;
	}
	b->tids[b->n_tids++] = v->tid[j];
	if (plain) {
		if (b->n_seq == b->cap_seq) {
			size_t cap = b->cap_seq ? 2 * b->cap_seq : 1024;
			uint32_t *t = realloc(b->seq, cap * sizeof *t);
			if (!t)
				return SQLITE_NOMEM;
			b->seq = t;
			b->cap_seq = cap;
		}
		b->seq[b->n_seq++] = v->tid[j];
	}
	return SQLITE_OK;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

int ss_bm25_terms(ss_bm25 *b, const char *text, size_t len, const void **vec_out, size_t *vec_len,
		  const void **seq_out, size_t *seq_len, int64_t *n_terms, char *errmsg)
{
	b->n_tids = 0;
	b->n_seq = 0;
	b->n_words = 0;
	int rc = b->tk.xTokenize(b->tok, b, FTS5_TOKENIZE_DOCUMENT, text ? text : "", (int)len, on_doc_token);
	if (rc == SQLITE_NOMEM)
		return SS_ERR_NOMEM;
	if (rc != SQLITE_OK)
		return bm25_sqlfail(b, errmsg, "storing a term");
	qsort(b->tids, b->n_tids, sizeof *b->tids, cmp_u32);
	/* Each (tid, tf) pair takes at most 10 bytes. */
	if (b->n_tids * 10 + 1 > b->vec_cap) {
		free(b->vec);
		b->vec_cap = b->n_tids * 10 + 1;
		if (!(b->vec = malloc(b->vec_cap))) {
			b->vec_cap = 0;
			return SS_ERR_NOMEM;
		}
	}
	unsigned char *vec = b->vec;
	size_t vn = 0;
	uint32_t prev = 0;
	for (size_t i = 0; i < b->n_tids;) {
		size_t j = i;
		while (j < b->n_tids && b->tids[j] == b->tids[i])
			j++;
		vn += put_varint(vec + vn, b->tids[i] - prev);
		vn += put_varint(vec + vn, j - i);
		prev = b->tids[i];
		i = j;
	}
	if (b->n_seq * 5 + 1 > b->seq_vec_cap) {
		free(b->seq_vec);
		b->seq_vec_cap = b->n_seq * 5 + 1;
		if (!(b->seq_vec = malloc(b->seq_vec_cap))) {
			b->seq_vec_cap = 0;
			return SS_ERR_NOMEM;
		}
	}
	size_t sn = 0;
	for (size_t i = 0; i < b->n_seq; i++)
		sn += put_varint(b->seq_vec + sn, b->seq[i]);
	*vec_out = vec;
	*vec_len = vn;
	*seq_out = b->seq_vec;
	*seq_len = sn;
	*n_terms = b->n_words;
	return 0;
}

/* One term's postings being written: data and skip entries grow as
 * documents arrive in rid order; with positions, pos (each posting's
 * positions) and pend (the end of each block's in pos) beside them. */
typedef struct {
	unsigned char *data, *skip, *pos, *pend;
	uint32_t len, cap, skip_len, skip_cap, pos_len, pos_cap, pend_len, pend_cap;
	uint32_t n, last_rid, in_block;
	int no_pos; /* a posting whose tf is not its number of positions (a compound): no positions row */
	float block_max;
	double maxw;
} plist;

static int grow(unsigned char **p, uint32_t *cap, uint64_t need)
{
	if (need <= *cap)
		return 0;
	uint64_t c = *cap ? *cap : 16;
	while (c < need)
		c *= 2;
	if (c > UINT32_MAX)
		return SS_ERR_TOO_LARGE;
	unsigned char *q = realloc(*p, c);
	if (!q)
		return SS_ERR_NOMEM;
	*p = q;
	*cap = (uint32_t)c;
	return 0;
}

/* The positions of l's block being ended (the pairs from the last skip
 * entry's end in data, their positions from the last pend in pos),
 * rewritten in place one byte each, absolute, when every one is below
 * 256 (a block of short documents): skipping them is then adding tfs and
 * reading them a copy. Returns POS_BYTES when rewritten, else 0. The
 * varint deltas are never shorter, so the bytes fit where they were. */
static uint32_t block_bytes(plist *l)
{
	uint32_t ps = l->pend_len ? rd32(l->pend + l->pend_len - 4) & ~POS_BYTES : 0;
	uint32_t ds = l->skip_len ? rd32(l->skip + l->skip_len - SKIP_BYTES + 4) : 0;
	if (l->no_pos || l->pos_len == ps)
		return 0;
	for (int pass = 0; pass < 2; pass++) {
		size_t di = ds, pi = ps, out = ps;
		while (di < l->len) {
			uint64_t d = 0, tf = 0, at = 0, x = 0;
			get_varint(l->data, l->len, &di, &d); /* written by plist_add */
			get_varint(l->data, l->len, &di, &tf);
			for (uint64_t j = 0; j < tf; j++) {
				get_varint(l->pos, l->pos_len, &pi, &x);
				if ((at += x) > 255)
					return 0;
				if (pass)
					l->pos[out++] = (unsigned char)at;
			}
		}
		if (pass)
			l->pos_len = (uint32_t)out;
	}
	return POS_BYTES;
}

static int plist_end_block(plist *l)
{
	uint32_t bytes = block_bytes(l);
	int rc = grow(&l->skip, &l->skip_cap, (uint64_t)l->skip_len + SKIP_BYTES);
	if (rc)
		return rc;
	unsigned char *e = l->skip + l->skip_len;
	wr32(e, l->last_rid);
	wr32(e + 4, l->len);
	memcpy(e + 8, &l->block_max, 4);
	l->skip_len += SKIP_BYTES;
	if ((rc = grow(&l->pend, &l->pend_cap, (uint64_t)l->pend_len + 4)))
		return rc;
	wr32(l->pend + l->pend_len, l->pos_len | bytes);
	l->pend_len += 4;
	l->in_block = 0;
	l->block_max = 0;
	return 0;
}

static int plist_add(plist *l, uint32_t rid, uint64_t tf, double w)
{
	int rc = grow(&l->data, &l->cap, (uint64_t)l->len + 20);
	if (rc)
		return rc;
	l->len += (uint32_t)put_varint(l->data + l->len, rid - l->last_rid);
	l->len += (uint32_t)put_varint(l->data + l->len, tf);
	l->last_rid = rid;
	l->n++;
	/* Rounded up so that the float stays an upper bound. */
	float wf = (float)w;
	if ((double)wf < w)
		wf = nextafterf(wf, INFINITY);
	if (wf > l->block_max)
		l->block_max = wf;
	if (w > l->maxw)
		l->maxw = w;
	if (++l->in_block == BLOCK)
		return plist_end_block(l);
	return 0;
}

/* The error for document row `rid` (docs.id `id`, NULL when it has none)
 * outside 1..SS_BM25_MAX_RID. */
static int bad_rid(int64_t rid, const char *id, char *errmsg)
{
	return ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document %s has row id %lld, outside 1..%d",
		       id ? id : "(no id)", (long long)rid, SS_BM25_MAX_RID);
}


/* The commit's postings as they are built: one list per term id, the
 * documents' lengths by rid, and the corpus's counts. */
typedef struct {
	plist *pl;        /* [max_tid + 1] */
	uint32_t *doclen; /* [max_rid + 1] */
	int64_t n_docs, n_terms, max_rid, max_tid;
	/* With positions: the document's, by term, as chains through nxt
	 * (ascending), for the terms whose stamp is the document's rid. */
	int with_pos;
	uint32_t *stamp, *head, *cnt; /* [max_tid + 1] */
	uint32_t *nxt;                /* [cap_nxt] */
	size_t cap_nxt;
} commit_state;

/* The rids index doclen: one outside its range (an edited file) is
 * refused before anything is sized by it (two searches of the rowid, no
 * scan: no ORDER BY). */
static int check_rids(ss_bm25 *b, char *errmsg)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(b->db, "SELECT rid, id FROM docs WHERE rid < 1 OR rid > ?1 LIMIT 1", -1, &st,
			       NULL) != SQLITE_OK)
		return bm25_sqlfail(b, errmsg, "sqlite");
	int s = SQLITE_DONE, rc = bm25_bound(sqlite3_bind_int64(st, 1, SS_BM25_MAX_RID), errmsg, "checking row ids");
	if (!rc && (s = sqlite3_step(st)) == SQLITE_ROW)
		rc = bad_rid(sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1), errmsg);
	else if (!rc && s != SQLITE_DONE)
		rc = bm25_sqlfail(b, errmsg, "checking row ids");
	sqlite3_finalize(st);
	return rc;
}

/* N, the sum of the documents' lengths and the largest rid into cs. */
static int count_corpus(ss_bm25 *b, commit_state *cs, char *errmsg)
{
	sqlite3_stmt *st = NULL;
	int rc = 0;
	if (sqlite3_prepare_v2(b->db, "SELECT count(*), coalesce(sum(n_terms), 0), coalesce(max(rid), 0) FROM docs",
			       -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
		rc = bm25_sqlfail(b, errmsg, "sqlite");
	} else {
		cs->n_docs = sqlite3_column_int64(st, 0);
		cs->n_terms = sqlite3_column_int64(st, 1);
		cs->max_rid = sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	/* checked by check_rids; kept by the allocation it sizes */
	if (!rc && (cs->max_rid < 0 || cs->max_rid > SS_BM25_MAX_RID))
		rc = bad_rid(cs->max_rid, NULL, errmsg);
	return rc;
}

/* Document rid's positions (its positions.seq, seq[0..n)) into cs's
 * chains: for each term, its positions in the document, ascending. */
static int chain_positions(commit_state *cs, uint32_t rid, const unsigned char *seq, size_t n, char *errmsg)
{
	if (n > cs->cap_nxt) { /* a varint takes a byte at least: n bounds the positions */
		uint32_t *x = realloc(cs->nxt, n * sizeof *x);
		if (!x)
			return SS_ERR_NOMEM;
		cs->nxt = x;
		cs->cap_nxt = n;
	}
	/* decoded into nxt first, then chained from the last position back */
	size_t i = 0, m = 0;
	while (i < n) {
		uint64_t t;
		if (get_varint(seq, n, &i, &t) || t > (uint64_t)cs->max_tid)
			return ss_errf(errmsg, SS_ERR_FORMAT, "damaged positions in document row %u", rid);
		cs->nxt[m++] = (uint32_t)t;
	}
	while (m--) {
		uint32_t t = cs->nxt[m];
		if (cs->stamp[t] != rid) {
			cs->stamp[t] = rid;
			cs->cnt[t] = 0;
			cs->head[t] = END;
		}
		cs->nxt[m] = cs->head[t];
		cs->head[t] = (uint32_t)m;
		cs->cnt[t]++;
	}
	return 0;
}

/* Term tid's positions in document rid (chained by chain_positions) after
 * l's positions, as varint deltas (the first from 0): when there are tf
 * of them; else the term keeps no positions. */
static int add_positions(commit_state *cs, plist *l, uint32_t rid, uint64_t tid, uint64_t tf)
{
	uint32_t have = cs->stamp[tid] == rid ? cs->cnt[tid] : 0;
	if (l->no_pos || have != tf) {
		l->no_pos = 1;
		return 0;
	}
	int rc = grow(&l->pos, &l->pos_cap, (uint64_t)l->pos_len + 5 * tf);
	if (rc)
		return rc;
	uint32_t last = 0;
	for (uint32_t p = cs->head[tid]; p != END; p = cs->nxt[p]) {
		l->pos_len += (uint32_t)put_varint(l->pos + l->pos_len, p - last);
		last = p;
	}
	return 0;
}

/* The term vector of st's row (rid, n_terms, terms[, seq]) into the
 * postings (and with positions, its positions). */
static int add_vector(commit_state *cs, sqlite3_stmt *st, double avgdl, char *errmsg)
{
	int64_t rid64 = sqlite3_column_int64(st, 0);
	if (rid64 < 1 || rid64 > cs->max_rid)
		return bad_rid(rid64, NULL, errmsg);
	uint32_t rid = (uint32_t)rid64;
	int64_t dl = sqlite3_column_int64(st, 1);
	const unsigned char *v = sqlite3_column_blob(st, 2);
	size_t vn = (size_t)sqlite3_column_bytes(st, 2), i = 0;
	cs->doclen[rid] = dl > UINT32_MAX ? UINT32_MAX : (uint32_t)dl;
	int rc;
	if (cs->with_pos && (rc = chain_positions(cs, rid, sqlite3_column_blob(st, 3),
						  (size_t)sqlite3_column_bytes(st, 3), errmsg)))
		return rc;
	uint64_t tid = 0, d, tf;
	while (i < vn) {
		if (get_varint(v, vn, &i, &d) || get_varint(v, vn, &i, &tf) || (tid += d) > (uint64_t)cs->max_tid)
			return ss_errf(errmsg, SS_ERR_FORMAT, "damaged term vector in document row %u", rid);
		double w = tf_weight((double)tf, (double)cs->doclen[rid], avgdl, SS_BM25_K1, SS_BM25_B);
		/* the positions before the posting, which may end their block */
		if ((cs->with_pos && (rc = add_positions(cs, &cs->pl[tid], rid, tid, tf))) ||
		    (rc = plist_add(&cs->pl[tid], rid, tf, w)))
			return ss_errf(errmsg, rc, "postings of term %llu", (unsigned long long)tid);
	}
	return 0;
}

/* Every document's term vector, in rid order, into cs's postings. */
static int read_vectors(ss_bm25 *b, commit_state *cs, char *errmsg)
{
	double avgdl = cs->n_docs && cs->n_terms ? (double)cs->n_terms / (double)cs->n_docs : 1;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(b->db, cs->with_pos ? "SELECT d.rid, d.n_terms, d.terms, p.seq FROM docs d"
					     " LEFT JOIN positions p ON p.rid = d.rid ORDER BY d.rid"
					   : "SELECT rid, n_terms, terms FROM docs ORDER BY rid",
			       -1, &st, NULL) != SQLITE_OK)
		return bm25_sqlfail(b, errmsg, "sqlite");
	int rc = 0, s;
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW)
		rc = add_vector(cs, st, avgdl, errmsg);
	if (!rc && s != SQLITE_DONE)
		rc = bm25_sqlfail(b, errmsg, "reading term vectors");
	sqlite3_finalize(st);
	return rc;
}

/* Term t's positions row (term_positions) through ins: the blocks' ends,
 * then the positions. *blob: scratch (*blob_cap bytes). */
static int write_term_positions(ss_bm25 *b, plist *l, int64_t t, sqlite3_stmt *ins, unsigned char **blob,
				uint32_t *blob_cap, char *errmsg)
{
	uint64_t size = (uint64_t)l->pend_len + l->pos_len;
	int rc = grow(blob, blob_cap, size);
	if (rc)
		return rc;
	memcpy(*blob, l->pend, l->pend_len);
	memcpy(*blob + l->pend_len, l->pos, l->pos_len);
	if ((rc = bm25_bound(sqlite3_bind_int64(ins, 1, t), errmsg, "writing positions")) ||
	    (rc = bm25_bound(sqlite3_bind_blob64(ins, 2, *blob, size, SQLITE_STATIC), errmsg, "writing positions")))
		return rc;
	if (sqlite3_step(ins) != SQLITE_DONE)
		rc = bm25_sqlfail(b, errmsg, "writing positions");
	sqlite3_reset(ins);
	return rc;
}

/* Term t's row: its postings l (freed here) through upd, or deleted
 * through del when no document holds it; its positions through ins (NULL:
 * none are written). *blob: scratch (*blob_cap bytes). */
static int write_term(ss_bm25 *b, plist *l, int64_t t, sqlite3_stmt *upd, sqlite3_stmt *del, sqlite3_stmt *ins,
		      unsigned char **blob, uint32_t *blob_cap, char *errmsg)
{
	sqlite3_stmt *q = del;
	int rc;
	if (l->n) {
		if (l->in_block && (rc = plist_end_block(l)))
			return rc;
		if (ins && !l->no_pos && (rc = write_term_positions(b, l, t, ins, blob, blob_cap, errmsg)))
			return rc;
		uint64_t size = 4 + (uint64_t)l->skip_len + l->len;
		if ((rc = grow(blob, blob_cap, size)))
			return rc;
		wr32(*blob, l->skip_len / SKIP_BYTES);
		memcpy(*blob + 4, l->skip, l->skip_len);
		memcpy(*blob + 4 + l->skip_len, l->data, l->len);
		q = upd;
		if ((rc = bm25_bound(sqlite3_bind_int64(q, 2, l->n), errmsg, "writing postings")) ||
		    (rc = bm25_bound(sqlite3_bind_double(q, 3, l->maxw), errmsg, "writing postings")) ||
		    (rc = bm25_bound(sqlite3_bind_blob64(q, 4, *blob, size, SQLITE_STATIC), errmsg, "writing postings")))
			return rc;
	}
	if ((rc = bm25_bound(sqlite3_bind_int64(q, 1, t), errmsg, "writing postings")))
		return rc;
	if (sqlite3_step(q) != SQLITE_DONE)
		rc = bm25_sqlfail(b, errmsg, "writing postings");
	sqlite3_reset(q);
	free(l->data);
	free(l->skip);
	free(l->pos);
	free(l->pend);
	l->data = l->skip = l->pos = l->pend = NULL;
	return rc;
}

/* terms.df/maxw/postings of every term; the terms no document holds
 * dropped; term_positions emptied, then (with positions) refilled. */
static int write_postings(ss_bm25 *b, commit_state *cs, char *errmsg)
{
	sqlite3_stmt *upd = NULL, *del = NULL, *ins = NULL;
	if (sqlite3_exec(b->db, "DELETE FROM term_positions", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(b->db, "UPDATE terms SET df = ?2, maxw = ?3, postings = ?4 WHERE tid = ?1", -1, &upd,
			       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(b->db, "DELETE FROM terms WHERE tid = ?1", -1, &del, NULL) != SQLITE_OK ||
	    (cs->with_pos && sqlite3_prepare_v2(b->db, "INSERT INTO term_positions(tid, pos) VALUES(?1, ?2)", -1, &ins,
						NULL) != SQLITE_OK)) {
		sqlite3_finalize(upd);
		sqlite3_finalize(del);
		return bm25_sqlfail(b, errmsg, "sqlite");
	}
	unsigned char *blob = NULL;
	uint32_t blob_cap = 0;
	int rc = 0;
	for (int64_t t = 1; t <= cs->max_tid && !rc; t++)
		rc = write_term(b, &cs->pl[t], t, upd, del, ins, &blob, &blob_cap, errmsg);
	free(blob);
	sqlite3_finalize(upd);
	sqlite3_finalize(del);
	sqlite3_finalize(ins);
	return rc;
}

/* The bm25 row: N, the sum of the lengths, the largest rid, doclen (made
 * little endian in place). */
static int write_stats(ss_bm25 *b, commit_state *cs, char *errmsg)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(b->db, "INSERT OR REPLACE INTO bm25 VALUES(1, ?1, ?2, ?3, ?4)", -1, &st, NULL) !=
	    SQLITE_OK)
		return bm25_sqlfail(b, errmsg, "sqlite");
	for (int64_t r = 0; r <= cs->max_rid; r++)
		wr32((unsigned char *)&cs->doclen[r], cs->doclen[r]);
	const char *what = "writing corpus statistics";
	int rc;
	if (!(rc = bm25_bound(sqlite3_bind_int64(st, 1, cs->n_docs), errmsg, what)) &&
	    !(rc = bm25_bound(sqlite3_bind_int64(st, 2, cs->n_terms), errmsg, what)) &&
	    !(rc = bm25_bound(sqlite3_bind_int64(st, 3, cs->max_rid), errmsg, what)) &&
	    !(rc = bm25_bound(sqlite3_bind_blob64(st, 4, cs->doclen, (sqlite3_uint64)(cs->max_rid + 1) * 4,
						  SQLITE_STATIC), errmsg, what)) &&
	    sqlite3_step(st) != SQLITE_DONE)
		rc = bm25_sqlfail(b, errmsg, what);
	sqlite3_finalize(st);
	return rc;
}

/* Phases: check the rids, count the corpus, build every term's postings
 * from the term vectors in memory, write them, write the statistics. */
int ss_bm25_commit(ss_bm25 *b, int positions, char *errmsg)
{
	commit_state cs = { .max_tid = b->v.next_tid - 1, .with_pos = positions };
	int rc;
	if ((rc = check_rids(b, errmsg)) || (rc = count_corpus(b, &cs, errmsg)))
		return rc;
	cs.pl = calloc((size_t)cs.max_tid + 1, sizeof *cs.pl);
	cs.doclen = calloc((size_t)cs.max_rid + 1, sizeof *cs.doclen);
	if (positions) {
		cs.stamp = calloc((size_t)cs.max_tid + 1, sizeof *cs.stamp);
		cs.head = malloc(((size_t)cs.max_tid + 1) * sizeof *cs.head);
		cs.cnt = malloc(((size_t)cs.max_tid + 1) * sizeof *cs.cnt);
	}
	if (!cs.pl || !cs.doclen || (positions && (!cs.stamp || !cs.head || !cs.cnt)))
		rc = SS_ERR_NOMEM;
	else if (!(rc = read_vectors(b, &cs, errmsg)) && !(rc = write_postings(b, &cs, errmsg)))
		rc = write_stats(b, &cs, errmsg);
	for (int64_t t = 0; cs.pl && t <= cs.max_tid; t++) {
		free(cs.pl[t].data);
		free(cs.pl[t].skip);
		free(cs.pl[t].pos);
		free(cs.pl[t].pend);
	}
	free(cs.pl);
	free(cs.doclen);
	free(cs.stamp);
	free(cs.head);
	free(cs.cnt);
	free(cs.nxt);
	return rc;
}
