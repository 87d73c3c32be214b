/*
 * record.c — the typed records of the two streams: token records and state
 * records (pack, unpack, validate). Their JSON rendering is record_json.c.
 * Schemas: formats/tokens.md, formats/states.md.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "stream/internal.h"

/* Dims above this are refused as corrupt before any size arithmetic. */
#define DIM_MAX (1 << 24)
/* Elements of all a state's arrays together: refused above this (2^38,
 * 1 TiB of f32) as corrupt, whatever the record holds. */
#define STATE_MAX_ELEMS (UINT64_C(1) << 38)

/* ------------------------------------------------------------ packing */

/* A growable byte buffer that msgpack_packer writes into. */
typedef struct {
	unsigned char *p;
	size_t len, cap;
	int oom;
} buf_t;

static int buf_reserve(buf_t *b, size_t extra)
{
	if (b->len + extra <= b->cap)
		return 0;
	size_t ncap = b->cap ? b->cap : 4096;
	while (ncap < b->len + extra)
		ncap *= 2;
	unsigned char *n = realloc(b->p, ncap);
	if (!n) {
		b->oom = 1;
		return -1;
	}
	b->p = n;
	b->cap = ncap;
	return 0;
}

static int buf_write(void *data, const char *s, size_t n)
{
	buf_t *b = data;
	if (buf_reserve(b, n) != 0)
		return -1;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	return 0;
}

static void pk_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void pk_key(msgpack_packer *pk, const char *k) { pk_str(pk, k); }

/* The arrays of a state record, kept out of the packed bytes: each goes
 * into the zstd stream straight from the state, at byte `at` of the packed
 * msgpack. A q8 or q4 array carries its scales and blocks. */
typedef struct {
	struct {
		size_t at;
		const float *v;
		size_t n;
		ss_dtype t;
		const float *scale;
		size_t row, block;
		size_t shuffle; /* block of the byte shuffle, 0 = none */
		int which;      /* conv 0, ssm 1, else -1 (for ready) */
	} a[6];
	int n;
	uint64_t bytes;
} arrays_t;

/* Packs the header of a bin of n f32 values stored as dtype t and notes
 * where its body goes. q8 and q4 (t) take scale, row and block (else
 * unused). */
static void pk_array(msgpack_packer *pk, buf_t *b, arrays_t *arr, const float *v, size_t n, ss_dtype t,
		     const float *scale, size_t row, size_t block)
{
	size_t bytes = ss_dtype_row_size(t, n);
	msgpack_pack_bin(pk, bytes);
	arr->a[arr->n].at = b->len;
	arr->a[arr->n].v = v;
	arr->a[arr->n].n = n;
	arr->a[arr->n].t = t;
	arr->a[arr->n].scale = scale;
	arr->a[arr->n].row = row;
	arr->a[arr->n].block = block;
	arr->a[arr->n].shuffle = 0;
	arr->a[arr->n].which = -1;
	arr->n++;
	arr->bytes += bytes;
}

/* Compresses one array's body: f32 as it lies in memory (little-endian
 * hosts only, as ss_from_f32), f16/bf16/q8/q4 converted a chunk at a time
 * (a shuffle block at a time when shuffled). ready (may be NULL): asked
 * before each chunk of conv or ssm (ss_writer_put_state_when). */
static int put_array(ss_writer *w, const arrays_t *arr, int k, ss_ready_fn ready, void *arg)
{
	const float *v = arr->a[k].v;
	size_t n = arr->a[k].n, sh = arr->a[k].shuffle;
	ss_dtype t = arr->a[k].t;
	int which = arr->a[k].which;
	if (!ready || which < 0)
		ready = NULL;
	enum { CHUNK = 32768, CHUNK_F32 = 262144 };
	int rc = 0;
	if (t == SS_DTYPE_F32) { /* as it lies, in one piece unless asked chunk by chunk */
		size_t chunk = ready ? CHUNK_F32 : n;
		for (size_t i = 0; i < n && !rc; i += chunk) {
			size_t m = n - i < chunk ? n - i : chunk;
			if (ready && !(rc = ready(arg, which, i + m)) && ss_nonfinite_find(v + i, t, m) < m)
				rc = SS_ERR_INVALID;
			if (!rc)
				rc = ss_writer_add(w, v + i, m * 4);
		}
		return rc;
	}
	size_t chunk = sh ? sh : CHUNK;
	uint16_t *tmp = malloc(chunk * sizeof *tmp), *tsh = sh ? malloc(chunk * sizeof *tsh) : NULL;
	rc = !tmp || (sh && !tsh) ? SS_ERR_NOMEM : 0;
	for (size_t i = 0; i < n && !rc; i += chunk) {
		size_t m = n - i < chunk ? n - i : chunk;
		if (ready && (rc = ready(arg, which, i + m)) != 0)
			break;
		if (ss_dtype_info_of(t)->scaled) {
			ss_quant_from_f32(t, tmp, v + i, arr->a[k].scale, i, m, arr->a[k].row,
					  arr->a[k].block);
		} else {
			ss_from_f32(tmp, t, v + i, m);
			if (ready && ss_nonfinite_find(tmp, t, m) < m) {
				rc = SS_ERR_INVALID;
				break;
			}
		}
		if (sh)
			ss_shuffle(tsh, tmp, ss_dtype_size(t), m, m);
		rc = ss_writer_add(w, sh ? tsh : tmp, ss_dtype_row_size(t, m));
	}
	free(tmp);
	free(tsh);
	return rc;
}

