/*
 * tokenizer.c — byte-level BPE from a HF tokenizer.json; see ss_tokenizer.h.
 *
 * Merges work on token ids, never on strings: a pre-token starts as the ids
 * of its bytes and pairs (left id, right id) are looked up in one hash table
 * giving (rank, merged id). Merged results of pre-tokens are cached, so the
 * merge loop runs only for words not seen recently; encoding allocates
 * nothing per token.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include "ss.h"

#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/*
 * The GPT-2 split regex as HF tokenizers runs it through Oniguruma, where \s
 * is exactly 9-13, U+0085 and the Z categories. PCRE2's UCP \s also takes
 * U+180E, so the class is spelled out.
 * ref: tokenizers pre_tokenizers/byte_level.rs; GPT-2 encoder.py `pat`.
 */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"
static const char split_regex[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+"
	"|[" WS "]+(?![^" WS "])|[" WS "]+";

#define CACHE_SLOTS (1u << 16)  /* power of two */
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_MAX_KEY 255       /* longer pre-tokens are merged every time */
#define CACHE_KEY_ARENA (2u << 20)
#define CACHE_ID_ARENA (1u << 19)

struct pattern {           /* one added token, as matched in text */
	char *s;
	uint32_t len;
	int32_t id;
};

/* Leftmost-longest matcher over a handful of added tokens. Patterns are
 * sorted by first byte, then longest first, so the first hit at a position
 * is the longest one there. */
struct matcher {
	struct pattern *pats;
	size_t n;
	uint32_t start[257];   /* pats[start[b] .. start[b+1]) begin with byte b */
	uint8_t single[256];   /* a one-byte pattern equals b */
	uint8_t pair[8192];    /* bitmap: a pattern of >= 2 bytes begins with (b0,b1) */
	int only_first;        /* the one first byte all patterns share, or -1 */
};

struct merge {
	uint64_t key;          /* (left id << 32) | right id; MERGE_EMPTY when free */
	int32_t rank;
	int32_t id;
};
#define MERGE_EMPTY UINT64_MAX

struct centry {            /* cache slot; klen == 0 when free */
	uint64_t h;
	uint32_t koff, ioff;
	uint16_t klen, nids;
};

struct sym {
	int32_t id, prev, next, alive;
};

struct hent {              /* pending merge at sym `pos` */
	int32_t rank, pos, id;
};

struct buf {
	char *p;
	size_t n, cap;
};

struct ids {
	int32_t *v;
	size_t n, cap;
};

struct ss_tokenizer {
	char fingerprint[17];
	int nfc;
	int32_t n_vocab;
	int32_t *tlen;          /* [n_vocab] decoded bytes per id, -1 = unassigned */
	uint32_t *toff;         /* [n_vocab] offset into tbytes */
	char *tbytes;
	int32_t byte_id[256];   /* id of each single byte */

	struct merge *merges;
	uint32_t merge_mask, merge_shift;

	struct matcher raw, norm; /* added tokens: normalized false / true */

	pcre2_code *re;
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jstack;
	int jit;

	struct centry *cache;
	uint32_t cache_n;
	char *ckeys;
	uint32_t ckeys_n;
	int32_t *cids;
	uint32_t cids_n;

	struct buf nbuf;        /* scratch for normalized text */
	struct sym *syms;       /* scratch for the merge loop */
	struct hent *heap;
	size_t scratch_cap;     /* syms: cap; heap: 3*cap */
};

/* ------------------------------------------------------------------ UTF-8 */

int ss_utf8_validate(const char *s, size_t len, size_t *bad_offset)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < len) {
		if (i + 8 <= len) {
			uint64_t w;
			memcpy(&w, p + i, 8);
			if (!(w & UINT64_C(0x8080808080808080))) {
				i += 8;
				continue;
			}
		}
		unsigned c = p[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t n;
		unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
		if (c >= 0xC2 && c <= 0xDF)
			n = 2;
		else if (c >= 0xE0 && c <= 0xEF) {
			n = 3;
			if (c == 0xE0)
				lo = 0xA0; /* overlong */
			else if (c == 0xED)
				hi = 0x9F; /* surrogates */
		} else if (c >= 0xF0 && c <= 0xF4) {
			n = 4;
			if (c == 0xF0)
				lo = 0x90; /* overlong */
			else if (c == 0xF4)
				hi = 0x8F; /* above U+10FFFF */
		} else
			goto bad;
		if (len - i < n || p[i + 1] < lo || p[i + 1] > hi)
			goto bad;
		for (size_t k = 2; k < n; k++)
			if ((p[i + k] & 0xC0) != 0x80)
				goto bad;
		i += n;
	}
	return 0;
bad:
	if (bad_offset)
		*bad_offset = i;
	return SS_ERR_UTF8;
}

