/*
 * internal.h — what the parts of the tokenizer (the files of lib/tokenizer/) share:
 * the tokenizer's layout and the functions one part calls in another. Not
 * public: callers use ss_tokenizer.h.
 *
 *   utf8.c    UTF-8 validation and NFC (only around code points >= U+0300)
 *   pretok.c  the GPT-2 split regex (PCRE2): text to pre-tokens
 *   match.c   added tokens: leftmost-longest matching in text
 *   bpe.c     byte-level BPE of one pre-token: merge table, merge loop, cache
 *   encode.c  encode, decode, normalize (the public calls)
 *   load.c    tokenizer.json: checks, vocab, merges, added tokens; free
 */
#ifndef SS_TOKENIZER_INTERNAL_H
#define SS_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "ss.h"

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

/* utf8.c */
/* "invalid UTF-8 at byte offset OFF" into errmsg; returns SS_ERR_UTF8. */
int tok_utf8_fail(char *errmsg, size_t off);
/* Writes the UTF-8 form of cp (< 0x110000) to out; returns its length. */
size_t tok_utf8_put(char *out, uint32_t cp);
/* Appends src[0..n) to b, NUL-terminated. Returns 0 or SS_ERR_NOMEM. */
int tok_buf_put(struct buf *b, const void *src, size_t n);
/* NFC of valid UTF-8 s[0..n): *out = s when s is NFC as is, else the
 * result in b (reset first) and *out = b->p. Returns 0, SS_ERR_NOMEM or
 * SS_ERR_UTF8. */
int tok_nfc(const char *s, size_t n, struct buf *b, const char **out, size_t *out_n);

/* pretok.c */
/* Compiles the split regex into t (re, md, mctx, jstack, jit). */
int tok_regex_compile(ss_tokenizer *t, char *errmsg);
/* Pre-tokenizes normalized valid UTF-8 s[0..n) (no added tokens left in it)
 * and appends the BPE ids of each pre-token to out. Returns 0,
 * SS_ERR_NOMEM, or SS_ERR_INVALID when the regex fails. */
int tok_pretokenize(ss_tokenizer *t, const char *s, size_t n, struct ids *out);

/* match.c */
/* Sorts m's patterns and builds its first-byte tables. */
void tok_matcher_build(struct matcher *m);
/* Finds the leftmost-longest pattern in s[from..n). Returns 1 and sets
 * *at, *mlen, *id, or 0 when none. */
int tok_matcher_find(const struct matcher *m, const char *s, size_t n, size_t from,
                     size_t *at, size_t *mlen, int32_t *id);
void tok_matcher_free(struct matcher *m);

/* bpe.c */
/* 64-bit hash of p[0..n) (vocab map, merge cache). */
uint64_t tok_hash_bytes(const void *p, size_t n);
/* Allocates t's merge table for n merges. Returns 0 or SS_ERR_NOMEM. */
int tok_merges_init(ss_tokenizer *t, size_t n);
/* Records merge (a, b) -> id of rank `rank`; a pair listed twice keeps its
 * last rank, as HF's HashMap collect does. */
void tok_merge_put(ss_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id);
/* Grows v to room for `extra` more ids. Returns 0 or SS_ERR_NOMEM. */
int tok_ids_reserve(struct ids *v, size_t extra);
/* Grows the merge loop's scratch to n symbols. Returns 0 or SS_ERR_NOMEM. */
int tok_scratch_reserve(ss_tokenizer *t, size_t n);
/* Appends the BPE ids of pre-token s[0..n) to out, through the cache.
 * Returns 0 or SS_ERR_NOMEM. */
int tok_bpe_word(ss_tokenizer *t, const char *s, size_t n, struct ids *out);

static inline int tok_ids_push(struct ids *v, int32_t id)
{
	if (v->n == v->cap && tok_ids_reserve(v, 1))
		return SS_ERR_NOMEM;
	v->v[v->n++] = id;
	return 0;
}

/* A GGUF's tokenizer.ggml.* metadata as the tokenizer.json it stands for
 * (gguf.c: what is accepted), for ss_tokenizer_load. *root: caller frees
 * with cJSON_Delete; *fingerprint: the hash the tokenizer's fingerprint
 * prints. Errors: as ss_gguf_open, SS_ERR_FORMAT (missing keys),
 * SS_ERR_UNSUPPORTED (another model, pre-tokenizer or token type),
 * SS_ERR_NOMEM; errmsg names the file and the key. */
struct cJSON;
int tok_gguf_json(const char *path, struct cJSON **root, uint64_t *fingerprint, char *errmsg);

#endif /* SS_TOKENIZER_INTERNAL_H */