static void pk_header(msgpack_packer *pk, const char *format, int n_keys, const char *id)
{
	msgpack_pack_map(pk, (size_t)n_keys);
	pk_key(pk, "format");
	pk_str(pk, format);
	pk_key(pk, "version");
	msgpack_pack_unsigned_int(pk, SS_STREAM_VERSION);
	pk_key(pk, "id");
	pk_str(pk, id ? id : "");
}

int ss_writer_put_tokens(ss_writer *w, const ss_tokens *t, uint64_t *offset)
{
	buf_t b = {0};
	msgpack_packer pk;
	msgpack_packer_init(&pk, &b, buf_write);
	buf_reserve(&b, 64 + t->text_len + (size_t)t->n_tokens * 4);
	int n_keys = 5 + (t->text != NULL) + (t->tokenizer != NULL);
	pk_header(&pk, SS_FORMAT_TOKENS, n_keys, t->id);
	pk_key(&pk, "n_tokens");
	msgpack_pack_int64(&pk, t->n_tokens);
	if (t->tokenizer) {
		pk_key(&pk, "tokenizer");
		pk_str(&pk, t->tokenizer);
	}
	if (t->text) {
		pk_key(&pk, "text");
		msgpack_pack_str(&pk, t->text_len);
		msgpack_pack_str_body(&pk, t->text, t->text_len);
	}
	pk_key(&pk, "tokens");
	msgpack_pack_bin(&pk, (size_t)t->n_tokens * 4);
	msgpack_pack_bin_body(&pk, t->tokens, (size_t)t->n_tokens * 4);
	int rc = b.oom ? SS_ERR_NOMEM : ss_writer_put(w, b.p, b.len, offset);
	free(b.p);
	return rc;
}

size_t ss_state_ssm_len(const ss_state_dims *d)
{
	return (size_t)d->n_layer * d->nheads * d->headdim * d->d_state;
}

size_t ss_state_conv_len(const ss_state_dims *d)
{
	return (size_t)d->n_layer * d->conv_dim * (d->d_conv - 1);
}

int ss_state_is_mamba1(const ss_state_dims *d)
{
	return !strcmp(d->arch, "mamba1");
}

size_t ss_state_logdecay_len(const ss_state_dims *d)
{
	return (size_t)d->n_layer * d->nheads * (ss_state_is_mamba1(d) ? (size_t)d->d_state : 1);
}

void ss_state_q8_blocks(const ss_state_dims *d, int which, size_t *row, size_t *block)
{
	if (which == 1) {
		*row = *block = (size_t)d->d_state;
	} else {
		*row = (size_t)d->conv_dim * (size_t)(d->d_conv - 1);
		*block = (size_t)d->headdim * (size_t)(d->d_conv - 1);
	}
}

size_t ss_state_q8_n_scales(const ss_state_dims *d, int which)
{
	size_t row, block;
	ss_state_q8_blocks(d, which, &row, &block);
	return ss_q8_n_scales(which ? ss_state_ssm_len(d) : ss_state_conv_len(d), row, block);
}

int ss_state_alloc(ss_state *s, const ss_state_dims *d)
{
	memset(s, 0, sizeof *s);
	s->dims = *d;
	s->dtype = SS_DTYPE_F32;
	s->ssm = calloc(ss_state_ssm_len(d) ? ss_state_ssm_len(d) : 1, sizeof(float));
	s->conv = calloc(ss_state_conv_len(d) ? ss_state_conv_len(d) : 1, sizeof(float));
	s->logdecay = calloc(ss_state_logdecay_len(d) ? ss_state_logdecay_len(d) : 1, sizeof(float));
	if (!s->ssm || !s->conv || !s->logdecay) {
		ss_state_free(s);
		return SS_ERR_NOMEM;
	}
	return 0;
}

int ss_state_copy(ss_state *dst, const ss_state *src)
{
	int rc = ss_state_alloc(dst, &src->dims);
	if (rc)
		return rc;
	ss_state_copy_into(dst, src);
	return 0;
}

void ss_state_copy_into(ss_state *dst, const ss_state *src)
{
	memcpy(dst->ssm, src->ssm, ss_state_ssm_len(&src->dims) * sizeof(float));
	memcpy(dst->conv, src->conv, ss_state_conv_len(&src->dims) * sizeof(float));
	memcpy(dst->logdecay, src->logdecay, ss_state_logdecay_len(&src->dims) * sizeof(float));
	memcpy(dst->fingerprint, src->fingerprint, SS_FINGERPRINT_MAX);
	dst->n_tokens = src->n_tokens;
}

