/* bm25_postings.c — what the searches read from the index file: the
 * corpus statistics, the documents' lengths, a term's postings block by
 * block through its skip table, a document's positions; see bm25.h (the
 * tables) and bm25_internal.h. */
#include "index/bm25_internal.h"

#include <stdlib.h>
#include <string.h>

int bm25_load_stats(ss_bm25 *b, char *errmsg)
{
	int64_t ver = -2;
	if (sqlite3_step(b->data_version) == SQLITE_ROW)
		ver = sqlite3_column_int64(b->data_version, 0);
	sqlite3_reset(b->data_version);
	if (ver == b->stats_version)
		return 0;
	sqlite3_stmt *st = NULL;
	int rc = 0;
	if (sqlite3_prepare_v2(b->db, "SELECT n_docs, n_terms, max_rid, length(doclen) FROM bm25 WHERE one = 1", -1,
			       &st, NULL) != SQLITE_OK)
		return bm25_sqlfail(b, errmsg, "sqlite");
	bm25_free_doclen(b);
	b->n_docs = 0;
	b->n_doc_terms = 0;
	b->avgdl = 1;
	b->max_rid = -1;
	int s = sqlite3_step(st);
	if (s == SQLITE_ROW) {
		int64_t n = sqlite3_column_int64(st, 0), t = sqlite3_column_int64(st, 1);
		b->max_rid = sqlite3_column_int64(st, 2);
		int64_t bytes = sqlite3_column_int64(st, 3);
		if (b->max_rid < 0 || b->max_rid > SS_BM25_MAX_RID || bytes != (b->max_rid + 1) * 4) {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document lengths of %lld bytes", (long long)bytes);
		} else if (!(b->dlc = calloc((size_t)b->max_rid / DL_CHUNK + 1, sizeof *b->dlc))) {
			rc = SS_ERR_NOMEM;
		} else {
			b->n_dlc = (size_t)b->max_rid / DL_CHUNK + 1;
			b->n_docs = (double)n;
			b->n_doc_terms = t;
			b->avgdl = n && t ? (double)t / (double)n : 1;
		}
	} else if (s != SQLITE_DONE) {
		rc = bm25_sqlfail(b, errmsg, "reading corpus statistics");
	}
	sqlite3_finalize(st);
	if (!rc)
		b->stats_version = ver;
	return rc;
}

int bm25_dl_load(ss_bm25 *b, uint32_t rid, double *dl)
{
	if ((int64_t)rid > b->max_rid) {
		*dl = 0;
		return 0;
	}
	size_t c = rid / DL_CHUNK;
	if (!b->dlc[c]) {
		size_t first = c * DL_CHUNK, n = (size_t)b->max_rid + 1 - first;
		if (n > DL_CHUNK)
			n = DL_CHUNK;
		uint32_t *v = malloc(n * 4);
		if (!v)
			return SS_ERR_NOMEM;
		if ((!b->dl_blob && sqlite3_blob_open(b->db, "main", "bm25", "doclen", 1, 0, &b->dl_blob) != SQLITE_OK) ||
		    sqlite3_blob_read(b->dl_blob, v, (int)(n * 4), (int)(first * 4)) != SQLITE_OK) {
			free(v);
			return SS_ERR_IO;
		}
		for (size_t i = 0; i < n; i++)
			v[i] = rd32((const unsigned char *)&v[i]);
		b->dlc[c] = v;
	}
	*dl = b->dlc[c][rid % DL_CHUNK];
	return 0;
}

int bm25_load_block(cursor *c, int64_t blk, unsigned char *buf)
{
	uint32_t start = blk ? rd32(c->skip + (blk - 1) * SKIP_BYTES + 4) : 0;
	uint32_t end = rd32(c->skip + blk * SKIP_BYTES + 4);
	uint32_t base = 4 + c->n_blocks * SKIP_BYTES;
	if (end < start || end - start > BLOCK_MAX_BYTES || (uint64_t)base + end > c->size)
		return SS_ERR_FORMAT;
	if (sqlite3_blob_read(c->blob, buf, (int)(end - start), (int)(base + start)) != SQLITE_OK)
		return SS_ERR_IO;
	uint64_t rid = blk ? rd32(c->skip + (blk - 1) * SKIP_BYTES) : 0, d, tf;
	size_t i = 0, n = end - start;
	int k = 0;
	if (n == 2 * BLOCK) {
		/* A full block of one-byte varints (a common term's), when no
		 * byte has its top bit: 128 pairs, decoded without a test each. */
		unsigned char top = 0;
		for (size_t j = 0; j < n; j++)
			top |= buf[j];
		if (!(top & 0x80)) {
			for (; k < BLOCK; k++) {
				rid += buf[2 * k];
				c->rid[k] = (uint32_t)rid;
				c->tf[k] = buf[2 * k + 1];
			}
			if (rid >= END)
				return SS_ERR_FORMAT;
			i = n;
		}
	}
	while (i < n && k < BLOCK) {
		/* One byte each, the common case, without the general loop. */
		if (i + 1 < n && buf[i] < 0x80 && buf[i + 1] < 0x80) {
			d = buf[i];
			tf = buf[i + 1];
			i += 2;
		} else if (get_varint(buf, n, &i, &d) || get_varint(buf, n, &i, &tf)) {
			return SS_ERR_FORMAT;
		}
		if ((rid += d) >= END)
			return SS_ERR_FORMAT;
		c->rid[k] = (uint32_t)rid;
		c->tf[k++] = tf > UINT32_MAX ? UINT32_MAX : (uint32_t)tf;
	}
	if (!k || i != n)
		return SS_ERR_FORMAT;
	c->blk = blk;
	c->n = k;
	c->pos = 0;
	c->cur = c->rid[0];
	return 0;
}

