/*
 * bpe.c — byte-level BPE of one pre-token. Merges work on token ids, never on
 * strings: a pre-token starts as the ids of its bytes and pairs (left id,
 * right id) are looked up in one hash table giving (rank, merged id).
 * Merged results of pre-tokens are cached, so the merge loop runs only for
 * words not seen recently; encoding allocates nothing per token.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

uint64_t tok_hash_bytes(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = UINT64_C(0x9E3779B97F4A7C15) ^ (n * UINT64_C(0xC2B2AE3D27D4EB4F));
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, s, 8);
		h = (h ^ w) * UINT64_C(0xFF51AFD7ED558CCD);
		h ^= h >> 32;
		s += 8;
		n -= 8;
	}
	uint64_t w = 0;
	if (n >= 4) { /* two overlapping loads cover 4..7 bytes */
		uint32_t a, b;
		memcpy(&a, s, 4);
		memcpy(&b, s + n - 4, 4);
		w = (uint64_t)a << 32 | b;
	} else if (n) {
		w = (uint64_t)s[0] | (uint64_t)s[n / 2] << 8 | (uint64_t)s[n - 1] << 16;
	}
	h = (h ^ w) * UINT64_C(0xC4CEB9FE1A85EC53);
	h ^= h >> 29;
	h *= UINT64_C(0xFF51AFD7ED558CCD);
	h ^= h >> 32;
	return h;
}

/* ---------------------------------------------------------------- merges */

static inline const struct merge *merge_find(const ss_tokenizer *t, int32_t a, int32_t b)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	uint32_t i = (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> t->merge_shift);
	for (;;) {
		const struct merge *m = &t->merges[i];
		if (m->key == key)
			return m;
		if (m->key == MERGE_EMPTY)
			return NULL;
		i = (i + 1) & t->merge_mask;
	}
}

int tok_merges_init(ss_tokenizer *t, size_t n)
{
	uint32_t bits = 4;
	while (((size_t)1 << bits) < 2 * n)
		bits++;
	size_t cap = (size_t)1 << bits;
	t->merges = malloc(cap * sizeof *t->merges);
	if (!t->merges)
		return SS_ERR_NOMEM;
	for (size_t i = 0; i < cap; i++)
		t->merges[i].key = MERGE_EMPTY;
	t->merge_mask = (uint32_t)(cap - 1);
	t->merge_shift = 64 - bits;
	return 0;
}

void tok_merge_put(ss_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	uint32_t i = (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> t->merge_shift);
	while (t->merges[i].key != MERGE_EMPTY && t->merges[i].key != key)
		i = (i + 1) & t->merge_mask;
	t->merges[i] = (struct merge){ key, rank, id };
}

/* ------------------------------------------------------------ id vectors */

int tok_ids_reserve(struct ids *v, size_t extra)
{
	if (v->n + extra <= v->cap)
		return 0;
	size_t cap = v->cap ? v->cap : 64;
	while (cap < v->n + extra)
		cap *= 2;
	int32_t *nv = realloc(v->v, cap * sizeof *nv);
	if (!nv)
		return SS_ERR_NOMEM;
	v->v = nv;
	v->cap = cap;
	return 0;
}

/* ------------------------------------------------------------- BPE merge */

int tok_scratch_reserve(ss_tokenizer *t, size_t n)
{
	if (n <= t->scratch_cap)
		return 0;
	size_t cap = t->scratch_cap ? t->scratch_cap : 256;
	while (cap < n)
		cap *= 2;
	struct sym *s = realloc(t->syms, cap * sizeof *s);
	if (!s)
		return SS_ERR_NOMEM;
	t->syms = s;
	struct hent *h = realloc(t->heap, 3 * cap * sizeof *h);
	if (!h)
		return SS_ERR_NOMEM;
	t->heap = h;
	t->scratch_cap = cap;
	return 0;
}

static inline int hent_less(const struct hent *a, const struct hent *b)
{
	return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct hent *h, size_t *n, struct hent e)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!hent_less(&e, &h[up]))
			break;
		h[i] = h[up];
		i = up;
	}
	h[i] = e;
}

