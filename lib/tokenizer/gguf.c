/*
 * gguf.c — a tokenizer from a GGUF file's tokenizer.ggml.* metadata, as the
 * tokenizer.json it was converted from (ss_tokenizer_load reads either).
 *
 * Accepted: tokenizer.ggml.model "gpt2" (byte-level BPE) with
 * tokenizer.ggml.pre one of the names llama.cpp gives GPT-2's split regex
 * (llama-vocab.cpp: LLAMA_VOCAB_PRE_TYPE_GPT2, _MPT, _OLMO): "gpt-2"
 * (GPT-2's tokenizer.json: no normalizer), "mpt" and "olmo" (both the
 * GPT-NeoX-20B tokenizer, which llama.cpp's converter also writes for a
 * Mamba checkpoint without tokenizer files: an NFC normalizer). Tokens by
 * tokenizer.ggml.token_type: NORMAL (1) into the vocab; CONTROL (3) into
 * the vocab and as special added tokens matched in the raw text (HF's
 * "normalized": false: <|endoftext|>); USER_DEFINED (4) as added tokens
 * matched after normalization (GPT-NeoX's runs of spaces), except the
 * converter's padding "[PAD<id>]", which is left unassigned as HF's
 * tokenizer has no such id. Merges: tokenizer.ggml.merges ("a b"). Other
 * models, pre-tokenizers and token types are refused, never approximated.
 * The fingerprint is the FNV-1a hash of model, pre, and each token's type,
 * length and bytes and each merge's length and bytes: a GGUF's tokenizer is
 * not the bytes of a tokenizer.json, so its token streams carry another
 * fingerprint than the HF directory's.
 * ref: llama.cpp gguf-py/gguf/constants.py (TokenType, Keys.Tokenizer),
 *      src/llama-vocab.cpp (llama_vocab::impl::load), conversion/base.py
 *      (_set_vocab_gpt2, _set_vocab_builtin).
 */
#include "internal.h"
#include "stream/gguf.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NORMAL = 1, CONTROL = 3, USER_DEFINED = 4 };
#define BUF ((size_t)1 << 16) /* longest token or merge */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *s = p;
	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= UINT64_C(0x100000001B3);
	}
	return h;
}

static uint64_t fnv_str(uint64_t h, const char *s, size_t n)
{
	uint64_t len = n;
	return fnv(fnv(h, &len, sizeof len), s, n);
}

/* s[0..n) as a NUL-terminated copy into buf (cap bytes), or NULL when it
 * holds a NUL or does not fit. */
static const char *cstr(const char *s, size_t n, char *buf, size_t cap)
{
	if (n >= cap || memchr(s, 0, n))
		return NULL;
	memcpy(buf, s, n);
	buf[n] = 0;
	return buf;
}

static int is_pad(const char *s, size_t n, uint64_t id)
{
	char want[32];
	int k = snprintf(want, sizeof want, "[PAD%llu]", (unsigned long long)id);
	return (size_t)k == n && !memcmp(s, want, n);
}

static cJSON *added_token(uint64_t id, const char *content, int special)
{
	cJSON *a = cJSON_CreateObject();
	if (a && cJSON_AddNumberToObject(a, "id", (double)id) &&
	    cJSON_AddStringToObject(a, "content", content) &&
	    cJSON_AddBoolToObject(a, "special", special) &&
	    cJSON_AddBoolToObject(a, "normalized", !special))
		return a;
	cJSON_Delete(a);
	return NULL;
}

/* ss_gguf_get_strs of a key that must be there. */
static int required_strs(const ss_gguf *g, const char *key, const uint8_t **p, uint64_t *n,
			 char *errmsg)
{
	int rc = ss_gguf_get_strs(g, key, p, n, errmsg);
	return rc == SS_ERR_NOTFOUND ? ss_errf(errmsg, SS_ERR_FORMAT, "%s: no %s", g->path, key) : rc;
}

/* Fills root's model.vocab and added_tokens from the tokens and their types. */
static int gguf_tokens(const ss_gguf *g, cJSON *vocab, cJSON *added, uint64_t *h, char *buf,
		       size_t cap, char *errmsg)
{
	const uint8_t *p;
	uint64_t n;
	int rc = required_strs(g, "tokenizer.ggml.tokens", &p, &n, errmsg);
	if (rc)
		return rc;
	const ss_gguf_kv *tt = ss_gguf_find_kv(g, "tokenizer.ggml.token_type");
	if (tt && (tt->type != SS_GGUF_ARRAY || tt->elem != SS_GGUF_I32 || tt->n != n))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: tokenizer.ggml.token_type is not an int32 "
			       "array of %llu entries", g->path, (unsigned long long)n);
	if (n > INT32_MAX)
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: %llu tokens", g->path,
			       (unsigned long long)n);
	for (uint64_t id = 0; id < n; id++) {
		const char *s;
		size_t len;
		ss_gguf_str_next(&p, &s, &len);
		int32_t type = NORMAL;
		if (tt)
			memcpy(&type, tt->val + 4 * id, 4);
		*h = fnv(fnv_str(*h, s, len), &type, sizeof type);
		const char *c = cstr(s, len, buf, cap);
		if (!c)
			return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: tokenizer.ggml.tokens[%llu]: %s",
				       g->path, (unsigned long long)id,
				       len >= cap ? "longer than 64 KB" : "holds a NUL byte");
		if (type == USER_DEFINED && is_pad(s, len, id))
			continue;
		if (type != NORMAL && type != CONTROL && type != USER_DEFINED)
			return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: tokenizer.ggml.tokens[%llu] has "
				       "token type %d (only normal, control, user-defined)", g->path,
				       (unsigned long long)id, type);
		if (type != USER_DEFINED && !cJSON_AddNumberToObject(vocab, c, (double)id))
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		cJSON *a = type == NORMAL ? NULL : added_token(id, c, type == CONTROL);
		if (type != NORMAL && (!a || !cJSON_AddItemToArray(added, a)))
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	return 0;
}

