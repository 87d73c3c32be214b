/*
 * load.c — ss_tokenizer_load: reads a HF tokenizer.json (byte-level BPE),
 * checks its pipeline is one this tokenizer runs, builds the vocab, merge
 * and added-token tables; and ss_tokenizer_free. See ss_tokenizer.h.
 */
#include "internal.h"
#include "stream/gguf.h" /* ss_gguf_is */

#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

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
	uint64_t h = tok_hash_bytes(s, len);
	struct ventry *e = vmap_slot(m, s, len, h);
	*e = (struct ventry){ s, len, h, id };
}

static int32_t vmap_get(const struct vmap *m, const char *s, size_t len)
{
	const struct ventry *e = vmap_slot(m, s, len, tok_hash_bytes(s, len));
	return e->s ? e->id : -1;
}

void ss_tokenizer_free(ss_tokenizer *tok)
{
	if (!tok)
		return;
	free(tok->tlen);
	free(tok->toff);
	free(tok->tbytes);
	free(tok->merges);
	tok_matcher_free(&tok->raw);
	tok_matcher_free(&tok->norm);
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
	int fd = ss_open_regular(path); /* a FIFO would block: never waited on */
	if (fd == -2)
		return ss_errf(errmsg, SS_ERR_INVALID, "not a regular file (a FIFO, a directory or a device)");
	FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
	if (!f) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return ss_errf(errmsg, SS_ERR_IO, "%s", strerror(e));
	}
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

/* Checks the ids of the vocab and the added tokens, and sizes the id
 * tables by the largest: t->n_vocab, t->tlen (all -1), t->toff, t->tbytes.
 * *nv: the vocab entries. */
static int alloc_tables(ss_tokenizer *t, const cJSON *vocab, const cJSON *added, size_t *nv_out,
                        char *errmsg)
{
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
	*nv_out = nv;
	return 0;
}

/* The vocab: each string's bytes into t->tbytes from offset 0 (*off: past
 * them) and its id into vm; then the id of each byte. */
static int load_vocab(ss_tokenizer *t, const cJSON *vocab, struct vmap *vm, size_t *off_out,
                      char *errmsg)
{
	const cJSON *it;
	uint32_t b2u[256];
	int16_t u2b[324];
	bytes_to_unicode(b2u);
	for (int i = 0; i < 324; i++)
		u2b[i] = -1;
	for (int b = 0; b < 256; b++)
		u2b[b2u[b]] = (int16_t)b;

	size_t off = 0;
	cJSON_ArrayForEach(it, vocab) {
		size_t l = strlen(it->string);
		int32_t id = it->valueint;
		vmap_put(vm, it->string, l, id);
		if (t->tlen[id] < 0) {
			size_t k = byte_level_decode(it->string, l, u2b, t->tbytes + off);
			t->toff[id] = (uint32_t)off;
			t->tlen[id] = (int32_t)k;
			off += k;
		}
	}
	for (int b = 0; b < 256; b++) {
		char s[4];
		size_t l = tok_utf8_put(s, b2u[b]);
		t->byte_id[b] = vmap_get(vm, s, l);
		/* Bytes that never occur in UTF-8 (C0, C1, F5..FF) may be missing:
		 * GPT-NeoX has no tokens for them, and encoding validates first. */
		int in_utf8 = b < 0xC0 || (b >= 0xC2 && b <= 0xF4);
		if (t->byte_id[b] < 0 && in_utf8)
			return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "vocab has no token for byte 0x%02x", b);
	}
	*off_out = off;
	return 0;
}

/* The merges ("a b" or [a, b], by rank) as id pairs into t's merge table. */
static int load_merges(ss_tokenizer *t, const cJSON *merges, const struct vmap *vm, char *errmsg)
{
	const cJSON *it;
	size_t nm = (size_t)cJSON_GetArraySize(merges);
	int rc = tok_merges_init(t, nm ? nm : 1);
	if (rc)
		return ss_errf(errmsg, rc, "out of memory");
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
		int32_t ia = vmap_get(vm, a, la), ib = vmap_get(vm, b, lb);
		int32_t im = vmap_get(vm, cat, la + lb);
		if (ia < 0 || ib < 0 || im < 0) {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "merge %" PRId32 " (\"%.*s\" + \"%.*s\") names a token not in the vocab",
			          rank, (int)la, a, (int)lb, b);
			break;
		}
		tok_merge_put(t, ia, ib, rank, im);
		rank++;
	}
	free(cat);
	return rc;
}

