/*
 * gguf.c — llama.cpp's GGUF files: the header, metadata and tensor list
 * checked against the file's size, and tensors widened to f32 (contract and
 * layout in stream/gguf.h).
 */
#include "stream/gguf.h"
#include "stream/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_NAME 255        /* tensor names: ggml allows 63 bytes */
#define MAX_KEY 65535
#define MAX_ALIGN (1u << 20)

/* A bounded cursor over the mapping; the first error sticks. */
typedef struct {
	const uint8_t *base, *p, *end;
	const char *path;
	char *errmsg;
	int rc;
	char what[300];     /* the record being read, for messages */
} cur;

static int fail(cur *c, int code, const char *why)
{
	if (!c->rc)
		c->rc = ss_errf(c->errmsg, code, "%s: %s: %s at byte %zu", c->path, c->what, why,
				(size_t)(c->p - c->base));
	return c->rc;
}

static int need(cur *c, uint64_t n)
{
	if (c->rc)
		return c->rc;
	if ((uint64_t)(c->end - c->p) < n)
		return fail(c, SS_ERR_TRUNCATED, "file ends");
	return 0;
}

static uint32_t u32(cur *c)
{
	uint32_t v = 0;
	if (!need(c, 4)) {
		memcpy(&v, c->p, 4);
		c->p += 4;
	}
	return v;
}

static uint64_t u64(cur *c)
{
	uint64_t v = 0;
	if (!need(c, 8)) {
		memcpy(&v, c->p, 8);
		c->p += 8;
	}
	return v;
}

/* A string: its bytes in the mapping, length in *len. */
static const uint8_t *str(cur *c, uint64_t *len)
{
	uint64_t n = u64(c);
	*len = 0;
	if (need(c, n))
		return NULL;
	const uint8_t *s = c->p;
	c->p += n;
	*len = n;
	return s;
}