static int gguf_merges(const ss_gguf *g, cJSON *merges, uint64_t *h, char *buf, size_t cap,
		       char *errmsg)
{
	const uint8_t *p;
	uint64_t n;
	int rc = required_strs(g, "tokenizer.ggml.merges", &p, &n, errmsg);
	if (rc)
		return rc;
	for (uint64_t i = 0; i < n; i++) {
		const char *s;
		size_t len;
		ss_gguf_str_next(&p, &s, &len);
		*h = fnv_str(*h, s, len);
		const char *c = cstr(s, len, buf, cap);
		cJSON *m = c ? cJSON_CreateString(c) : NULL;
		if (!c)
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu]: %s",
				       g->path, (unsigned long long)i,
				       len >= cap ? "longer than 64 KB" : "holds a NUL byte");
		if (!m || !cJSON_AddItemToArray(merges, m))
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	return 0;
}

int tok_gguf_json(const char *path, cJSON **out, uint64_t *fingerprint, char *errmsg)
{
	ss_gguf g;
	cJSON *root = NULL;
	int rc = ss_gguf_open(&g, path, errmsg);
	const char *model = "", *pre = "";
	size_t lm = 0, lp = 0;
	if (!rc && (rc = ss_gguf_get_str(&g, "tokenizer.ggml.model", &model, &lm, errmsg)) ==
	    SS_ERR_NOTFOUND)
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: no tokenizer.ggml.model (a GGUF without a "
			     "tokenizer: use --tokenizer)", path);
	if (!rc && !(lm == 4 && !memcmp(model, "gpt2", 4)))
		rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model %.*s is not supported "
			     "(gpt2: byte-level BPE)", path, (int)(lm > 64 ? 64 : lm), model);
	if (!rc && (rc = ss_gguf_get_str(&g, "tokenizer.ggml.pre", &pre, &lp, errmsg)) ==
	    SS_ERR_NOTFOUND)
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: no tokenizer.ggml.pre", path);
	int nfc = 0;
	if (!rc) {
		if ((lp == 3 && !memcmp(pre, "mpt", 3)) || (lp == 4 && !memcmp(pre, "olmo", 4)))
			nfc = 1;
		else if (!(lp == 5 && !memcmp(pre, "gpt-2", 5)))
			rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre %.*s is not "
				     "supported (gpt-2, mpt, olmo: GPT-2's split regex)", path,
				     (int)(lp > 64 ? 64 : lp), pre);
	}
	cJSON *bpe = NULL, *vocab = NULL, *merges = NULL, *added = NULL, *pt = NULL;
	if (!rc) {
		root = cJSON_CreateObject();
		bpe = cJSON_AddObjectToObject(root, "model");
		vocab = cJSON_AddObjectToObject(bpe, "vocab");
		merges = cJSON_AddArrayToObject(bpe, "merges");
		added = cJSON_AddArrayToObject(root, "added_tokens");
		pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
		if (!root || !bpe || !vocab || !merges || !added || !pt ||
		    !cJSON_AddStringToObject(pt, "type", "ByteLevel") ||
		    !cJSON_AddBoolToObject(pt, "add_prefix_space", 0) ||
		    (nfc && !cJSON_AddObjectToObject(root, "normalizer")))
			rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		else if (nfc)
			cJSON_AddStringToObject(cJSON_GetObjectItem(root, "normalizer"), "type", "NFC");
	}
	uint64_t h = UINT64_C(0xCBF29CE484222325);
	h = fnv_str(fnv_str(h, model, lm), pre, lp);
	char *buf = rc ? NULL : malloc(BUF);
	if (!rc && !buf)
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	if (!rc)
		rc = gguf_tokens(&g, vocab, added, &h, buf, BUF, errmsg);
	if (!rc)
		rc = gguf_merges(&g, merges, &h, buf, BUF, errmsg);
	free(buf);
	ss_gguf_close(&g);
	if (rc) {
		cJSON_Delete(root);
		return rc;
	}
	*out = root;
	*fingerprint = h;
	return 0;
}