static int utf8_fail(char *errmsg, size_t off)
{
	return ss_errf(errmsg, SS_ERR_UTF8, "invalid UTF-8 at byte offset %zu", off);
}

/* Writes the UTF-8 form of cp (< 0x110000) to out; returns its length. */
static size_t utf8_put(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

static int buf_put(struct buf *b, const void *src, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np)
			return SS_ERR_NOMEM;
		b->p = np;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, src, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

/* Bytes >= 0xCC begin code points >= U+0300; all below are NFC-stable
 * starters that never combine with what precedes them. */
#define NFC_HIGH 0xCC
/* Neighbouring stretches that need NFC closer than this are normalized in
 * one call. */
#define NFC_JOIN 256

/*
 * NFC of valid UTF-8 s. Sets *out = s when s has no code point >= U+0300
 * (then it is NFC as is); otherwise writes the result to b (reset first)
 * and sets *out = b->p. Only stretches around code points >= U+0300 go
 * through utf8proc: NFC(x y) = NFC(x) NFC(y) whenever y begins with an
 * ASCII character, which is a starter that no composition takes as its
 * second part and that blocks canonical reordering.
 * ref: UAX #15 §9 (detecting normalization forms, stable code points).
 */
static int nfc(const char *s, size_t n, struct buf *b, const char **out, size_t *out_n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < n && p[i] < NFC_HIGH)
		i++;
	*out = s;
	*out_n = n;
	if (i == n)
		return 0;
	b->n = 0;
	size_t done = 0; /* s[0..done) is in b; done is 0 or at an ASCII byte */
	while (i < n) {
		size_t start = i;
		while (start > done && p[start - 1] >= 0x80)
			start--;
		if (start > done)
			start--; /* include the ASCII starter a mark may compose with */
		size_t end = i;
		for (;;) {
			while (end < n && p[end] >= 0x80)
				end++;
			size_t k = end, lim = n - end < NFC_JOIN ? n : end + NFC_JOIN;
			while (k < lim && p[k] < NFC_HIGH)
				k++;
			if (k == lim)
				break;
			end = k;
		}
		if (buf_put(b, s + done, start - done))
			return SS_ERR_NOMEM;
		utf8proc_uint8_t *dst = NULL;
		utf8proc_ssize_t r = utf8proc_map(p + start, (utf8proc_ssize_t)(end - start), &dst,
		                                  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
		if (r < 0)
			return r == UTF8PROC_ERROR_NOMEM ? SS_ERR_NOMEM : SS_ERR_UTF8;
		int rc = buf_put(b, dst, (size_t)r);
		free(dst);
		if (rc)
			return rc;
		done = end;
		i = end;
		while (i < n && p[i] < NFC_HIGH)
			i++;
	}
	if (buf_put(b, s + done, n - done))
		return SS_ERR_NOMEM;
	*out = b->p;
	*out_n = b->n;
	return 0;
}

/* ------------------------------------------------------------ byte level */

/* GPT-2's reversible byte → code point map: printable Latin-1 bytes map to
 * themselves, the other 68 to 256, 257, ... in byte order.
 * ref: GPT-2 encoder.py bytes_to_unicode(). */
static void bytes_to_unicode(uint32_t b2u[256])
{
	uint32_t n = 0;
	for (uint32_t b = 0; b < 256; b++) {
		int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
		b2u[b] = keep ? b : 256 + n++;
	}
}

static uint64_t hash_bytes(const void *p, size_t n)
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

static uint64_t fnv1a64(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = UINT64_C(0xCBF29CE484222325);
	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= UINT64_C(0x100000001B3);
	}
	return h;
}

/* ---------------------------------------------------- load-time vocab map */

struct ventry {
	const char *s;   /* NULL when free */
	size_t len;
	uint64_t h;
	int32_t id;
};

struct vmap {
	struct ventry *e;
	size_t mask;
};

static int vmap_init(struct vmap *m, size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n)
		cap <<= 1;
	m->e = calloc(cap, sizeof *m->e);
	m->mask = cap - 1;
	return m->e ? 0 : SS_ERR_NOMEM;
}

