/*
 * encode.c — the tokenizer's public calls besides loading: encode (raw added
 * tokens, NFC, normalized added tokens, pre-tokens, BPE), decode, normalize.
 * See ss_tokenizer.h.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>


/* Splits normalized text on the normalized added tokens. */
static int encode_normalized(ss_tokenizer *t, const char *s, size_t n, struct ids *out)
{
	size_t pos = 0, at, mlen;
	int32_t id;
	int rc;
	while (pos < n && tok_matcher_find(&t->norm, s, n, pos, &at, &mlen, &id)) {
		if (at > pos && (rc = tok_pretokenize(t, s + pos, at - pos, out)))
			return rc;
		if ((rc = tok_ids_push(out, id)))
			return rc;
		pos = at + mlen;
	}
	return pos < n ? tok_pretokenize(t, s + pos, n - pos, out) : 0;
}

/* Normalizes one piece of raw text (between raw added tokens) and encodes
 * it. */
static int encode_piece(ss_tokenizer *t, const char *s, size_t n, struct ids *out)
{
	if (!t->nfc)
		return encode_normalized(t, s, n, out);
	const char *norm;
	size_t nn;
	int rc = tok_nfc(s, n, &t->nbuf, &norm, &nn);
	return rc ? rc : encode_normalized(t, norm, nn, out);
}

int ss_tokenizer_encode(ss_tokenizer *tok, const char *text, size_t len,
                        int32_t **ids, size_t *n_ids, char *errmsg)
{
	*ids = NULL;
	*n_ids = 0;
	size_t bad;
	if (ss_utf8_validate(text, len, &bad))
		return tok_utf8_fail(errmsg, bad);
	struct ids out = { 0 };
	/* English text averages about 4.5 bytes per token. */
	if (len && tok_ids_reserve(&out, len / 3 + 16))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	size_t pos = 0, at, mlen;
	int32_t id;
	int rc = 0;
	while (pos < len && tok_matcher_find(&tok->raw, text, len, pos, &at, &mlen, &id)) {
		if (at > pos && (rc = encode_piece(tok, text + pos, at - pos, &out)))
			goto err;
		if ((rc = tok_ids_push(&out, id)))
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
		return tok_utf8_fail(errmsg, bad);
	struct buf b = { 0 };
	const char *norm = text;
	size_t nn = len;
	int rc = tok->nfc ? tok_nfc(text, len, &b, &norm, &nn) : 0;
	if (!rc && norm == text)
		rc = tok_buf_put(&b, text, len);
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