static char *dup_name(cur *c, const uint8_t *s, uint64_t n, uint64_t max)
{
	if (c->rc)
		return NULL;
	if (n > max || memchr(s, 0, n)) {
		fail(c, SS_ERR_FORMAT, n > max ? "name too long" : "NUL inside a name");
		return NULL;
	}
	char *d = malloc(n + 1);
	if (!d) {
		fail(c, SS_ERR_NOMEM, "out of memory");
		return NULL;
	}
	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

static const uint8_t scalar_size[SS_GGUF_NTYPES] = {
	[SS_GGUF_U8] = 1, [SS_GGUF_I8] = 1, [SS_GGUF_U16] = 2, [SS_GGUF_I16] = 2,
	[SS_GGUF_U32] = 4, [SS_GGUF_I32] = 4, [SS_GGUF_F32] = 4, [SS_GGUF_BOOL] = 1,
	[SS_GGUF_U64] = 8, [SS_GGUF_I64] = 8, [SS_GGUF_F64] = 8,
};

/* Skips one value of type t (not an array), checking its bounds. */
static void skip_value(cur *c, uint32_t t)
{
	if (t == SS_GGUF_STRING) {
		uint64_t n;
		str(c, &n);
	} else if (t < SS_GGUF_NTYPES && scalar_size[t]) {
		if (!need(c, scalar_size[t]))
			c->p += scalar_size[t];
	} else {
		fail(c, SS_ERR_FORMAT, "bad value type");
	}
}

static int read_kv(cur *c, ss_gguf_kv *kv)
{
	uint64_t kn;
	const uint8_t *k = str(c, &kn);
	kv->key = dup_name(c, k, kn, MAX_KEY);
	if (kv->key)
		snprintf(c->what, sizeof c->what, "key %.200s", kv->key);
	kv->type = u32(c);
	if (c->rc)
		return c->rc;
	if (kv->type == SS_GGUF_ARRAY) {
		kv->elem = u32(c);
		kv->n = u64(c);
		if (c->rc)
			return c->rc;
		if (kv->elem == SS_GGUF_ARRAY || kv->elem >= SS_GGUF_NTYPES)
			return fail(c, SS_ERR_FORMAT, "bad array element type");
		kv->val = c->p;
		/* each element takes at least one byte (a string eight) */
		uint64_t least = kv->elem == SS_GGUF_STRING ? 8 : scalar_size[kv->elem];
		if (kv->n > (uint64_t)(c->end - c->p) / least) {
			char why[80];
			snprintf(why, sizeof why, "file ends inside an array of %llu elements",
				 (unsigned long long)kv->n);
			return fail(c, SS_ERR_TRUNCATED, why);
		}
		if (kv->elem != SS_GGUF_STRING) {
			c->p += kv->n * least;
			return 0;
		}
		for (uint64_t i = 0; i < kv->n && !c->rc; i++)
			skip_value(c, SS_GGUF_STRING);
		return c->rc;
	}
	kv->val = c->p;
	if (kv->type == SS_GGUF_STRING)
		kv->val += 8;
	if (kv->type == SS_GGUF_STRING && !need(c, 8))
		memcpy(&kv->n, c->p, 8);
	skip_value(c, kv->type);
	return c->rc;
}

static const char *const type_names[] = {
	"F32", "F16", "Q4_0", "Q4_1", NULL, NULL, "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K",
	"Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
	"IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", NULL, NULL, NULL,
	"TQ1_0", "TQ2_0", NULL, NULL, NULL, "MXFP4", "NVFP4", "Q1_0", "Q2_0",
};

const char *ss_gguf_type_name(uint32_t type)
{
	static _Thread_local char buf[24];
	if (type < sizeof type_names / sizeof *type_names && type_names[type])
		return type_names[type];
	snprintf(buf, sizeof buf, "type %u", type);
	return buf;
}

/* *bytes = the bytes of n elements of a type this reader widens; 0 for
 * others. Returns 0, 1 when the count overflows 64 bits, 2 for a Q8_0 row
 * that is not whole blocks. */
static int type_bytes(uint32_t type, uint64_t n, int64_t ne0, uint64_t *bytes)
{
	*bytes = 0;
	switch (type) {
	case SS_GGML_F32: return ss_ckd_mul(bytes, n, 4);
	case SS_GGML_F16:
	case SS_GGML_BF16: return ss_ckd_mul(bytes, n, 2);
	case SS_GGML_Q8_0: return ne0 % 32 != 0 ? 2 : ss_ckd_mul(bytes, n / 32, 34);
	default: return 0;
	}
}

static int read_tensor(cur *c, ss_gguf_tensor *t, size_t i)
{
	snprintf(c->what, sizeof c->what, "tensor %zu", i);
	uint64_t nn;
	const uint8_t *nm = str(c, &nn);
	t->name = dup_name(c, nm, nn, MAX_NAME);
	if (t->name)
		snprintf(c->what, sizeof c->what, "tensor %zu (%s)", i, t->name);
	uint32_t nd = u32(c);
	if (c->rc)
		return c->rc;
	if (nd < 1 || nd > 4)
		return fail(c, SS_ERR_FORMAT, "n_dims not in 1..4");
	t->n_dims = (int)nd;
	t->numel = 1;
	for (int d = 0; d < 4; d++) {
		uint64_t e = d < t->n_dims ? u64(c) : 1;
		if (c->rc)
			return c->rc;
		/* no dimension or element count a file of 2^63 bytes could hold */
		if (e < 1)
			return fail(c, SS_ERR_FORMAT, "a dimension of 0");
		if (ss_ckd_mul(&t->numel, t->numel, e) || t->numel > (uint64_t)1 << 62)
			return fail(c, SS_ERR_TOO_LARGE, "dimensions too large");
		t->ne[d] = (int64_t)e;
	}
	t->type = u32(c);
	t->offset = u64(c);
	return c->rc;
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name that appears twice among the n at v (sorted in place: a file may
 * declare millions of keys or tensors), or NULL. */
static const char *twice(const char **v, size_t n)
{
	qsort(v, n, sizeof *v, by_str);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(v[i - 1], v[i]))
			return v[i];
	return NULL;
}

/* No key and no tensor name twice: which of two would be meant is
 * unknowable (gguf.cpp refuses both: "duplicate key", "duplicate tensor
 * name"). */
static int check_names(const ss_gguf *g, char *errmsg)
{
	size_t n = g->n_kv > g->n_t ? g->n_kv : g->n_t;
	const char **v = malloc((n + 1) * sizeof *v);
	if (!v)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < g->n_kv; i++)
		v[i] = g->kv[i].key;
	const char *dup = twice(v, g->n_kv);
	int rc = dup ? ss_errf(errmsg, SS_ERR_FORMAT, "%s: key %s appears twice", g->path, dup) : 0;
	for (size_t i = 0; !rc && i < g->n_t; i++)
		v[i] = g->t[i].name;
	if (!rc && (dup = twice(v, g->n_t)))
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: tensor %s appears twice", g->path, dup);
	free(v);
	return rc;
}