/* The entry holding s, or the free slot where it belongs. */
static struct ventry *vmap_slot(const struct vmap *m, const char *s, size_t len, uint64_t h)
{
	size_t i = h & m->mask;
	while (m->e[i].s && !(m->e[i].h == h && m->e[i].len == len && !memcmp(m->e[i].s, s, len)))
		i = (i + 1) & m->mask;
	return &m->e[i];
}

static void vmap_put(struct vmap *m, const char *s, size_t len, int32_t id)
{
	uint64_t h = hash_bytes(s, len);
	struct ventry *e = vmap_slot(m, s, len, h);
	*e = (struct ventry){ s, len, h, id };
}

static int32_t vmap_get(const struct vmap *m, const char *s, size_t len)
{
	const struct ventry *e = vmap_slot(m, s, len, hash_bytes(s, len));
	return e->s ? e->id : -1;
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

static int merges_init(ss_tokenizer *t, size_t n)
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

/* A pair listed twice keeps its last rank, as HF's HashMap collect does. */
static void merge_put(ss_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	uint32_t i = (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> t->merge_shift);
	while (t->merges[i].key != MERGE_EMPTY && t->merges[i].key != key)
		i = (i + 1) & t->merge_mask;
	t->merges[i] = (struct merge){ key, rank, id };
}

/* --------------------------------------------------------------- matcher */

static int pat_cmp(const void *a, const void *b)
{
	const struct pattern *x = a, *y = b;
	unsigned char cx = (unsigned char)x->s[0], cy = (unsigned char)y->s[0];
	if (cx != cy)
		return cx < cy ? -1 : 1;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return 0;
}

static void matcher_build(struct matcher *m)
{
	qsort(m->pats, m->n, sizeof *m->pats, pat_cmp);
	memset(m->start, 0, sizeof m->start);
	memset(m->single, 0, sizeof m->single);
	memset(m->pair, 0, sizeof m->pair);
	m->only_first = m->n ? (unsigned char)m->pats[0].s[0] : -1;
	for (size_t k = 0; k < m->n; k++) {
		const unsigned char *s = (const unsigned char *)m->pats[k].s;
		m->start[s[0] + 1]++;
		if (s[0] != m->only_first)
			m->only_first = -1;
		if (m->pats[k].len == 1)
			m->single[s[0]] = 1;
		else {
			unsigned key = (unsigned)s[0] << 8 | s[1];
			m->pair[key >> 3] |= (uint8_t)(1u << (key & 7));
		}
	}
	for (int b = 0; b < 256; b++)
		m->start[b + 1] += m->start[b];
}

/* Finds the leftmost-longest pattern in s[from..n). Returns 1 and sets
 * *at, *mlen, *id, or 0 when none. */
static int matcher_find(const struct matcher *m, const char *s, size_t n, size_t from,
                        size_t *at, size_t *mlen, int32_t *id)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = from;
	while (i < n) {
		if (m->only_first >= 0) {
			const unsigned char *q = memchr(p + i, m->only_first, n - i);
			if (!q)
				return 0;
			i = (size_t)(q - p);
		}
		unsigned b = p[i];
		if (m->start[b] == m->start[b + 1]) {
			i++;
			continue;
		}
		if (!m->single[b]) {
			if (i + 1 >= n) {
				i++;
				continue;
			}
			unsigned key = b << 8 | p[i + 1];
			if (!(m->pair[key >> 3] & (1u << (key & 7)))) {
				i++;
				continue;
			}
		}
		for (uint32_t k = m->start[b]; k < m->start[b + 1]; k++) {
			const struct pattern *pt = &m->pats[k];
			if (pt->len <= n - i && !memcmp(pt->s, p + i, pt->len)) {
				*at = i;
				*mlen = pt->len;
				*id = pt->id;
				return 1;
			}
		}
		i++;
	}
	return 0;
}

static void matcher_free(struct matcher *m)
{
	for (size_t k = 0; k < m->n; k++)
		free(m->pats[k].s);
	free(m->pats);
	m->pats = NULL;
	m->n = 0;
}

/* ------------------------------------------------------------ id vectors */

static int ids_reserve(struct ids *v, size_t extra)
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

static inline int ids_push(struct ids *v, int32_t id)
{
	if (v->n == v->cap && ids_reserve(v, 1))
		return SS_ERR_NOMEM;
	v->v[v->n++] = id;
	return 0;
}