void ss_state_free(ss_state *s)
{
	if (!s)
		return;
	free(s->id);
	free(s->ssm);
	free(s->conv);
	free(s->logdecay);
	free(s->conv_scale);
	free(s->ssm_scale);
	free(s->mode);
	if (s->sources)
		for (int32_t i = 0; i < s->n_sources; i++)
			free(s->sources[i]);
	free(s->sources);
	free(s->weights);
	memset(s, 0, sizeof *s);
}

int ss_state_dims_check(const ss_state_dims *a, const ss_state_dims *b, char *errmsg)
{
	if (strcmp(a->arch, b->arch)) {
		if (errmsg)
			snprintf(errmsg, SS_ERRMSG_MAX, "arch %s vs %s", a->arch, b->arch);
		return SS_ERR_MISMATCH;
	}
#define CHK(f) if (a->f != b->f) { \
		if (errmsg) snprintf(errmsg, SS_ERRMSG_MAX, #f " %d vs %d", (int)a->f, (int)b->f); \
		return SS_ERR_MISMATCH; }
	CHK(n_layer) CHK(nheads) CHK(headdim) CHK(d_state) CHK(conv_dim) CHK(d_conv)
#undef CHK
	return 0;
}

int ss_writer_put_state(ss_writer *w, const ss_state *s, uint64_t *offset)
{
	return ss_writer_put_state_when(w, s, offset, NULL, NULL);
}

/* The map header of state record s (n_keys entries) and its small
 * fields: fingerprint, arch, dims, n_tokens, dtype, provenance, rank. */
static void pk_state_head(msgpack_packer *pk, buf_t *b, arrays_t *arr, const ss_state *s, int n_keys)
{
	const ss_state_dims *d = &s->dims;
	pk_header(pk, SS_FORMAT_STATES, n_keys, s->id);
	pk_key(pk, "fingerprint");
	pk_str(pk, s->fingerprint);
	pk_key(pk, "arch");
	pk_str(pk, d->arch[0] ? d->arch : "mamba2");
#define DIM(f) pk_key(pk, #f); msgpack_pack_int32(pk, d->f);
	DIM(n_layer) DIM(nheads) DIM(headdim) DIM(d_state) DIM(conv_dim) DIM(d_conv)
#undef DIM
	pk_key(pk, "n_tokens");
	msgpack_pack_int64(pk, s->n_tokens);
	pk_key(pk, "dtype");
	pk_str(pk, ss_dtype_name(s->dtype));
	if (s->mode) {
		pk_key(pk, "provenance");
		msgpack_pack_map(pk, s->weights ? 3 : 2);
		pk_key(pk, "mode");
		pk_str(pk, s->mode);
		pk_key(pk, "sources");
		msgpack_pack_array(pk, (size_t)s->n_sources);
		for (int32_t i = 0; i < s->n_sources; i++)
			pk_str(pk, s->sources[i] ? s->sources[i] : "");
		if (s->weights) {
			pk_key(pk, "weights");
			pk_array(pk, b, arr, s->weights, ss_state_logdecay_len(d) * (size_t)s->n_sources,
				 SS_DTYPE_F32, NULL, 0, 0);
		}
	}
	if (s->has_rank) {
		pk_key(pk, "rank");
		msgpack_pack_int32(pk, s->rank);
		pk_key(pk, "score");
		msgpack_pack_double(pk, s->score);
	}
}

/* One frame of the packed bytes b with the arrays' bodies spliced in
 * (put_array), raw or compressed: a state is never copied whole (19 MB
 * for 130m in f32). */
static int put_packed(ss_writer *w, const buf_t *b, const arrays_t *arr, uint64_t *offset,
		      ss_ready_fn ready, void *arg, int raw)
{
	int rc = raw ? ss_writer_begin_raw(w, b->len + arr->bytes, offset)
		       : ss_writer_begin_state(w, b->len + arr->bytes, offset);
	size_t from = 0;
	for (int i = 0; i < arr->n && !rc; i++) {
		rc = ss_writer_add(w, b->p + from, arr->a[i].at - from);
		if (!rc && arr->a[i].which >= 0)
			ss_writer_cut(w);
		if (!rc)
			rc = put_array(w, arr, i, ready, arg);
		from = arr->a[i].at;
	}
	if (!rc)
		rc = ss_writer_add(w, b->p + from, b->len - from);
	if (!rc)
		rc = ss_writer_end(w);
	return rc;
}

/* One writing of s: raw 0, as a zstd frame (f16/bf16 shuffled unless the
 * writer says not), held back by ss_writer_begin_state until its saving is
 * known (SS_WRITE_RAW: nothing written); raw 1, as an uncompressed frame,
 * never shuffled (the shuffle only helps zstd), each array starting a
 * block. */