int ss_gguf_is(const char *path)
{
	int fd = ss_open_regular(path);
	if (fd < 0)
		return 0;
	char m[4];
	int ok = read(fd, m, 4) == 4 && !memcmp(m, "GGUF", 4);
	close(fd);
	return ok;
}

static int map_file(ss_gguf *g, const char *path, char *errmsg)
{
	int fd = ss_open_regular(path);
	if (fd < 0) {
		int code = fd == -1 && errno == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO;
		return ss_errf(errmsg, code, "%s: %s", path,
			       fd == -2 ? "not a regular file" : strerror(errno));
	}
	struct stat sb;
	if (fstat(fd, &sb) || sb.st_size < 0) {
		close(fd);
		return ss_errf(errmsg, SS_ERR_IO, "%s: %s", path, strerror(errno));
	}
	g->size = (size_t)sb.st_size;
	if (g->size < 24) {
		close(fd);
		return ss_errf(errmsg, g->size >= 4 ? SS_ERR_TRUNCATED : SS_ERR_FORMAT,
			       "%s: %zu bytes: %s", path, g->size,
			       g->size >= 4 ? "shorter than a GGUF header" : "not a GGUF file");
	}
	void *p = mmap(NULL, g->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED)
		return ss_errf(errmsg, SS_ERR_IO, "%s: mmap: %s", path, strerror(e));
	g->map = p;
	return 0;
}

/* Checks that the tensors' data lie in the data section, aligned, whole
 * and without overlapping (sorted by offset). */
static int by_offset(const void *a, const void *b)
{
	uint64_t x = (*(const ss_gguf_tensor *const *)a)->offset;
	uint64_t y = (*(const ss_gguf_tensor *const *)b)->offset;
	return (x > y) - (x < y);
}

static int check_data(ss_gguf *g, char *errmsg)
{
	ss_gguf_tensor **ord = malloc((g->n_t + 1) * sizeof *ord);
	if (!ord)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < g->n_t; i++)
		ord[i] = &g->t[i];
	qsort(ord, g->n_t, sizeof *ord, by_offset);
	int rc = 0;
	uint64_t room = g->size - g->data, prev_end = 0;
	const ss_gguf_tensor *prev = NULL;
	for (size_t i = 0; i < g->n_t && !rc; i++) {
		ss_gguf_tensor *t = ord[i];
		uint64_t nb;
		int bad = type_bytes(t->type, t->numel, t->ne[0], &nb);
		if (bad == 1)
			rc = ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: tensor %s: %llu %s elements: the byte count "
				     "overflows 64 bits", g->path, t->name, (unsigned long long)t->numel,
				     ss_gguf_type_name(t->type));
		else if (bad)
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: tensor %s: %s rows of %lld elements are "
				     "not whole blocks of 32", g->path, t->name, ss_gguf_type_name(t->type),
				     (long long)t->ne[0]);
		else if (t->offset % g->alignment)
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: tensor %s: offset %llu is not a multiple "
				     "of the alignment %u", g->path, t->name,
				     (unsigned long long)t->offset, g->alignment);
		else if (t->offset > room || nb > room - t->offset)
			rc = ss_errf(errmsg, SS_ERR_TRUNCATED, "%s: tensor %s: data [%llu, +%llu) past "
				     "the end of the file (%llu bytes of data)", g->path, t->name,
				     (unsigned long long)t->offset, (unsigned long long)nb,
				     (unsigned long long)room);
		else if (prev && nb && t->offset < prev_end)
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: tensors %s and %s overlap", g->path,
				     prev->name, t->name);
		if (rc)
			break;
		t->nbytes = nb;
		t->offset += g->data;
		if (nb) {
			prev = t;
			prev_end = t->offset - g->data + nb;
		}
	}
	free(ord);
	return rc;
}