/* ------------------------------------------------------------- BPE merge */

static int scratch_reserve(ss_tokenizer *t, size_t n)
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
	if (scratch_reserve(t, n))
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
	if (ids_reserve(out, cnt))
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
static int bpe_word(ss_tokenizer *t, const char *s, size_t n, struct ids *out)
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
		return ids_push(out, t->byte_id[w[0]]);
	if (n > CACHE_MAX_KEY)
		return bpe_merge(t, w, n, out);
	uint64_t h = hash_bytes(w, n);
	uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);
	for (;;) {
		struct centry *e = &t->cache[i];
		if (!e->klen)
			break;
		if (e->h == h && e->klen == n && !memcmp(t->ckeys + e->koff, w, n)) {
			if (ids_reserve(out, e->nids))
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

/* -------------------------------------------------------------- encoding */

/* Pre-tokenizes normalized text (no added tokens left in it) and merges
 * each pre-token. s is valid UTF-8. */
static int encode_words(ss_tokenizer *t, const char *s, size_t n, struct ids *out)
{
	size_t pos = 0;
	while (pos < n) {
		int rc = t->jit
			? pcre2_jit_match(t->re, (PCRE2_SPTR)s, n, pos, 0, t->md, t->mctx)
			: pcre2_match(t->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, t->md, t->mctx);
		size_t b, e;
		if (rc == PCRE2_ERROR_NOMATCH) {
			b = e = n;
		} else if (rc < 0) {
			return SS_ERR_INVALID; /* e.g. JIT stack exhausted; reported as a regex failure */
		} else {
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
			b = ov[0];
			e = ov[1];
		}
		/* Every code point is in one of the regex's classes, so gaps and
		 * empty matches do not occur; they would still be kept, as HF's
		 * Isolated split keeps unmatched text. */
		if (b > pos && (rc = bpe_word(t, s + pos, b - pos, out)))
			return rc;
		if (e <= b) {
			if (b >= n)
				break;
			e = b + 1;
			while (e < n && ((unsigned char)s[e] & 0xC0) == 0x80)
				e++;
		}
		if ((rc = bpe_word(t, s + b, e - b, out)))
			return rc;
		pos = e;
	}
	return 0;
}

/* Splits normalized text on the normalized added tokens. */
static int encode_normalized(ss_tokenizer *t, const char *s, size_t n, struct ids *out)
{
	size_t pos = 0, at, mlen;
	int32_t id;
	int rc;
	while (pos < n && matcher_find(&t->norm, s, n, pos, &at, &mlen, &id)) {
		if (at > pos && (rc = encode_words(t, s + pos, at - pos, out)))
			return rc;
		if ((rc = ids_push(out, id)))
			return rc;
		pos = at + mlen;
	}
	return pos < n ? encode_words(t, s + pos, n - pos, out) : 0;
}

/* Normalizes one piece of raw text (between raw added tokens) and encodes
 * it. */
static int encode_piece(ss_tokenizer *t, const char *s, size_t n, struct ids *out)
{
	if (!t->nfc)
		return encode_normalized(t, s, n, out);
	const char *norm;
	size_t nn;
	int rc = nfc(s, n, &t->nbuf, &norm, &nn);
	return rc ? rc : encode_normalized(t, norm, nn, out);
}

int ss_tokenizer_encode(ss_tokenizer *tok, const char *text, size_t len,
                        int32_t **ids, size_t *n_ids, char *errmsg)
{
	*ids = NULL;
	*n_ids = 0;
	size_t bad;
	if (ss_utf8_validate(text, len, &bad))
		return utf8_fail(errmsg, bad);
	struct ids out = { 0 };
	/* English text averages about 4.5 bytes per token. */
	if (len && ids_reserve(&out, len / 3 + 16))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	size_t pos = 0, at, mlen;
	int32_t id;
	int rc = 0;
	while (pos < len && matcher_find(&tok->raw, text, len, pos, &at, &mlen, &id)) {
		if (at > pos && (rc = encode_piece(tok, text + pos, at - pos, &out)))
			goto err;
		if ((rc = ids_push(&out, id)))
			goto err;
		pos = at + mlen;
	}
	if (pos < len && (rc = encode_piece(tok, text + pos, len - pos, &out)))
		goto err;
	if (!out.n) {
		free(out.v);
		return 0;
	}
	*ids = out.v;
	*n_ids = out.n;
	return 0;
err:
	free(out.v);
	return ss_errf(errmsg, rc, "%s", rc == SS_ERR_INVALID ? "pre-tokenizer regex failed" : ss_strerror(rc));
}

/* -------------------------------------------------------------- decoding */

const char *ss_tokenizer_id_bytes(const ss_tokenizer *tok, int32_t id, size_t *len)
{
	if (id < 0 || id >= tok->n_vocab || tok->tlen[id] < 0)
		return NULL;
	*len = (size_t)tok->tlen[id];
	return tok->tbytes + tok->toff[id];
}

int ss_tokenizer_decode(const ss_tokenizer *tok, const int32_t *ids, size_t n_ids,
                        char **bytes, size_t *len, char *errmsg)
{
	*bytes = NULL;
	*len = 0;
	size_t total = 0, l;
	for (size_t i = 0; i < n_ids; i++) {
		if (!ss_tokenizer_id_bytes(tok, ids[i], &l))
			return ss_errf(errmsg, SS_ERR_INVALID, "token %zu: id %" PRId32 " is not in the vocabulary",
			            i, ids[i]);
		total += l;
	}
	char *out = malloc(total + 1);
	if (!out)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	char *p = out;
	for (size_t i = 0; i < n_ids; i++) {
		const char *b = ss_tokenizer_id_bytes(tok, ids[i], &l);
		memcpy(p, b, l);
		p += l;
	}
	*p = 0;
	*bytes = out;
	*len = total;
	return 0;
}

int ss_tokenizer_normalize(const ss_tokenizer *tok, const char *text, size_t len,
                           char **out, size_t *out_len, char *errmsg)
{
	*out = NULL;
	*out_len = 0;
	size_t bad;
	if (ss_utf8_validate(text, len, &bad))
		return utf8_fail(errmsg, bad);
	struct buf b = { 0 };
	const char *norm = text;
	size_t nn = len;
	int rc = tok->nfc ? nfc(text, len, &b, &norm, &nn) : 0;
	if (!rc && norm == text)
		rc = buf_put(&b, text, len);
	if (rc) {
		free(b.p);
		return ss_errf(errmsg, rc, "normalization failed: %s", ss_strerror(rc));
	}
	if (!b.p && !(b.p = calloc(1, 1)))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	*out = b.p;
	*out_len = b.n;
	return 0;
}

/* ------------------------------------------------------------- accessors */

const char *ss_tokenizer_fingerprint(const ss_tokenizer *tok)
{
	return tok->fingerprint;
}

int32_t ss_tokenizer_n_vocab(const ss_tokenizer *tok)
{
	return tok->n_vocab;
}

void ss_tokenizer_free(ss_tokenizer *tok)
{
	if (!tok)
		return;
	free(tok->tlen);
	free(tok->toff);
	free(tok->tbytes);
	free(tok->merges);
	matcher_free(&tok->raw);
	matcher_free(&tok->norm);
	pcre2_match_data_free(tok->md);
	pcre2_match_context_free(tok->mctx);
	pcre2_jit_stack_free(tok->jstack);
	pcre2_code_free(tok->re);
	free(tok->cache);
	free(tok->ckeys);
	free(tok->cids);
	free(tok->nbuf.p);
	free(tok->syms);
	free(tok->heap);
	free(tok);
}

/* ----------------------------------------------------------------- load */

static int read_file(const char *path, char **buf, size_t *len, char *errmsg)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return ss_errf(errmsg, SS_ERR_IO, "%s", strerror(errno));
	size_t cap = 1 << 20, n = 0;
	char *b = malloc(cap);
	for (;;) {
		if (!b) {
			fclose(f);
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		}
		n += fread(b + n, 1, cap - n, f);
		if (n < cap)
			break;
		cap *= 2;
		char *nb = realloc(b, cap);
		if (!nb)
			free(b);
		b = nb;
	}
	int err = ferror(f);
	fclose(f);
	if (err) {
		free(b);
		return ss_errf(errmsg, SS_ERR_IO, "read error");
	}
	*buf = b;
	*len = n;
	return 0;
}

static int json_false(const cJSON *o, const char *key, int dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v))
		return !dflt;
	return cJSON_IsFalse(v);
}