/* Added tokens: raw (normalized: false) and normalized ones, the latter
 * matched by their normalized content; their bytes into t->tbytes from
 * offset off. HF's id_to_token looks at added tokens first, so their
 * content is what decoding gives. */
static int load_added(ss_tokenizer *t, const cJSON *added, size_t off, char *errmsg)
{
	size_t na = (size_t)cJSON_GetArraySize(added);
	t->raw.pats = calloc(na ? na : 1, sizeof(struct pattern));
	t->norm.pats = calloc(na ? na : 1, sizeof(struct pattern));
	if (!t->raw.pats || !t->norm.pats)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	const cJSON *it;
	cJSON_ArrayForEach(it, added) {
		int32_t id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
		const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
		size_t l = strlen(content), bad;
		if (ss_utf8_validate(content, l, &bad))
			return ss_errf(errmsg, SS_ERR_FORMAT, "added token %" PRId32 ": invalid UTF-8", id);
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
		int rc = normalized && t->nfc ? tok_nfc(content, l, &nb, &norm, &pl) : 0;
		if (rc) {
			free(nb.p);
			return ss_errf(errmsg, rc, "out of memory");
		}
		char *pat = malloc(pl + 1);
		if (pat) {
			memcpy(pat, norm, pl);
			pat[pl] = 0;
		}
		free(nb.p);
		if (!pat)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		m->pats[m->n++] = (struct pattern){ pat, (uint32_t)pl, id };
	}
	tok_matcher_build(&t->raw);
	tok_matcher_build(&t->norm);
	return 0;
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
	size_t nv = 0, off = 0;
	int rc = alloc_tables(t, vocab, added, &nv, errmsg);
	if (rc)
		return rc;
	struct vmap vm;
	if (vmap_init(&vm, nv))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	if (!(rc = load_vocab(t, vocab, &vm, &off, errmsg)))
		rc = load_merges(t, merges, &vm, errmsg);
	free(vm.e);
	return rc ? rc : load_added(t, added, off, errmsg);
}


int ss_tokenizer_load(ss_tokenizer **out, const char *path, char *errmsg)
{
	*out = NULL;
	char *buf = NULL;
	size_t len = 0;
	cJSON *root = NULL;
	uint64_t fp = 0;
	int rc;
	if (ss_gguf_is(path)) {
		if ((rc = tok_gguf_json(path, &root, &fp, errmsg))) {
			size_t lp = strlen(path); /* the caller names the file */
			if (errmsg && !strncmp(errmsg, path, lp) && !strncmp(errmsg + lp, ": ", 2))
				memmove(errmsg, errmsg + lp + 2, strlen(errmsg + lp + 2) + 1);
			return rc;
		}
	} else {
		if ((rc = read_file(path, &buf, &len, errmsg)))
			return rc;
		fp = fnv1a64(buf, len);
	}
	ss_tokenizer *t = calloc(1, sizeof *t);
	if (!t) {
		cJSON_Delete(root);
		free(buf);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	snprintf(t->fingerprint, sizeof t->fingerprint, "%016" PRIx64, fp);
	const char *end = NULL;
	if (!root && !(root = cJSON_ParseWithLengthOpts(buf, len, &end, 0))) {
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "invalid JSON near byte %td", end ? end - buf : (ptrdiff_t)0);
		goto done;
	}
	if ((rc = check_pipeline(t, root, errmsg)) || (rc = load_tables(t, root, errmsg)) ||
	    (rc = tok_regex_compile(t, errmsg)))
		goto done;
	t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
	t->ckeys = malloc(CACHE_KEY_ARENA);
	t->cids = malloc(CACHE_ID_ARENA * sizeof *t->cids);
	if (!t->cache || !t->ckeys || !t->cids || tok_scratch_reserve(t, 256)) {
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