int64_t bm25_cur_shallow(cursor *c, uint32_t d)
{
	int64_t lo = c->sblk > c->blk ? c->sblk : c->blk, hi, step = 1;
	if (lo < 0)
		lo = 0;
	if (lo >= c->n_blocks || rd32(c->skip + lo * SKIP_BYTES) >= d)
		return c->sblk = lo;
	/* last(lo) < d: gallop to a block whose last rid >= d, then bisect. */
	for (hi = lo + 1; hi < c->n_blocks && rd32(c->skip + hi * SKIP_BYTES) < d; hi = lo + step) {
		lo = hi;
		step *= 2;
	}
	if (hi > c->n_blocks)
		hi = c->n_blocks;
	while (lo + 1 < hi) { /* last(lo) < d, last(hi) >= d or hi = n_blocks */
		int64_t mid = lo + (hi - lo) / 2;
		if (rd32(c->skip + mid * SKIP_BYTES) < d)
			lo = mid;
		else
			hi = mid;
	}
	return c->sblk = hi;
}

double bm25_idf(const ss_bm25 *b, double df)
{
	double idf = log((b->qN - df + 0.5) / (df + 0.5));
	return idf <= 0 ? 1e-6 : idf;
}

int bm25_term_lookup(ss_bm25 *b, const char *term, term_row *r, char *errmsg)
{
	int rc = 0;
	memset(r, 0, sizeof *r);
	sqlite3_bind_text(b->find_term, 1, term, -1, SQLITE_STATIC);
	int s = sqlite3_step(b->find_term);
	if (s == SQLITE_ROW) {
		r->found = 1;
		r->tid = sqlite3_column_int64(b->find_term, 0);
		r->df = sqlite3_column_int64(b->find_term, 1);
		r->maxw = sqlite3_column_double(b->find_term, 2);
	} else if (s != SQLITE_DONE) {
		rc = bm25_sqlfail(b, errmsg, "looking up a term");
	}
	sqlite3_reset(b->find_term);
	return rc;
}

int bm25_cur_open(ss_bm25 *b, const char *term, const term_row *row, int64_t gdf, cursor *t, int64_t *tid,
		    unsigned char *buf, char *errmsg)
{
	int rc = 0, found = 0;
	term_row r;
	if (!row && (rc = bm25_term_lookup(b, term, &r, errmsg)))
		return rc;
	if (!row)
		row = &r;
	if (row->found) {
		found = 1;
		memset(t, 0, sizeof *t);
		*tid = row->tid;
		t->df = row->df;
		t->idf = bm25_idf(b, (double)(gdf >= 0 ? gdf : t->df));
		/* maxw holds for the default k1, b and this index's avgdl; for
		 * others w < k1 + 1 (tf/(tf + k1 L) < 1); a union's avgdl scales
		 * it by at most lscale (set_query_stats). */
		int dflt = b->k1 == SS_BM25_K1 && b->b == SS_BM25_B;
		double mw = row->maxw * b->lscale;
		t->ub = t->idf * (dflt && mw < b->k1 + 1 ? mw : b->k1 + 1);
		t->bscale = dflt ? t->idf * b->lscale : 0;
		t->blk = -1;
		unsigned char hdr[4];
		if (sqlite3_blob_open(b->db, "main", "terms", "postings", *tid, 0, &t->blob) != SQLITE_OK)
			rc = bm25_sqlfail(b, errmsg, "reading postings");
		else if ((t->size = (uint32_t)sqlite3_blob_bytes(t->blob)) < 4 ||
			 sqlite3_blob_read(t->blob, hdr, 4, 0) != SQLITE_OK || (t->n_blocks = rd32(hdr)) == 0 ||
			 (uint64_t)t->n_blocks * SKIP_BYTES + 4 > t->size)
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "damaged postings of term \"%s\"", term);
		else if (!(t->skip = malloc((size_t)t->n_blocks * SKIP_BYTES)))
			rc = SS_ERR_NOMEM;
		else if (sqlite3_blob_read(t->blob, t->skip, (int)(t->n_blocks * SKIP_BYTES), 4) != SQLITE_OK)
			rc = bm25_sqlfail(b, errmsg, "reading postings");
		else if ((rc = bm25_load_block(t, 0, buf)))
			rc = ss_errf(errmsg, rc, "damaged postings of term \"%s\"", term);
	}
	if (rc && found)
		bm25_cur_close(t);
	return rc ? rc : found;
}