static int put_state(ss_writer *w, const ss_state *s, uint64_t *offset, ss_ready_fn ready, void *arg, int raw)
{
	const ss_state_dims *d = &s->dims;
	buf_t b = {0};
	arrays_t arr = {0};
	msgpack_packer pk;
	msgpack_packer_init(&pk, &b, buf_write);
	const ss_dtype_info *dt = ss_dtype_info_of(s->dtype);
	if (!dt)
		return SS_ERR_INVALID;
	int q8 = dt->scaled != 0;
	if (q8 && ready)
		return SS_ERR_INVALID; /* the scales come first, from whole arrays */
	/* Records hold finite conv and ssm only (readers refuse others): the
	 * whole arrays now, before a byte is written; with ready, a chunk at
	 * a time as they become final (put_array). */
	if (!ready && (ss_unstorable_find(s->conv, s->dtype, ss_state_conv_len(d)) < ss_state_conv_len(d) ||
		       ss_unstorable_find(s->ssm, s->dtype, ss_state_ssm_len(d)) < ss_state_ssm_len(d)))
		return SS_ERR_INVALID;
	size_t nsc[2] = {0, 0}, qrow[2] = {0, 0}, qblk[2] = {0, 0};
	float *sc[2] = {NULL, NULL};
	for (int a = 0; q8 && a < 2; a++) {
		ss_state_q8_blocks(d, a, &qrow[a], &qblk[a]);
		nsc[a] = ss_state_q8_n_scales(d, a);
		if (!(sc[a] = malloc(nsc[a] * sizeof(float) + 4))) {
			free(sc[0]);
			return SS_ERR_NOMEM;
		}
		ss_quant_scales(s->dtype, sc[a], a ? s->ssm : s->conv,
				a ? ss_state_ssm_len(d) : ss_state_conv_len(d), qrow[a], qblk[a]);
	}
	buf_reserve(&b, 4096); /* after the checks above: they return without freeing b */
	int shuf = dt->shuffled && ss_writer_shuffles(w) && !raw;
	int n_keys = 16 + 2 * q8 + shuf + (s->mode != NULL) + 2 * (s->has_rank != 0);
	pk_state_head(&pk, &b, &arr, s, n_keys);
	/* Small arrays first, conv and ssm last: ss_reader_next_meta relies on
	 * it, and reads q8 scales with the metadata. */
	if (shuf) {
		pk_key(&pk, "shuffle");
		msgpack_pack_uint32(&pk, SS_SHUFFLE_BLOCK);
	}
	if (q8) {
		pk_key(&pk, "conv_scale");
		pk_array(&pk, &b, &arr, sc[0], nsc[0], SS_DTYPE_F32, NULL, 0, 0);
		pk_key(&pk, "ssm_scale");
		pk_array(&pk, &b, &arr, sc[1], nsc[1], SS_DTYPE_F32, NULL, 0, 0);
	}
	pk_key(&pk, "logdecay");
	pk_array(&pk, &b, &arr, s->logdecay, ss_state_logdecay_len(d), SS_DTYPE_F32, NULL, 0, 0);
	pk_key(&pk, "conv");
	pk_array(&pk, &b, &arr, s->conv, ss_state_conv_len(d), s->dtype, sc[0], qrow[0], qblk[0]);
	arr.a[arr.n - 1].which = 0;
	pk_key(&pk, "ssm");
	pk_array(&pk, &b, &arr, s->ssm, ss_state_ssm_len(d), s->dtype, sc[1], qrow[1], qblk[1]);
	arr.a[arr.n - 1].which = 1;
	if (shuf)
		arr.a[arr.n - 1].shuffle = arr.a[arr.n - 2].shuffle = SS_SHUFFLE_BLOCK;
	int rc = b.oom ? SS_ERR_NOMEM : put_packed(w, &b, &arr, offset, ready, arg, raw);
	free(b.p);
	free(sc[0]);
	free(sc[1]);
	return rc;
}

int ss_writer_put_state_when(ss_writer *w, const ss_state *s, uint64_t *offset, ss_ready_fn ready, void *arg)
{
	int rc = put_state(w, s, offset, ready, arg, 0);
	return rc == SS_WRITE_RAW ? put_state(w, s, offset, ready, arg, 1) : rc;
}

/* ------------------------------------------------------------ unpacking */

static char *dup_str(const msgpack_object *o)
{
	char *s = malloc(o->via.str.size + 1);
	if (s) {
		memcpy(s, o->via.str.ptr, o->via.str.size);
		s[o->via.str.size] = 0;
	}
	return s;
}

static int get_str(const msgpack_object *m, const char *k, int required, const msgpack_object **out, char *errmsg)
{
	*out = ss_map_get(m, k);
	if (!*out)
		return required ? ss_errf(errmsg, SS_ERR_FORMAT, "missing field \"%s\"", k) : 0;
	if ((*out)->type != MSGPACK_OBJECT_STR)
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"%s\" is not a string", k);
	return 0;
}

static int get_int(const msgpack_object *m, const char *k, int64_t lo, int64_t hi, int64_t *out, char *errmsg)
{
	const msgpack_object *o = ss_map_get(m, k);
	if (!o)
		return ss_errf(errmsg, SS_ERR_FORMAT, "missing field \"%s\"", k);
	int64_t v;
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
		v = (int64_t)o->via.u64;
	else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		v = o->via.i64;
	else
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"%s\" is not an integer", k);
	if (v < lo || v > hi)
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"%s\" = %lld is out of range [%lld, %lld]", k, (long long)v,
			    (long long)lo, (long long)hi);
	*out = v;
	return 0;
}