static const char *json_type(const cJSON *o)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "type");
	return cJSON_IsString(v) ? v->valuestring : "?";
}

/* Checks the parts of the tokenizer.json around the model. */
static int check_pipeline(ss_tokenizer *t, const cJSON *root, char *errmsg)
{
	const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
	if (norm && !cJSON_IsNull(norm)) {
		const char *ty = json_type(norm);
		if (!strcmp(ty, "NFC"))
			t->nfc = 1;
		else if (!strcmp(ty, "Sequence")) {
			const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers"), *it;
			cJSON_ArrayForEach(it, list) {
				if (strcmp(json_type(it), "NFC"))
					return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "normalizer %s is not supported",
					            json_type(it));
				t->nfc = 1;
			}
		} else
			return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "normalizer %s is not supported", ty);
	}
	const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
	if (!pre || strcmp(json_type(pre), "ByteLevel"))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "pre_tokenizer %s is not supported (ByteLevel only)",
		            pre ? json_type(pre) : "null");
	/* HF's ByteLevel defaults: add_prefix_space true, use_regex true. */
	if (!json_false(pre, "add_prefix_space", 1))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "ByteLevel add_prefix_space is not supported");
	const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
	if (ur && cJSON_IsFalse(ur))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "ByteLevel use_regex false is not supported");
	const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
	if (dec && !cJSON_IsNull(dec) && strcmp(json_type(dec), "ByteLevel"))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "decoder %s is not supported (ByteLevel only)",
		            json_type(dec));
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	if (!cJSON_IsObject(model))
		return ss_errf(errmsg, SS_ERR_FORMAT, "no \"model\" object");
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
	if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "BPE")))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "model type %s is not supported (BPE only)",
		            json_type(model));
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "dropout");
	if (v && !cJSON_IsNull(v))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "BPE dropout is not supported");
	v = cJSON_GetObjectItemCaseSensitive(model, "byte_fallback");
	if (v && cJSON_IsTrue(v))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "BPE byte_fallback is not supported");
	v = cJSON_GetObjectItemCaseSensitive(model, "ignore_merges");
	if (v && cJSON_IsTrue(v))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "BPE ignore_merges is not supported");
	static const char *const affixes[] = { "continuing_subword_prefix", "end_of_word_suffix" };
	for (int i = 0; i < 2; i++) {
		v = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
		if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
			return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "BPE %s is not supported", affixes[i]);
	}
	return 0;
}