int bm25_read_error(ss_bm25 *b, int rc, char *errmsg)
{
	return rc == SS_ERR_IO ? bm25_sqlfail(b, errmsg, "reading postings") : ss_errf(errmsg, rc, "damaged postings");
}

void bm25_cur_close(cursor *t)
{
	sqlite3_blob_close(t->blob);
	free(t->skip);
	sqlite3_blob_close(t->pblob);
	free(t->pend);
	free(t->pbuf);
	free(t->ppos);
}

int bm25_cur_pos_open(ss_bm25 *b, cursor *c, uint32_t tid, char *errmsg)
{
	int s = sqlite3_blob_open(b->db, "main", "term_positions", "pos", tid, 0, &c->pblob);
	if (s != SQLITE_OK) {
		sqlite3_blob_close(c->pblob);
		c->pblob = NULL;
		return s == SQLITE_ERROR ? 0 : bm25_sqlfail(b, errmsg, "reading positions");
	}
	size_t size = (size_t)sqlite3_blob_bytes(c->pblob), nb = c->n_blocks;
	if (!(c->pend = malloc(nb * sizeof *c->pend)))
		return SS_ERR_NOMEM;
	if (size < nb * 4 || sqlite3_blob_read(c->pblob, c->pend, (int)(nb * 4), 0) != SQLITE_OK)
		return ss_errf(errmsg, SS_ERR_FORMAT, "damaged positions of term %u", tid);
	uint32_t prev = 0;
	for (size_t i = 0; i < nb; i++) {
		c->pend[i] = rd32((const unsigned char *)&c->pend[i]);
		uint32_t end = c->pend[i] & ~POS_BYTES;
		if (end < prev || end > size - nb * 4)
			return ss_errf(errmsg, SS_ERR_FORMAT, "damaged positions of term %u", tid);
		prev = end;
	}
	c->pblk = -1;
	return 1;
}

/* c->pbuf with room for n bytes and POS_SLACK more (zeroed when
 * allocated): a 16-byte load at any of the n stays inside (phrase_tf's
 * pair count). 0 or SS_ERR_NOMEM. */
static int pbuf_reserve(cursor *c, uint32_t n)
{
	if (n > c->pbuf_cap || !c->pbuf) {
		unsigned char *p = realloc(c->pbuf, (size_t)n + POS_SLACK);
		if (!p)
			return SS_ERR_NOMEM;
		memset(p + n, 0, POS_SLACK);
		c->pbuf = p;
		c->pbuf_cap = n;
	}
	return 0;
}

int bm25_cur_pos_block(cursor *c)
{
	uint32_t start = c->blk ? c->pend[c->blk - 1] & ~POS_BYTES : 0, n = (c->pend[c->blk] & ~POS_BYTES) - start;
	if (pbuf_reserve(c, n))
		return SS_ERR_NOMEM;
	if (n && sqlite3_blob_read(c->pblob, c->pbuf, (int)n, (int)(c->n_blocks * 4 + start)) != SQLITE_OK)
		return SS_ERR_IO;
	c->pblk = c->blk;
	c->pbuf_n = n;
	c->pidx = 0;
	c->poff = 0;
	if (c->pend[c->blk] & POS_BYTES) {
		/* each posting's start, once a block rather than summed up to
		 * each document looked at (saturated: a damaged block's fails
		 * the bounds test in cur_pos_bytes) */
		uint64_t at = 0;
		for (int k = 0; k < c->n; k++) {
			c->pstart[k] = at > UINT32_MAX ? UINT32_MAX : (uint32_t)at;
			at += c->tf[k];
		}
	}
	return 0;
}