static int get_bin(const msgpack_object *m, const char *k, size_t bytes, const msgpack_object **out, char *errmsg)
{
	*out = ss_map_get(m, k);
	if (!*out)
		return ss_errf(errmsg, SS_ERR_FORMAT, "missing field \"%s\"", k);
	if ((*out)->type != MSGPACK_OBJECT_BIN)
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"%s\" is not a bin", k);
	if ((*out)->via.bin.size != bytes)
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"%s\" has %u bytes, expected %zu", k, (*out)->via.bin.size, bytes);
	return 0;
}

/* The first key of map m that an earlier key repeats, or NULL: a map
 * with one key twice says two things, and readers that look keys up
 * (ss_map_get: the first) and readers that walk the map in order would
 * each believe another. */
static const msgpack_object *dup_key(const msgpack_object *m)
{
	for (uint32_t i = 1; i < m->via.map.size; i++)
		for (uint32_t j = 0; j < i; j++) {
			const msgpack_object *a = &m->via.map.ptr[i].key, *b = &m->via.map.ptr[j].key;
			if (a->type == MSGPACK_OBJECT_STR && b->type == MSGPACK_OBJECT_STR &&
			    a->via.str.size == b->via.str.size && !memcmp(a->via.str.ptr, b->via.str.ptr, a->via.str.size))
				return a;
		}
	return NULL;
}

static int check_format(const ss_record *rec, const char *want, char *errmsg)
{
	if (strcmp(rec->format, want))
		return ss_errf(errmsg, SS_ERR_FORMAT, "expected a %s record, found %s", want, rec->format);
	const msgpack_object *d = dup_key(rec->root);
	if (d)
		return ss_errf(errmsg, SS_ERR_FORMAT, "key \"%.*s\" appears twice", (int)(d->via.str.size > 64 ? 64 : d->via.str.size),
			       d->via.str.ptr);
	return 0;
}

/* 0 when the n elements of dtype t (f32, f16, bf16) at p are finite, else
 * SS_ERR_FORMAT naming field and the first element that is not. */
static int check_finite(const void *p, ss_dtype t, size_t n, const char *field, char *errmsg)
{
	size_t i = ss_nonfinite_find(p, t, n);
	if (i == n)
		return 0;
	float v;
	ss_to_f32(&v, (const unsigned char *)p + i * ss_dtype_size(t), t, 1);
	return ss_errf(errmsg, SS_ERR_FORMAT, "field \"%s\": element %zu is %g, not finite", field, i, (double)v);
}

void ss_tokens_free(ss_tokens *t)
{
	if (!t)
		return;
	free(t->id);
	free(t->tokens);
	free(t->text);
	free(t->tokenizer);
	memset(t, 0, sizeof *t);
}

int ss_record_tokens(const ss_record *rec, ss_tokens *out, char *errmsg)
{
	memset(out, 0, sizeof *out);
	const msgpack_object *m = rec->root, *id, *text, *tok, *toks;
	int64_t n;
	int rc;
	if ((rc = check_format(rec, SS_FORMAT_TOKENS, errmsg)) ||
	    (rc = get_str(m, "id", 1, &id, errmsg)) ||
	    (rc = get_int(m, "n_tokens", 0, INT32_MAX, &n, errmsg)) ||
	    (rc = get_str(m, "text", 0, &text, errmsg)) ||
	    (rc = get_str(m, "tokenizer", 0, &tok, errmsg)) ||
	    (rc = get_bin(m, "tokens", (size_t)n * 4, &toks, errmsg)))
		return rc;
	out->n_tokens = n;
	out->id = dup_str(id);
	out->tokens = malloc((size_t)n * 4 + 4);
	if (text) {
		out->text = dup_str(text);
		out->text_len = text->via.str.size;
	}
	if (tok)
		out->tokenizer = dup_str(tok);
	if (!out->id || !out->tokens || (text && !out->text) || (tok && !out->tokenizer)) {
		ss_tokens_free(out);
		return SS_ERR_NOMEM;
	}
	memcpy(out->tokens, toks->via.bin.ptr, (size_t)n * 4);
	return 0;
}

/* Reads a q8 or q4 record's "conv_scale" and "ssm_scale" into s (dims and
 * dtype set): exactly the count of its dims' blocks, each in [0, FLT_MAX/C]
 * with C 128 for q8 (a byte reads as -128 .. 127) and 8 for q4 (a nibble
 * reads as -8 .. 7): every code times its scale is finite. */