/* Converts a byte-level vocab string to the bytes it stands for. A string
 * with a character outside the map is taken verbatim, as HF's ByteLevel
 * decoder does. Returns the byte count written to out (>= strlen(s) room). */
static size_t byte_level_decode(const char *s, size_t n, const int16_t *u2b, char *out)
{
	size_t k = 0;
	utf8proc_ssize_t i = 0;
	while ((size_t)i < n) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
		                                      (utf8proc_ssize_t)n - i, &cp);
		if (l <= 0 || cp < 0 || cp >= 324 || u2b[cp] < 0) {
			memcpy(out, s, n);
			return n;
		}
		out[k++] = (char)u2b[cp];
		i += l;
	}
	return k;
}

static int load_tables(ss_tokenizer *t, const cJSON *root, char *errmsg)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	if (!cJSON_IsObject(vocab))
		return ss_errf(errmsg, SS_ERR_FORMAT, "model.vocab is not an object");
	if (!cJSON_IsArray(merges))
		return ss_errf(errmsg, SS_ERR_FORMAT, "model.merges is not an array");
	if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
		return ss_errf(errmsg, SS_ERR_FORMAT, "added_tokens is not an array");

	size_t nv = 0, vbytes = 0;
	int64_t max_id = -1;
	const cJSON *it;
	cJSON_ArrayForEach(it, vocab) {
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX - 1 ||
		    it->valuedouble != (double)it->valueint)
			return ss_errf(errmsg, SS_ERR_FORMAT, "vocab entry \"%s\": id is not a valid integer",
			            it->string);
		if (it->valueint > max_id)
			max_id = it->valueint;
		vbytes += strlen(it->string);
		nv++;
	}
	cJSON_ArrayForEach(it, added) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
		if (!cJSON_IsNumber(id) || id->valueint < 0 || id->valuedouble != (double)id->valueint ||
		    !cJSON_IsString(content) || !content->valuestring[0])
			return ss_errf(errmsg, SS_ERR_FORMAT, "added_tokens: entry without integer id and content");
		if (!json_false(it, "lstrip", 0) || !json_false(it, "rstrip", 0) ||
		    !json_false(it, "single_word", 0))
			return ss_errf(errmsg, SS_ERR_UNSUPPORTED,
			            "added token %d: lstrip/rstrip/single_word are not supported", id->valueint);
		if (id->valueint > max_id)
			max_id = id->valueint;
		vbytes += strlen(content->valuestring);
	}
	if (max_id < 0)
		return ss_errf(errmsg, SS_ERR_FORMAT, "empty vocabulary");
	/* Tables are sized by the largest id: ids far beyond the number of
	 * entries would make a small file cost gigabytes. */
	size_t n_entries = nv + (size_t)cJSON_GetArraySize(added);
	if ((uint64_t)max_id >= 2 * (uint64_t)n_entries + 1024)
		return ss_errf(errmsg, SS_ERR_FORMAT, "token id %" PRId64 " is out of range for %zu vocab and added entries",
		            max_id, n_entries);
	t->n_vocab = (int32_t)max_id + 1;
	t->tlen = malloc((size_t)t->n_vocab * sizeof *t->tlen);
	t->toff = calloc((size_t)t->n_vocab, sizeof *t->toff);
	t->tbytes = malloc(vbytes + 1);
	if (!t->tlen || !t->toff || !t->tbytes)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	for (int32_t i = 0; i < t->n_vocab; i++)
		t->tlen[i] = -1;

	uint32_t b2u[256];
	int16_t u2b[324];
	bytes_to_unicode(b2u);
	for (int i = 0; i < 324; i++)
		u2b[i] = -1;
	for (int b = 0; b < 256; b++)
		u2b[b2u[b]] = (int16_t)b;

	struct vmap vm;
	if (vmap_init(&vm, nv))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	int rc = 0;
	size_t off = 0;
	cJSON_ArrayForEach(it, vocab) {
		size_t l = strlen(it->string);
		int32_t id = it->valueint;
		vmap_put(&vm, it->string, l, id);
		if (t->tlen[id] < 0) {
			size_t k = byte_level_decode(it->string, l, u2b, t->tbytes + off);
			t->toff[id] = (uint32_t)off;
			t->tlen[id] = (int32_t)k;
			off += k;
		}
	}
	for (int b = 0; b < 256; b++) {
		char s[4];
		size_t l = utf8_put(s, b2u[b]);
		t->byte_id[b] = vmap_get(&vm, s, l);
		/* Bytes that never occur in UTF-8 (C0, C1, F5..FF) may be missing:
		 * GPT-NeoX has no tokens for them, and encoding validates first. */
		int in_utf8 = b < 0xC0 || (b >= 0xC2 && b <= 0xF4);
		if (t->byte_id[b] < 0 && in_utf8) {
			rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "vocab has no token for byte 0x%02x", b);
			goto out;
		}
	}

	size_t nm = (size_t)cJSON_GetArraySize(merges);
	if ((rc = merges_init(t, nm ? nm : 1))) {
		ss_errf(errmsg, rc, "out of memory");
		goto out;
	}
	char *cat = NULL;
	size_t catcap = 0;
	int32_t rank = 0;
	cJSON_ArrayForEach(it, merges) {
		const char *a, *b;
		size_t la, lb;
		if (cJSON_IsString(it)) {
			a = it->valuestring;
			const char *sp = strchr(a, ' ');
			if (!sp || sp == a || !sp[1]) {
				rc = ss_errf(errmsg, SS_ERR_FORMAT, "merge %" PRId32 " (\"%s\") is not \"a b\"", rank, a);
				break;
			}
			la = (size_t)(sp - a);
			b = sp + 1;
			lb = strlen(b);
		} else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
		           cJSON_IsString(it->child) && cJSON_IsString(it->child->next)) {
			a = it->child->valuestring;
			b = it->child->next->valuestring;
			la = strlen(a);
			lb = strlen(b);
		} else {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "merge %" PRId32 " is neither \"a b\" nor [a, b]", rank);
			break;
		}
		if (la + lb > catcap) {
			catcap = 2 * (la + lb);
			char *nc = realloc(cat, catcap);
			if (!nc) {
				rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
				break;
			}
			cat = nc;
		}
		memcpy(cat, a, la);
		memcpy(cat + la, b, lb);
		int32_t ia = vmap_get(&vm, a, la), ib = vmap_get(&vm, b, lb);
		int32_t im = vmap_get(&vm, cat, la + lb);
		if (ia < 0 || ib < 0 || im < 0) {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "merge %" PRId32 " (\"%.*s\" + \"%.*s\") names a token not in the vocab",
			          rank, (int)la, a, (int)lb, b);
			break;
		}
		merge_put(t, ia, ib, rank, im);
		rank++;
	}
	free(cat);
	if (rc)
		goto out;

	/* Added tokens: raw (normalized: false) and normalized ones, the latter
	 * matched by their normalized content. HF's id_to_token looks at added
	 * tokens first, so their content is what decoding gives. */
	size_t na = (size_t)cJSON_GetArraySize(added);
	t->raw.pats = calloc(na ? na : 1, sizeof(struct pattern));
	t->norm.pats = calloc(na ? na : 1, sizeof(struct pattern));
	if (!t->raw.pats || !t->norm.pats) {
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		goto out;
	}
	cJSON_ArrayForEach(it, added) {
		int32_t id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
		const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
		size_t l = strlen(content), bad;
		if (ss_utf8_validate(content, l, &bad)) {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "added token %" PRId32 ": invalid UTF-8", id);
			goto out;
		}
		memcpy(t->tbytes + off, content, l);
		t->toff[id] = (uint32_t)off;
		t->tlen[id] = (int32_t)l;
		off += l;
		const cJSON *nz = cJSON_GetObjectItemCaseSensitive(it, "normalized");
		const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "special");
		/* HF's AddedToken default: normalized = !special. */
		int normalized = nz ? cJSON_IsTrue(nz) : !(sp && cJSON_IsTrue(sp));
		struct matcher *m = normalized ? &t->norm : &t->raw;
		const char *norm = content;
		size_t pl = l;
		struct buf nb = { 0 };
		if (normalized && t->nfc && (rc = nfc(content, l, &nb, &norm, &pl))) {
			free(nb.p);
			ss_errf(errmsg, rc, "out of memory");
			goto out;
		}
		char *pat = malloc(pl + 1);
		if (pat) {
			memcpy(pat, norm, pl);
			pat[pl] = 0;
		}
		free(nb.p);
		if (!pat) {
			rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
			goto out;
		}
		m->pats[m->n++] = (struct pattern){ pat, (uint32_t)pl, id };
	}
	matcher_build(&t->raw);
	matcher_build(&t->norm);