int ss_gguf_open(ss_gguf *g, const char *path, char *errmsg)
{
	memset(g, 0, sizeof *g);
	if (!(g->path = strdup(path)))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	int rc = map_file(g, path, errmsg);
	if (rc)
		return rc;
	cur c = {g->map, g->map, g->map + g->size, g->path, errmsg, 0, "header"};
	if (memcmp(g->map, "GGUF", 4))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: not a GGUF file (no GGUF magic)", path);
	c.p += 4;
	g->version = u32(&c);
	if (g->version != 2 && g->version != 3)
		return ss_errf(errmsg, SS_ERR_VERSION, "%s: GGUF version %u is not supported (2, 3%s)",
			       path, g->version,
			       (g->version & 0xffff) == 0 ? "; a big-endian file?" : "");
	uint64_t n_t = u64(&c), n_kv = u64(&c);
	/* a pair takes at least 8+0+4+1 bytes, a tensor 8+0+4+8+4+8 */
	if (n_kv > (g->size - 24) / 13 || n_t > (g->size - 24) / 32)
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: %llu keys and %llu tensors cannot fit in "
			       "%zu bytes", path, (unsigned long long)n_kv, (unsigned long long)n_t,
			       g->size);
	g->kv = calloc(n_kv + 1, sizeof *g->kv);
	g->t = calloc(n_t + 1, sizeof *g->t);
	if (!g->kv || !g->t)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	for (; g->n_kv < n_kv; g->n_kv++) {
		snprintf(c.what, sizeof c.what, "key %zu", g->n_kv);
		if ((rc = read_kv(&c, &g->kv[g->n_kv])))
			return rc;
	}
	for (; g->n_t < n_t; g->n_t++)
		if ((rc = read_tensor(&c, &g->t[g->n_t], g->n_t)))
			return rc;
	if ((rc = check_names(g, errmsg)))
		return rc;
	uint64_t align = 32;
	rc = ss_gguf_get_uint(g, "general.alignment", &align, errmsg);
	if (rc && rc != SS_ERR_NOTFOUND)
		return rc;
	if (align == 0 || align > MAX_ALIGN || (align & (align - 1)))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: general.alignment %llu is not a power of two "
			       "up to %u", path, (unsigned long long)align, MAX_ALIGN);
	g->alignment = (uint32_t)align;
	uint64_t at = (uint64_t)(c.p - c.base);
	g->data = (at + align - 1) / align * align;
	if (g->data > g->size)
		g->data = g->size; /* no data: only tensors of no bytes fit */
	return check_data(g, errmsg);
}

void ss_gguf_close(ss_gguf *g)
{
	if (!g)
		return;
	if (g->map)
		munmap(g->map, g->size);
	for (size_t i = 0; i < g->n_kv; i++)
		free(g->kv[i].key);
	for (size_t i = 0; i < g->n_t; i++)
		free(g->t[i].name);
	/* a failed open leaves the half-read record's names */
	if (g->kv)
		free(g->kv[g->n_kv].key);
	if (g->t)
		free(g->t[g->n_t].name);
	free(g->kv);
	free(g->t);
	free(g->path);
	memset(g, 0, sizeof *g);
}