static int q8_scales(const msgpack_object *m, ss_state *s, char *errmsg)
{
	static const char *const key[2] = {"conv_scale", "ssm_scale"};
	const int c = s->dtype == SS_DTYPE_Q4 ? 8 : 128;
	for (int a = 0; a < 2; a++) {
		size_t n = ss_state_q8_n_scales(&s->dims, a);
		const msgpack_object *o;
		int rc = get_bin(m, key[a], n * 4, &o, errmsg);
		if (rc)
			return rc;
		float *v = malloc(n * 4 + 4);
		if (!v)
			return SS_ERR_NOMEM;
		memcpy(v, o->via.bin.ptr, n * 4);
		*(a ? &s->ssm_scale : &s->conv_scale) = v;
		for (size_t i = 0; i < n; i++)
			if (!(v[i] >= 0 && v[i] <= FLT_MAX / c))
				return ss_errf(errmsg, SS_ERR_FORMAT, "field \"%s\": scale %zu is %g, not in "
					       "[0, %g] (FLT_MAX/%d: code x scale must be finite)", key[a], i,
					       (double)v[i], (double)(FLT_MAX / c), c);
	}
	return 0;
}

/* The header of a state record: format, id, fingerprint, arch, dtype,
 * n_tokens and dims into s (zeroed first), the dims checked for an absurd
 * total size. s->id is the one allocation (ss_state_free frees it). */
static int meta_header(const ss_record *rec, ss_state *s, char *errmsg)
{
	const msgpack_object *m = rec->root, *id, *fp, *arch, *dt;
	int64_t v[6], ntok;
	static const char *const dimk[6] = { "n_layer", "nheads", "headdim", "d_state", "conv_dim", "d_conv" };
	int rc;
	memset(s, 0, sizeof *s);
	if ((rc = check_format(rec, SS_FORMAT_STATES, errmsg)) ||
	    (rc = get_str(m, "id", 1, &id, errmsg)) ||
	    (rc = get_str(m, "fingerprint", 1, &fp, errmsg)) ||
	    (rc = get_str(m, "arch", 1, &arch, errmsg)) ||
	    (rc = get_str(m, "dtype", 1, &dt, errmsg)) ||
	    (rc = get_int(m, "n_tokens", 0, INT64_MAX, &ntok, errmsg)))
		return rc;
	for (int i = 0; i < 6; i++)
		if ((rc = get_int(m, dimk[i], i == 5 ? 2 : 1, DIM_MAX, &v[i], errmsg)))
			return rc;
	if (fp->via.str.size >= SS_FINGERPRINT_MAX)
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"fingerprint\" is too long");
	if (arch->via.str.size >= sizeof s->dims.arch)
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"arch\" is too long");
	memcpy(s->fingerprint, fp->via.str.ptr, fp->via.str.size);
	memcpy(s->dims.arch, arch->via.str.ptr, arch->via.str.size);
	s->dims.n_layer = (int32_t)v[0];
	s->dims.nheads = (int32_t)v[1];
	s->dims.headdim = (int32_t)v[2];
	s->dims.d_state = (int32_t)v[3];
	s->dims.conv_dim = (int32_t)v[4];
	s->dims.d_conv = (int32_t)v[5];
	/* Every array's f32 byte size, with each product checked, must be
	 * sane, and the arrays present must fit the record: later size
	 * arithmetic (ss_state_*_len times 4) then cannot overflow or wrap. */
	if (ss_state_is_mamba1(&s->dims) && (v[2] != 1 || v[4] != v[1]))
		return ss_errf(errmsg, SS_ERR_FORMAT, "a mamba1 state has headdim 1 and conv_dim = nheads "
			       "(d_inner), not headdim %lld, conv_dim %lld, nheads %lld", (long long)v[2],
			       (long long)v[4], (long long)v[1]);
	uint64_t ssm_n, conv_n, ld_n, lh_n, bytes;
	if (ss_ckd_mul(&lh_n, (uint64_t)v[0], (uint64_t)v[1]) ||
	    ss_ckd_mul(&ld_n, lh_n, (uint64_t)(ss_state_is_mamba1(&s->dims) ? v[3] : 1)) ||
	    ss_ckd_mul(&ssm_n, lh_n, (uint64_t)v[2]) || ss_ckd_mul(&ssm_n, ssm_n, (uint64_t)v[3]) ||
	    ss_ckd_mul(&conv_n, (uint64_t)v[0], (uint64_t)v[4]) || ss_ckd_mul(&conv_n, conv_n, (uint64_t)(v[5] - 1)) ||
	    __builtin_add_overflow(ssm_n, conv_n, &bytes) || __builtin_add_overflow(bytes, ld_n, &bytes) ||
	    bytes > STATE_MAX_ELEMS)
		return ss_errf(errmsg, SS_ERR_FORMAT, "dims declare an absurd state size (n_layer %lld, nheads %lld, "
			       "headdim %lld, d_state %lld, conv_dim %lld, d_conv %lld)", (long long)v[0],
			       (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5]);
	s->n_tokens = ntok;
	char dts[16] = {0};
	memcpy(dts, dt->via.str.ptr, dt->via.str.size < 15 ? dt->via.str.size : 15);
	if (ss_dtype_parse_for(dts, SS_DTYPE_STATES, &s->dtype, NULL) != 0)
		return ss_errf(errmsg, SS_ERR_FORMAT, "unknown dtype \"%s\"", dts);
	s->id = dup_str(id);
	return s->id ? 0 : SS_ERR_NOMEM;
}