out:
	free(vm.e);
	return rc;
}

static int compile_regex(ss_tokenizer *t, char *errmsg)
{
	int err;
	PCRE2_SIZE eoff;
	t->re = pcre2_compile((PCRE2_SPTR)split_regex, PCRE2_ZERO_TERMINATED,
	                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &eoff, NULL);
	if (!t->re) {
		PCRE2_UCHAR msg[128];
		pcre2_get_error_message(err, msg, sizeof msg);
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "PCRE2 cannot compile the split regex: %s", (char *)msg);
	}
	/* Without JIT support (some platforms) the interpreter runs the same
	 * pattern; inputs are validated UTF-8 either way. */
	t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
	t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
	t->mctx = pcre2_match_context_create(NULL);
	if (!t->md || !t->mctx)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	if (t->jit) {
		t->jstack = pcre2_jit_stack_create(32 << 10, 8 << 20, NULL);
		if (!t->jstack)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		pcre2_jit_stack_assign(t->mctx, NULL, t->jstack);
	}
	return 0;
}

int ss_tokenizer_load(ss_tokenizer **out, const char *path, char *errmsg)
{
	*out = NULL;
	char *buf = NULL;
	size_t len = 0;
	int rc = read_file(path, &buf, &len, errmsg);
	if (rc)
		return rc;
	ss_tokenizer *t = calloc(1, sizeof *t);
	if (!t) {
		free(buf);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	snprintf(t->fingerprint, sizeof t->fingerprint, "%016" PRIx64, fnv1a64(buf, len));
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
	if (!root) {
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "invalid JSON near byte %td", end ? end - buf : (ptrdiff_t)0);
		goto done;
	}
	if ((rc = check_pipeline(t, root, errmsg)) || (rc = load_tables(t, root, errmsg)) ||
	    (rc = compile_regex(t, errmsg)))
		goto done;
	t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
	t->ckeys = malloc(CACHE_KEY_ARENA);
	t->cids = malloc(CACHE_ID_ARENA * sizeof *t->cids);
	if (!t->cache || !t->ckeys || !t->cids || scratch_reserve(t, 256)) {
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		goto done;
	}
done:
	cJSON_Delete(root);
	free(buf);
	if (rc) {
		ss_tokenizer_free(t);
		return rc;
	}
	*out = t;
	return 0;
}
