/*
 * record_json.c — a record as one line of JSON, for ss-cat(1): every field
 * of the msgpack map, with the known numeric arrays summarised or in full.
 * Apart from the record code (record.c) because only ss-cat renders records
 * and nothing else links this object; in lib/ rather than tools/ because it
 * walks the msgpack map, which is internal to libss (lib/stream/internal.h).
 * Schemas: formats/tokens.md, formats/states.md; JSON: RFC 8259.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "stream/internal.h"

static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.9g", v);
	else
		fputs("null", f);
}

static double val_at(const unsigned char *b, size_t i, int is_i32, ss_dtype t)
{
	if (is_i32) {
		int32_t x;
		memcpy(&x, b + i * 4, 4);
		return x;
	}
	const ss_dtype_info *d = ss_dtype_info_of(t);
	if (t == SS_DTYPE_Q4) /* the 4-bit code (element 2j low nibble of byte j) */
		return (int8_t)(i & 1 ? b[i / 2] & 0xf0 : (unsigned)b[i / 2] << 4) >> 4;
	if (d->scaled) /* the int8 code; scales are rendered apart */
		return (int8_t)b[i];
	float x;
	d->to_f32(&x, b + i * d->size, 1);
	return x;
}

/* Renders a typed numeric bin: summary or in full. */
static void json_array(FILE *f, const void *p, size_t bytes, const char *dtype, const int64_t *shape, int ndim,
		       int full)
{
	ss_dtype t = SS_DTYPE_F32;
	int is_i32 = !strcmp(dtype, "i32");
	if (!is_i32) /* a state's dtypes only: "q8_0" (weights) renders as f32 bytes */
		ss_dtype_parse_for(dtype, SS_DTYPE_STATES, &t, NULL);
	size_t es = is_i32 ? 4 : ss_dtype_size(t);
	size_t n = is_i32 ? bytes / 4 : bytes / es * ss_dtype_info_of(t)->block; /* q4: 2 a byte */
	const unsigned char *b = p;
#define VAL(i) val_at(b, (i), is_i32, t)
	if (full) {
		fputc('[', f);
		for (size_t i = 0; i < n; i++) {
			if (i)
				fputc(',', f);
			if (is_i32)
				fprintf(f, "%d", (int)VAL(i));
			else
				json_num(f, VAL(i));
		}
		fputc(']', f);
		return;
	}
	double mn = INFINITY, mx = -INFINITY, sum = 0;
	for (size_t i = 0; i < n; i++) {
		double x = VAL(i);
		mn = x < mn ? x : mn;
		mx = x > mx ? x : mx;
		sum += x;
	}
	fprintf(f, "{\"dtype\":\"%s\",\"shape\":[", dtype);
	for (int i = 0; i < ndim; i++)
		fprintf(f, "%s%lld", i ? "," : "", (long long)shape[i]);
	fputs("],\"min\":", f);
	json_num(f, n ? mn : NAN);
	fputs(",\"max\":", f);
	json_num(f, n ? mx : NAN);
	fputs(",\"mean\":", f);
	json_num(f, n ? sum / (double)n : NAN);
	fputs(",\"head\":[", f);
	for (size_t i = 0; i < n && i < 4; i++) {
		if (i)
			fputc(',', f);
		if (is_i32)
			fprintf(f, "%d", (int)VAL(i));
		else
			json_num(f, VAL(i));
	}
	fputs("]}", f);
#undef VAL
}

static void json_obj(FILE *f, const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_NIL: fputs("null", f); break;
	case MSGPACK_OBJECT_BOOLEAN: fputs(o->via.boolean ? "true" : "false", f); break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(f, "%llu", (unsigned long long)o->via.u64); break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(f, "%lld", (long long)o->via.i64); break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: json_num(f, o->via.f64); break;
	case MSGPACK_OBJECT_STR: ss_json_str(f, o->via.str.ptr, o->via.str.size); break;
	case MSGPACK_OBJECT_BIN: fprintf(f, "{\"bin_bytes\":%u}", o->via.bin.size); break;
	case MSGPACK_OBJECT_EXT: fprintf(f, "{\"ext_bytes\":%u}", o->via.ext.size); break;
	case MSGPACK_OBJECT_ARRAY:
		fputc('[', f);
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			if (i)
				fputc(',', f);
			json_obj(f, &o->via.array.ptr[i]);
		}
		fputc(']', f);
		break;
	case MSGPACK_OBJECT_MAP:
		fputc('{', f);
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			if (i)
				fputc(',', f);
			const msgpack_object *k = &o->via.map.ptr[i].key;
			if (k->type == MSGPACK_OBJECT_STR)
				ss_json_str(f, k->via.str.ptr, k->via.str.size);
			else {
				fputc('"', f);
				json_obj(f, k);
				fputc('"', f);
			}
			fputc(':', f);
			json_obj(f, &o->via.map.ptr[i].val);
		}
		fputc('}', f);
		break;
	}
}

static int64_t int_of(const msgpack_object *m, const char *k)
{
	const msgpack_object *o = ss_map_get(m, k);
	return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t)o->via.u64 : 0;
}