/* rank and score: an annotation frame's, else the record's own keys. */
static int meta_rank(const ss_record *rec, ss_state *s, char *errmsg)
{
	const msgpack_object *m = rec->root, *rk = ss_map_get(m, "rank"), *sc = ss_map_get(m, "score");
	if (rec->has_rank) {
		s->has_rank = 1;
		s->rank = rec->rank;
		s->score = rec->score;
	} else if (rk && sc) {
		int64_t r;
		int rc = get_int(m, "rank", 0, INT32_MAX, &r, errmsg);
		if (rc)
			return rc;
		if (sc->type != MSGPACK_OBJECT_FLOAT64 && sc->type != MSGPACK_OBJECT_FLOAT32)
			return ss_errf(errmsg, SS_ERR_FORMAT, "field \"score\" is not a float");
		s->has_rank = 1;
		s->rank = (int32_t)r;
		s->score = sc->via.f64;
	}
	return 0;
}

/* logdecay (copied; each element <= 0), the q8/q4 scales, the sizes of
 * conv and ssm whenever present (required by the decoders that read them;
 * ss_reader_next_meta cuts them off) and shuffle. */
static int meta_arrays(const msgpack_object *m, ss_state *s, char *errmsg)
{
	size_t nld = ss_state_logdecay_len(&s->dims);
	const msgpack_object *ld;
	int rc = get_bin(m, "logdecay", nld * 4, &ld, errmsg);
	if (rc)
		return rc;
	if (!(s->logdecay = malloc(nld * 4)))
		return SS_ERR_NOMEM;
	memcpy(s->logdecay, ld->via.bin.ptr, nld * 4);
	for (size_t i = 0; i < nld; i++)
		if (!(s->logdecay[i] <= 0)) /* -inf is a decay to 0: a long document */
			return ss_errf(errmsg, SS_ERR_FORMAT, "field \"logdecay\": element %zu is %g, not <= 0",
				       i, (double)s->logdecay[i]);
	if (ss_dtype_info_of(s->dtype)->scaled && (rc = q8_scales(m, s, errmsg)))
		return rc;
	static const char *const arr[2] = {"conv", "ssm"};
	for (int a = 0; a < 2; a++) {
		const msgpack_object *o;
		size_t n = a ? ss_state_ssm_len(&s->dims) : ss_state_conv_len(&s->dims);
		if (ss_map_get(m, arr[a]) &&
		    (rc = get_bin(m, arr[a], ss_dtype_row_size(s->dtype, n), &o, errmsg)))
			return rc;
	}
	if (ss_map_get(m, "shuffle")) {
		int64_t sh;
		if ((rc = get_int(m, "shuffle", 1, SS_SHUFFLE_MAX, &sh, errmsg)))
			return rc;
		s->shuffle = (int32_t)sh;
	}
	return 0;
}

/* A composed state's provenance map (prov): mode, sources and, when
 * present, weights [logdecay elements][sources], finite. */
static int meta_provenance(const msgpack_object *prov, ss_state *s, char *errmsg)
{
	const msgpack_object *mode, *src, *wts;
	if (prov->type != MSGPACK_OBJECT_MAP)
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"provenance\" is not a map");
	const msgpack_object *d = dup_key(prov);
	if (d)
		return ss_errf(errmsg, SS_ERR_FORMAT, "key \"provenance.%.*s\" appears twice",
			       (int)(d->via.str.size > 64 ? 64 : d->via.str.size), d->via.str.ptr);
	int rc = get_str(prov, "mode", 1, &mode, errmsg);
	if (rc)
		return rc;
	src = ss_map_get(prov, "sources");
	if (!src || src->type != MSGPACK_OBJECT_ARRAY)
		return ss_errf(errmsg, SS_ERR_FORMAT, "field \"provenance.sources\" is not an array");
	s->mode = dup_str(mode);
	s->n_sources = (int32_t)src->via.array.size;
	s->sources = calloc(s->n_sources ? (size_t)s->n_sources : 1, sizeof(char *));
	if (!s->mode || !s->sources)
		return SS_ERR_NOMEM;
	for (int32_t i = 0; i < s->n_sources; i++) {
		if (src->via.array.ptr[i].type != MSGPACK_OBJECT_STR)
			return ss_errf(errmsg, SS_ERR_FORMAT, "provenance source %d is not a string", (int)i);
		if (!(s->sources[i] = dup_str(&src->via.array.ptr[i])))
			return SS_ERR_NOMEM;
	}
	if (!ss_map_get(prov, "weights"))
		return 0;
	size_t nw = ss_state_logdecay_len(&s->dims) * (size_t)s->n_sources;
	if ((rc = get_bin(prov, "weights", nw * 4, &wts, errmsg)))
		return rc;
	if (!(s->weights = malloc(nw * 4 + 4)))
		return SS_ERR_NOMEM;
	memcpy(s->weights, wts->via.bin.ptr, nw * 4);
	return check_finite(s->weights, SS_DTYPE_F32, nw, "provenance.weights", errmsg);
}