const ss_gguf_kv *ss_gguf_find_kv(const ss_gguf *g, const char *key)
{
	for (size_t i = 0; i < g->n_kv; i++)
		if (!strcmp(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

static int kv_type_error(const ss_gguf *g, const char *key, const char *want, char *errmsg)
{
	return ss_errf(errmsg, SS_ERR_FORMAT, "%s: %s: not %s", g->path, key, want);
}

int ss_gguf_get_uint(const ss_gguf *g, const char *key, uint64_t *out, char *errmsg)
{
	const ss_gguf_kv *kv = ss_gguf_find_kv(g, key);
	if (!kv)
		return SS_ERR_NOTFOUND;
	const uint8_t *p = kv->val;
	int64_t s;
	switch (kv->type) {
	case SS_GGUF_U8: case SS_GGUF_BOOL: *out = p[0]; return 0;
	case SS_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *out = v; return 0; }
	case SS_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *out = v; return 0; }
	case SS_GGUF_U64: memcpy(out, p, 8); return 0;
	case SS_GGUF_I8: s = (int8_t)p[0]; break;
	case SS_GGUF_I16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
	case SS_GGUF_I32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
	case SS_GGUF_I64: memcpy(&s, p, 8); break;
	default: return kv_type_error(g, key, "an integer", errmsg);
	}
	if (s < 0)
		return kv_type_error(g, key, "a non-negative integer", errmsg);
	*out = (uint64_t)s;
	return 0;
}

int ss_gguf_get_float(const ss_gguf *g, const char *key, double *out, char *errmsg)
{
	const ss_gguf_kv *kv = ss_gguf_find_kv(g, key);
	if (!kv)
		return SS_ERR_NOTFOUND;
	if (kv->type == SS_GGUF_F32) {
		float f;
		memcpy(&f, kv->val, 4);
		*out = f;
	} else if (kv->type == SS_GGUF_F64) {
		memcpy(out, kv->val, 8);
	} else {
		return kv_type_error(g, key, "a float", errmsg);
	}
	return 0;
}

int ss_gguf_get_str(const ss_gguf *g, const char *key, const char **s, size_t *len,
		    char *errmsg)
{
	const ss_gguf_kv *kv = ss_gguf_find_kv(g, key);
	if (!kv)
		return SS_ERR_NOTFOUND;
	if (kv->type != SS_GGUF_STRING)
		return kv_type_error(g, key, "a string", errmsg);
	*s = (const char *)kv->val;
	*len = (size_t)kv->n;
	return 0;
}

int ss_gguf_get_strs(const ss_gguf *g, const char *key, const uint8_t **first, uint64_t *n,
		     char *errmsg)
{
	const ss_gguf_kv *kv = ss_gguf_find_kv(g, key);
	if (!kv)
		return SS_ERR_NOTFOUND;
	if (kv->type != SS_GGUF_ARRAY || kv->elem != SS_GGUF_STRING)
		return kv_type_error(g, key, "an array of strings", errmsg);
	*first = kv->val;
	*n = kv->n;
	return 0;
}

void ss_gguf_str_next(const uint8_t **p, const char **s, size_t *len)
{
	uint64_t n;
	memcpy(&n, *p, 8);
	*s = (const char *)*p + 8;
	*len = (size_t)n;
	*p += 8 + n;
}

const ss_gguf_tensor *ss_gguf_find(const ss_gguf *g, const char *name)
{
	for (size_t i = 0; i < g->n_t; i++)
		if (!strcmp(g->t[i].name, name))
			return &g->t[i];
	return NULL;
}

int ss_gguf_read_f32(const ss_gguf *g, const ss_gguf_tensor *t, uint64_t first, size_t n,
		     float *dst, char *errmsg)
{
	if (first > t->numel || n > t->numel - first)
		return ss_errf(errmsg, SS_ERR_INVALID, "%s: %s: elements [%llu, +%zu) out of range",
			       g->path, t->name, (unsigned long long)first, n);
	const uint8_t *p = g->map + t->offset;
	switch (t->type) {
	case SS_GGML_F32:
		memcpy(dst, p + first * 4, n * 4);
		return 0;
	case SS_GGML_F16:
		ss_to_f32(dst, p + first * 2, SS_DTYPE_F16, n);
		return 0;
	case SS_GGML_BF16:
		ss_to_f32(dst, p + first * 2, SS_DTYPE_BF16, n);
		return 0;
	case SS_GGML_Q8_0:
		/* block_q8_0: f16 d | int8 qs[32]; x = d * q */
		for (size_t i = 0; i < n;) {
			uint64_t e = first + i, b = e / 32;
			const uint8_t *blk = p + b * 34;
			uint16_t h;
			memcpy(&h, blk, 2);
			float d = ss_f16_to_f32(h);
			size_t k = (size_t)(e % 32);
			for (; k < 32 && i < n; k++, i++)
				dst[i] = d * (float)(int8_t)blk[2 + k];
		}
		return 0;
	default:
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: %s: type %s is not supported (F32, F16, "
			       "BF16, Q8_0; re-convert with convert_hf_to_gguf.py --outtype "
			       "f32|f16|bf16|q8_0)", g->path, t->name, ss_gguf_type_name(t->type));
	}
}