int bm25_cur_positions(cursor *c, const uint32_t **pos)
{
	int rc, bytes = (c->pend[c->blk] & POS_BYTES) != 0;
	if ((c->pblk != c->blk || (!bytes && c->pidx > c->pos)) && (rc = bm25_cur_pos_block(c)))
		return rc;
	const unsigned char *p = c->pbuf;
	size_t i = c->poff, n = c->pbuf_n;
	uint32_t tf = c->tf[c->pos];
	if (tf > c->ppos_cap) {
		uint32_t *q = realloc(c->ppos, (size_t)tf * sizeof *q);
		if (!q)
			return SS_ERR_NOMEM;
		c->ppos = q;
		c->ppos_cap = tf;
	}
	if (bytes) { /* one byte a position, from the posting's start */
		if ((i = c->pstart[c->pos]) > n || n - i < tf)
			return SS_ERR_FORMAT;
		for (uint32_t j = 0; j < tf; j++)
			c->ppos[j] = p[i + j];
		*pos = c->ppos;
		return 0;
	}
	uint64_t left = 0;
	for (; c->pidx < c->pos; c->pidx++)
		left += c->tf[c->pidx];
	/* The positions of the postings before: a varint ends at a byte below
	 * 0x80, so skipping them counts those bytes, 8 at a time. */
	while (left >= 8 && i + 8 <= n) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		unsigned ends = (unsigned)__builtin_popcountll(~w & 0x8080808080808080ull);
		if (ends > left)
			break;
		left -= ends;
		i += 8;
	}
	for (; left; i++) {
		if (i >= n)
			return SS_ERR_FORMAT;
		left -= p[i] < 0x80;
	}
	uint64_t at = 0, d;
	for (uint32_t j = 0; j < tf; j++) {
		if (i < n && p[i] < 0x80)
			d = p[i++];
		else if (get_varint(p, n, &i, &d))
			return SS_ERR_FORMAT;
		if ((at += d) > UINT32_MAX)
			return SS_ERR_FORMAT;
		c->ppos[j] = (uint32_t)at;
	}
	c->pidx = c->pos + 1;
	c->poff = i;
	*pos = c->ppos;
	return 0;
}

int bm25_check_positions(ss_bm25 *b, char *errmsg)
{
	sqlite3_stmt *st;
	int ok = 0;
	if (b->pos_version == b->stats_version)
		return 0;
	/* '1': the documents' positions alone (built before term_positions,
	 * or by a build of that time since: term_positions may be stale). */
	if (sqlite3_prepare_v2(b->db, "SELECT value FROM meta WHERE key = 'positions'", -1, &st, NULL) != SQLITE_OK)
		return bm25_sqlfail(b, errmsg, "sqlite");
	if (sqlite3_step(st) == SQLITE_ROW) {
		const char *v = (const char *)sqlite3_column_text(st, 0);
		ok = v && (!strcmp(v, "1") || !strcmp(v, "2"));
		b->term_pos = v && !strcmp(v, "2");
	}
	sqlite3_finalize(st);
	if (!ok)
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED,
			       "this index has no word positions (phrases, proximity): rebuild it with "
			       "'ss-retrieve build --index DB' (and its streams when it has no texts)");
	b->pos_version = b->stats_version;
	return 0;
}

int bm25_read_positions(ss_bm25 *b, uint32_t rid, size_t *n, char *errmsg)
{
	int s = b->pos_blob ? sqlite3_blob_reopen(b->pos_blob, rid)
			    : sqlite3_blob_open(b->db, "main", "positions", "seq", rid, 0, &b->pos_blob);
	if (s != SQLITE_OK) {
		if (s != SQLITE_ERROR)
			return bm25_sqlfail(b, errmsg, "reading positions");
		sqlite3_blob_close(b->pos_blob);
		b->pos_blob = NULL;
		return ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document row %u has no positions", rid);
	}
	size_t len = (size_t)sqlite3_blob_bytes(b->pos_blob);
	/* Read into the tail of dseq, decoded into its head: a varint takes a byte at least. */
	size_t words = len + (len + 3) / 4 + 1;
	if (words > b->cap_dseq) {
		uint32_t *d = realloc(b->dseq, words * sizeof *d);
		if (!d)
			return SS_ERR_NOMEM;
		b->dseq = d;
		b->cap_dseq = words;
	}
	unsigned char *raw = (unsigned char *)(b->dseq + len);
	if (len && sqlite3_blob_read(b->pos_blob, raw, (int)len, 0) != SQLITE_OK)
		return bm25_sqlfail(b, errmsg, "reading positions");
	size_t i = 0, m = 0;
	while (i < len) {
		uint64_t v;
		if (get_varint(raw, len, &i, &v) || v > UINT32_MAX)
			return ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: positions of document row %u", rid);
		b->dseq[m++] = (uint32_t)v;
	}
	*n = m;
	return 0;
}