/* Decodes all but the big arrays. */
static int state_meta(const ss_record *rec, ss_state *s, char *errmsg)
{
	const msgpack_object *prov = ss_map_get(rec->root, "provenance");
	int rc = meta_header(rec, s, errmsg);
	if (!rc && !(rc = meta_rank(rec, s, errmsg)) && !(rc = meta_arrays(rec->root, s, errmsg)) && prov)
		rc = meta_provenance(prov, s, errmsg);
	if (rc)
		ss_state_free(s);
	return rc;
}

int ss_record_state_meta(const ss_record *rec, ss_state *out, char *errmsg)
{
	return state_meta(rec, out, errmsg);
}

/* The record's conv and ssm bins, checked against the dims (s decoded). */
static int raw_arrays(const ss_record *rec, const ss_state *s, const void **conv, const void **ssm, char *errmsg)
{
	const msgpack_object *cv, *sm;
	int rc;
	if ((rc = get_bin(rec->root, "conv", ss_dtype_row_size(s->dtype, ss_state_conv_len(&s->dims)),
			  &cv, errmsg)) ||
	    (rc = get_bin(rec->root, "ssm", ss_dtype_row_size(s->dtype, ss_state_ssm_len(&s->dims)),
			  &sm, errmsg)))
		return rc;
	*conv = cv->via.bin.ptr;
	*ssm = sm->via.bin.ptr;
	return 0;
}

int ss_record_state_view(const ss_record *rec, ss_state *s, const void **conv, const void **ssm, char *errmsg)
{
	int rc = state_meta(rec, s, errmsg);
	if (rc)
		return rc;
	if (s->shuffle && ss_dtype_size(s->dtype) > 1) {
		ss_state_free(s);
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "conv and ssm are byte-shuffled: no view in place");
	}
	if ((rc = raw_arrays(rec, s, conv, ssm, errmsg)) ||
	    (!ss_dtype_info_of(s->dtype)->scaled &&
	     ((rc = check_finite(*conv, s->dtype, ss_state_conv_len(&s->dims), "conv", errmsg)) ||
	      (rc = check_finite(*ssm, s->dtype, ss_state_ssm_len(&s->dims), "ssm", errmsg)))))
		ss_state_free(s);
	return rc;
}

int ss_record_state(const ss_record *rec, ss_state *s, char *errmsg)
{
	const void *conv, *ssm;
	int rc = state_meta(rec, s, errmsg);
	if (!rc && (rc = raw_arrays(rec, s, &conv, &ssm, errmsg)))
		ss_state_free(s);
	if (rc)
		return rc;
	size_t nc = ss_state_conv_len(&s->dims), ns = ss_state_ssm_len(&s->dims);
	s->conv = malloc(nc * 4 + 4);
	s->ssm = malloc(ns * 4 + 4);
	if (!s->conv || !s->ssm) {
		ss_state_free(s);
		return SS_ERR_NOMEM;
	}
	if (s->shuffle && ss_dtype_size(s->dtype) > 1) { /* unshuffled into a scratch copy, then widened */
		size_t es = ss_dtype_size(s->dtype);
		unsigned char *tmp = malloc((nc > ns ? nc : ns) * es + 1);
		if (!tmp) {
			ss_state_free(s);
			return SS_ERR_NOMEM;
		}
		ss_unshuffle(tmp, conv, es, nc, (size_t)s->shuffle);
		ss_to_f32(s->conv, tmp, s->dtype, nc);
		ss_unshuffle(tmp, ssm, es, ns, (size_t)s->shuffle);
		ss_to_f32(s->ssm, tmp, s->dtype, ns);
		free(tmp);
	} else if (ss_dtype_info_of(s->dtype)->scaled) { /* finite: codes times scales the decoder bounded */
		size_t row, block;
		ss_state_q8_blocks(&s->dims, 0, &row, &block);
		ss_quant_to_f32(s->dtype, s->conv, conv, s->conv_scale, 0, nc, row, block);
		ss_state_q8_blocks(&s->dims, 1, &row, &block);
		ss_quant_to_f32(s->dtype, s->ssm, ssm, s->ssm_scale, 0, ns, row, block);
		return 0;
	} else {
		ss_to_f32(s->conv, conv, s->dtype, nc);
		ss_to_f32(s->ssm, ssm, s->dtype, ns);
	}
	/* in f32: f16 and bf16 widen non-finite to non-finite, nothing else */
	if ((rc = check_finite(s->conv, SS_DTYPE_F32, nc, "conv", errmsg)) ||
	    (rc = check_finite(s->ssm, SS_DTYPE_F32, ns, "ssm", errmsg)))
		ss_state_free(s);
	return rc;
}

int ss_record_check(const ss_record *rec, char *errmsg)
{
	int rc;
	if (!strcmp(rec->format, SS_FORMAT_TOKENS)) {
		ss_tokens t;
		if ((rc = ss_record_tokens(rec, &t, errmsg)) == 0)
			ss_tokens_free(&t);
		return rc;
	}
	ss_state s;
	if ((rc = rec->meta ? state_meta(rec, &s, errmsg) : ss_record_state(rec, &s, errmsg)) == 0)
		ss_state_free(&s);
	return rc;
}