static struct hent heap_pop(struct hent *h, size_t *n)
{
	struct hent top = h[0], last = h[--*n];
	size_t i = 0, m = *n;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= m)
			break;
		if (c + 1 < m && hent_less(&h[c + 1], &h[c]))
			c++;
		if (!hent_less(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (m)
		h[i] = last;
	return top;
}

static inline void push_pair(const ss_tokenizer *t, struct hent *heap, size_t *nh,
                             const struct sym *syms, int32_t pos)
{
	const struct merge *m = merge_find(t, syms[pos].id, syms[syms[pos].next].id);
	if (m)
		heap_push(heap, nh, (struct hent){ m->rank, pos, m->id });
}

/* Merges the bytes w[0..n) into ids appended to out: repeatedly the pair of
 * lowest rank, leftmost first, as HF's priority queue does.
 * ref: HF tokenizers models/bpe/word.rs Word::merge_all(). */
static int bpe_merge(ss_tokenizer *t, const unsigned char *w, size_t n, struct ids *out)
{
	if (n > INT32_MAX / 4)
		return SS_ERR_NOMEM;
	if (tok_scratch_reserve(t, n))
		return SS_ERR_NOMEM;
	struct sym *syms = t->syms;
	struct hent *heap = t->heap;
	size_t nh = 0;
	for (size_t i = 0; i < n; i++)
		syms[i] = (struct sym){ t->byte_id[w[i]], (int32_t)i - 1,
		                        i + 1 < n ? (int32_t)i + 1 : -1, 1 };
	for (size_t i = 0; i + 1 < n; i++)
		push_pair(t, heap, &nh, syms, (int32_t)i);
	while (nh) {
		struct hent top = heap_pop(heap, &nh);
		struct sym *s = &syms[top.pos];
		if (!s->alive || s->next < 0)
			continue;
		struct sym *r = &syms[s->next];
		const struct merge *m = merge_find(t, s->id, r->id);
		if (!m || m->id != top.id)
			continue; /* stale: a neighbour changed since the push */
		s->id = top.id;
		r->alive = 0;
		s->next = r->next;
		if (s->next >= 0)
			syms[s->next].prev = top.pos;
		if (s->prev >= 0)
			push_pair(t, heap, &nh, syms, s->prev);
		if (s->next >= 0)
			push_pair(t, heap, &nh, syms, top.pos);
	}
	size_t cnt = 0;
	for (int32_t i = 0; i >= 0; i = syms[i].next)
		cnt++;
	if (tok_ids_reserve(out, cnt))
		return SS_ERR_NOMEM;
	for (int32_t i = 0; i >= 0; i = syms[i].next)
		out->v[out->n++] = syms[i].id;
	return 0;
}

static void cache_clear(ss_tokenizer *t)
{
	memset(t->cache, 0, CACHE_SLOTS * sizeof *t->cache);
	t->cache_n = t->ckeys_n = t->cids_n = 0;
}

/* BPE of one pre-token, through the cache. A pre-token longer than
 * SS_TOKENIZER_MAX_PRETOKEN bytes is merged in pieces of at most that
 * many, cut before a character: the merge's scratch memory (~50 bytes a
 * byte) stays bounded whatever the text (HF merges it whole; no text but a
 * 64 KiB run of letters, digits, punctuation or spaces tells them apart). */
int tok_bpe_word(ss_tokenizer *t, const char *s, size_t n, struct ids *out)
{
	const unsigned char *w = (const unsigned char *)s;
	while (n > SS_TOKENIZER_MAX_PRETOKEN) {
		size_t k = SS_TOKENIZER_MAX_PRETOKEN;
		while (k > 1 && (w[k] & 0xC0) == 0x80)
			k--;
		int rc = bpe_merge(t, w, k, out);
		if (rc)
			return rc;
		w += k;
		n -= k;
	}
	if (n == 1)
		return tok_ids_push(out, t->byte_id[w[0]]);
	if (n > CACHE_MAX_KEY)
		return bpe_merge(t, w, n, out);
	uint64_t h = tok_hash_bytes(w, n);
	uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);
	for (;;) {
		struct centry *e = &t->cache[i];
		if (!e->klen)
			break;
		if (e->h == h && e->klen == n && !memcmp(t->ckeys + e->koff, w, n)) {
			if (tok_ids_reserve(out, e->nids))
				return SS_ERR_NOMEM;
			memcpy(out->v + out->n, t->cids + e->ioff, e->nids * sizeof(int32_t));
			out->n += e->nids;
			return 0;
		}
		i = (i + 1) & (CACHE_SLOTS - 1);
	}
	size_t before = out->n;
	int rc = bpe_merge(t, w, n, out);
	if (rc)
		return rc;
	size_t nids = out->n - before;
	if (t->cache_n >= CACHE_MAX_ENTRIES || t->ckeys_n + n > CACHE_KEY_ARENA ||
	    t->cids_n + nids > CACHE_ID_ARENA) {
		cache_clear(t);
		i = (uint32_t)h & (CACHE_SLOTS - 1);
	}
	struct centry *e = &t->cache[i];
	e->h = h;
	e->klen = (uint16_t)n;
	e->nids = (uint16_t)nids;
	e->koff = t->ckeys_n;
	e->ioff = t->cids_n;
	memcpy(t->ckeys + t->ckeys_n, w, n);
	memcpy(t->cids + t->cids_n, out->v + before, nids * sizeof(int32_t));
	t->ckeys_n += (uint32_t)n;
	t->cids_n += (uint32_t)nids;
	t->cache_n++;
	return 0;
}