int ss_record_to_json(const ss_record *rec, FILE *f, int full)
{
	const msgpack_object *m = rec->root;
	int states = !strcmp(rec->format, SS_FORMAT_STATES);
	int64_t L = int_of(m, "n_layer"), H = int_of(m, "nheads"), P = int_of(m, "headdim"),
		N = int_of(m, "d_state"), C = int_of(m, "conv_dim"), K = int_of(m, "d_conv") - 1;
	const msgpack_object *dto = ss_map_get(m, "dtype"), *ao = ss_map_get(m, "arch");
	const int m1 = ao && ao->type == MSGPACK_OBJECT_STR && ao->via.str.size == 6 &&
		       !memcmp(ao->via.str.ptr, "mamba1", 6);
	/* byte-shuffled conv/ssm are rendered unshuffled (a copy) */
	int64_t shuffle = int_of(m, "shuffle");
	char dtype[16] = "f32";
	if (dto && dto->type == MSGPACK_OBJECT_STR && dto->via.str.size < sizeof dtype) {
		memcpy(dtype, dto->via.str.ptr, dto->via.str.size);
		dtype[dto->via.str.size] = 0;
	}
	fprintf(f, "{\"offset\":%llu,", (unsigned long long)rec->offset);
	if (rec->has_rank) {
		fprintf(f, "\"rank\":%d,\"score\":", (int)rec->rank);
		json_num(f, rec->score);
		fputc(',', f);
		if (rec->has_rerank) {
			fputs("\"rerank_score\":", f);
			json_num(f, rec->rerank_score);
			fputc(',', f);
		}
	}
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key, *v = &m->via.map.ptr[i].val;
		if (i)
			fputc(',', f);
		json_obj(f, k);
		fputc(':', f);
		char key[32] = "";
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size < sizeof key)
			memcpy(key, k->via.str.ptr, k->via.str.size);
		int64_t shape[4];
		if (v->type == MSGPACK_OBJECT_BIN && !states && !strcmp(key, "tokens")) {
			shape[0] = v->via.bin.size / 4;
			json_array(f, v->via.bin.ptr, v->via.bin.size, "i32", shape, 1, full);
		} else if (v->type == MSGPACK_OBJECT_BIN && states && !strcmp(key, "logdecay")) {
			/* mamba1: a decay per state element */
			shape[0] = L, shape[1] = H, shape[2] = N;
			json_array(f, v->via.bin.ptr, v->via.bin.size, "f32", shape, m1 ? 3 : 2, full);
		} else if (v->type == MSGPACK_OBJECT_BIN && states && (!strcmp(key, "conv") || !strcmp(key, "ssm"))) {
			int conv = !strcmp(key, "conv");
			if (conv)
				shape[0] = L, shape[1] = C, shape[2] = K;
			else
				shape[0] = L, shape[1] = H, shape[2] = P, shape[3] = N;
			ss_dtype t = SS_DTYPE_F32;
			size_t es = ss_dtype_parse_for(dtype, SS_DTYPE_STATES, &t, NULL) ? 1 : ss_dtype_size(t),
			       n = v->via.bin.size;
			void *plain = shuffle > 0 && es > 1 ? malloc(n ? n : 1) : NULL;
			if (plain)
				ss_unshuffle(plain, v->via.bin.ptr, es, n / es, (size_t)shuffle);
			if (shuffle > 0 && es > 1 && !plain)
				return SS_ERR_NOMEM;
			json_array(f, plain ? plain : v->via.bin.ptr, n, dtype, shape, conv ? 3 : 4, full);
			free(plain);
		} else if (v->type == MSGPACK_OBJECT_BIN && states && !strcmp(key, "conv_scale")) {
			shape[0] = L, shape[1] = v->via.bin.size / 4 / (L ? L : 1);
			json_array(f, v->via.bin.ptr, v->via.bin.size, "f32", shape, 2, full);
		} else if (v->type == MSGPACK_OBJECT_BIN && states && !strcmp(key, "ssm_scale")) {
			shape[0] = L, shape[1] = H, shape[2] = P;
			json_array(f, v->via.bin.ptr, v->via.bin.size, "f32", shape, 3, full);
		} else if (states && !strcmp(key, "provenance") && v->type == MSGPACK_OBJECT_MAP) {
			fputc('{', f);
			for (uint32_t j = 0; j < v->via.map.size; j++) {
				const msgpack_object *pk = &v->via.map.ptr[j].key, *pv = &v->via.map.ptr[j].val;
				if (j)
					fputc(',', f);
				json_obj(f, pk);
				fputc(':', f);
				if (pv->type == MSGPACK_OBJECT_BIN) {
					const int64_t LH = L * H * (m1 ? N : 1);
					shape[0] = L, shape[1] = H, shape[2] = N;
					shape[m1 ? 3 : 2] = LH ? (int64_t)(pv->via.bin.size / 4) / LH : 0;
					json_array(f, pv->via.bin.ptr, pv->via.bin.size, "f32", shape, m1 ? 4 : 3, full);
				} else {
					json_obj(f, pv);
				}
			}
			fputc('}', f);
		} else {
			json_obj(f, v);
		}
	}
	fputc('}', f);
	return ferror(f) ? SS_ERR_IO : 0;
}
