/*
 * pickle.c — restricted unpickler for torch state_dict pickles.
 *
 * A tiny interpreter over the protocol-2 opcodes torch.save emits. Values are
 * plain data (ints, strings, tuples, dicts, ...) plus four inert tags: an
 * allowed global, a storage (from BINPERSID), a tensor view (from REDUCE of
 * _rebuild_tensor_v2) and a dict made by OrderedDict(). Every object lives in
 * one list that is freed at the end, so memo sharing and cycles need no
 * reference counts. Limits bound the work any input can cause.
 * ref: Python Lib/pickletools.py; torch/serialization.py; torch/_utils.py.
 */
#include "model/pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OBJS (1u << 22)   /* objects created, in all */
#define MAX_MEMO (1u << 22)   /* highest memo index */
#define MAX_STACK (1u << 20)  /* stack depth */

enum ptype {
	P_MARK, P_NONE, P_BOOL, P_INT, P_FLOAT, P_STR, P_TUPLE, P_LIST, P_DICT,
	P_GLOBAL, P_STORAGE, P_TENSOR,
};

enum pglobal {
	G_ORDEREDDICT, G_REBUILD_V2, G_FLOAT_STORAGE, G_HALF_STORAGE, G_BF16_STORAGE,
};

typedef struct pobj pobj;
struct pobj {
	enum ptype type;
	int64_t i;          /* INT, BOOL; GLOBAL kind; STORAGE numel */
	double f;
	char *s;            /* STR (NUL-terminated copy); STORAGE key */
	size_t slen;
	pobj **items;       /* TUPLE/LIST items; DICT keys then values interleaved */
	size_t n, cap;
	ss_dtype dtype;     /* STORAGE, TENSOR */
	pobj *storage;      /* TENSOR */
	int64_t offset;     /* TENSOR */
	int ndim;           /* TENSOR */
	int64_t shape[SS_PICKLE_MAXDIM], stride[SS_PICKLE_MAXDIM];
};

typedef struct {
	const uint8_t *p, *end, *start;
	pobj **all;  size_t nall, capall;
	pobj **stack; size_t nstack, capstack;
	pobj **memo; size_t nmemo;
	char *errmsg;
} unpickler;

static int fail(unpickler *u, int code, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(u->errmsg, SS_ERRMSG_MAX, "pickle: ");
	va_start(ap, fmt);
	vsnprintf(u->errmsg + k, SS_ERRMSG_MAX - (size_t)k, fmt, ap);
	va_end(ap);
	return code;
}

static size_t pos(const unpickler *u) { return (size_t)(u->p - u->start); }

static pobj *newobj(unpickler *u, enum ptype t)
{
	if (u->nall >= MAX_OBJS)
		return NULL;
	if (u->nall == u->capall) {
		size_t cap = u->capall ? 2 * u->capall : 256;
		pobj **a = realloc(u->all, cap * sizeof *a);
		if (!a)
			return NULL;
		u->all = a;
		u->capall = cap;
	}
	pobj *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	o->type = t;
	u->all[u->nall++] = o;
	return o;
}

static int push(unpickler *u, pobj *o)
{
	if (!o)
		return fail(u, u->nall >= MAX_OBJS ? SS_ERR_TOO_LARGE : SS_ERR_NOMEM,
		            "out of objects at byte %zu", pos(u));
	if (u->nstack >= MAX_STACK)
		return fail(u, SS_ERR_TOO_LARGE, "stack deeper than %u at byte %zu",
		            MAX_STACK, pos(u));
	if (u->nstack == u->capstack) {
		size_t cap = u->capstack ? 2 * u->capstack : 64;
		pobj **a = realloc(u->stack, cap * sizeof *a);
		if (!a)
			return fail(u, SS_ERR_NOMEM, "out of memory");
		u->stack = a;
		u->capstack = cap;
	}
	u->stack[u->nstack++] = o;
	return 0;
}

static pobj *pop(unpickler *u)
{
	if (u->nstack == 0)
		return NULL;
	pobj *o = u->stack[--u->nstack];
	return o->type == P_MARK ? (u->nstack++, NULL) : o;
}

static int append_item(unpickler *u, pobj *c, pobj *x)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 8;
		pobj **a = realloc(c->items, cap * sizeof *a);
		if (!a)
			return fail(u, SS_ERR_NOMEM, "out of memory");
		c->items = a;
		c->cap = cap;
	}
	c->items[c->n++] = x;
	return 0;
}

/* Index of the topmost MARK, or -1. */
static long find_mark(const unpickler *u)
{
	for (size_t i = u->nstack; i > 0; i--)
		if (u->stack[i - 1]->type == P_MARK)
			return (long)(i - 1);
	return -1;
}

static int need(unpickler *u, size_t n, const char *op)
{
	if ((size_t)(u->end - u->p) < n)
		return fail(u, SS_ERR_FORMAT, "truncated %s argument at byte %zu", op, pos(u));
	return 0;
}

static uint64_t rd_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int memo_put(unpickler *u, uint64_t idx)
{
	if (u->nstack == 0 || u->stack[u->nstack - 1]->type == P_MARK)
		return fail(u, SS_ERR_FORMAT, "PUT with empty stack at byte %zu", pos(u));
	/* Picklers number memo entries 0, 1, ... and each PUT takes 2 bytes
	 * or more, so an index past the pickle's length is not from one; the
	 * memo array is sized by the index, which must not cost more than the
	 * input (a 13-byte pickle asked for 33 MB). */
	if (idx >= MAX_MEMO || idx >= (uint64_t)(u->end - u->start))
		return fail(u, SS_ERR_TOO_LARGE, "memo index %llu too large for a %zu-byte pickle",
		            (unsigned long long)idx, (size_t)(u->end - u->start));
	if (idx >= u->nmemo) {
		size_t n = u->nmemo ? u->nmemo : 64;
		while (n <= idx)
			n *= 2;
		pobj **m = realloc(u->memo, n * sizeof *m);
		if (!m)
			return fail(u, SS_ERR_NOMEM, "out of memory");
		memset(m + u->nmemo, 0, (n - u->nmemo) * sizeof *m);
		u->memo = m;
		u->nmemo = n;
	}
	u->memo[idx] = u->stack[u->nstack - 1];
	return 0;
}

static int memo_get(unpickler *u, uint64_t idx)
{
	if (idx >= u->nmemo || !u->memo[idx])
		return fail(u, SS_ERR_FORMAT, "GET of unset memo %llu at byte %zu",
		            (unsigned long long)idx, pos(u));
	return push(u, u->memo[idx]);
}

static int push_str(unpickler *u, size_t n)
{
	if (need(u, n, "string"))
		return SS_ERR_FORMAT;
	pobj *o = newobj(u, P_STR);
	if (o) {
		o->s = malloc(n + 1);
		if (!o->s)
			return fail(u, SS_ERR_NOMEM, "out of memory");
		memcpy(o->s, u->p, n);
		o->s[n] = 0;
		o->slen = n;
	}
	u->p += n;
	return push(u, o);
}

static int push_int(unpickler *u, int64_t v)
{
	pobj *o = newobj(u, P_INT);
	if (o)
		o->i = v;
	return push(u, o);
}

/* GLOBAL "module\nname\n": only the names torch.save needs for tensors. */
static int op_global(unpickler *u)
{
	const uint8_t *nl1 = memchr(u->p, '\n', (size_t)(u->end - u->p));
	const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(u->end - nl1 - 1)) : NULL;
	if (!nl2)
		return fail(u, SS_ERR_FORMAT, "truncated GLOBAL at byte %zu", pos(u));
	char name[256];
	size_t lm = (size_t)(nl1 - u->p), ln = (size_t)(nl2 - nl1 - 1);
	if (lm + ln + 2 > sizeof name)
		return fail(u, SS_ERR_FORMAT, "refusing global with a %zu-byte name", lm + ln);
	memcpy(name, u->p, lm);
	name[lm] = '.';
	memcpy(name + lm + 1, nl1 + 1, ln);
	name[lm + 1 + ln] = 0;
	for (char *c = name; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '?';
	static const struct { const char *name; enum pglobal g; } allowed[] = {
		{"collections.OrderedDict", G_ORDEREDDICT},
		{"torch._utils._rebuild_tensor_v2", G_REBUILD_V2},
		{"torch.FloatStorage", G_FLOAT_STORAGE},
		{"torch.HalfStorage", G_HALF_STORAGE},
		{"torch.BFloat16Storage", G_BF16_STORAGE},
	};
	for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
		if (!strcmp(name, allowed[i].name)) {
			u->p = nl2 + 1;
			pobj *o = newobj(u, P_GLOBAL);
			if (o)
				o->i = allowed[i].g;
			return push(u, o);
		}
	return fail(u, SS_ERR_FORMAT, "refusing global %s", name);
}

/* Pops the items above the topmost MARK into a new TUPLE or LIST. */
static int pop_to_mark(unpickler *u, enum ptype t, pobj **res)
{
	long m = find_mark(u);
	if (m < 0)
		return fail(u, SS_ERR_FORMAT, "no MARK at byte %zu", pos(u));
	pobj *o = newobj(u, t);
	if (!o)
		return push(u, NULL);
	for (size_t i = (size_t)m + 1; i < u->nstack; i++)
		if (append_item(u, o, u->stack[i]))
			return SS_ERR_NOMEM;
	u->nstack = (size_t)m;
	*res = o;
	return 0;
}

static int op_tuple_n(unpickler *u, size_t n)
{
	if (u->nstack < n)
		return fail(u, SS_ERR_FORMAT, "stack underflow at byte %zu", pos(u));
	for (size_t i = u->nstack - n; i < u->nstack; i++)
		if (u->stack[i]->type == P_MARK)
			return fail(u, SS_ERR_FORMAT, "MARK inside TUPLE%zu at byte %zu", n, pos(u));
	pobj *o = newobj(u, P_TUPLE);
	if (!o)
		return push(u, NULL);
	for (size_t i = u->nstack - n; i < u->nstack; i++)
		if (append_item(u, o, u->stack[i]))
			return SS_ERR_NOMEM;
	u->nstack -= n;
	return push(u, o);
}

static int dict_set(unpickler *u, pobj *d, pobj *k, pobj *v)
{
	int r = append_item(u, d, k);
	return r ? r : append_item(u, d, v);
}

static int int_tuple(const pobj *t, int64_t *v, int *n)
{
	if (!t || t->type != P_TUPLE || t->n > SS_PICKLE_MAXDIM)
		return -1;
	for (size_t i = 0; i < t->n; i++) {
		if (t->items[i]->type != P_INT || t->items[i]->i < 0)
			return -1;
		v[i] = t->items[i]->i;
	}
	*n = (int)t->n;
	return 0;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
 * backward_hooks[, metadata]) → an inert tensor view, bounds-checked. */
static int rebuild_tensor(unpickler *u, pobj *args)
{
	if (args->type != P_TUPLE || args->n < 4 || args->n > 7)
		return fail(u, SS_ERR_FORMAT, "_rebuild_tensor_v2 expects 6 arguments at byte %zu", pos(u));
	pobj *st = args->items[0], *off = args->items[1];
	pobj *t = newobj(u, P_TENSOR);
	if (!t)
		return push(u, NULL);
	int nd2 = 0;
	if (st->type != P_STORAGE || off->type != P_INT || off->i < 0 ||
	    int_tuple(args->items[2], t->shape, &t->ndim) ||
	    int_tuple(args->items[3], t->stride, &nd2) || nd2 != t->ndim)
		return fail(u, SS_ERR_FORMAT, "bad _rebuild_tensor_v2 arguments at byte %zu", pos(u));
	t->storage = st;
	t->dtype = st->dtype;
	t->offset = off->i;
	/* Highest element index the view touches must lie in the storage. */
	int64_t last = t->offset, numel = 1;
	for (int d = 0; d < t->ndim; d++) {
		int64_t span;
		if (__builtin_mul_overflow(numel, t->shape[d], &numel))
			return fail(u, SS_ERR_TOO_LARGE, "tensor size overflows");
		if (t->shape[d] == 0)
			continue;
		if (__builtin_mul_overflow(t->shape[d] - 1, t->stride[d], &span) ||
		    __builtin_add_overflow(last, span, &last))
			return fail(u, SS_ERR_TOO_LARGE, "tensor extent overflows");
	}
	if (numel > 0 && last >= st->i)
		return fail(u, SS_ERR_FORMAT,
		            "tensor view reaches element %lld of storage '%s' with %lld elements",
		            (long long)last, st->s, (long long)st->i);
	return push(u, t);
}

static int op_reduce(unpickler *u)
{
	pobj *args = pop(u), *fn = pop(u);
	if (!args || !fn)
		return fail(u, SS_ERR_FORMAT, "REDUCE with short stack at byte %zu", pos(u));
	if (fn->type != P_GLOBAL)
		return fail(u, SS_ERR_FORMAT, "REDUCE of a non-callable at byte %zu", pos(u));
	if (fn->i == G_ORDEREDDICT) {
		if (args->type != P_TUPLE || args->n != 0)
			return fail(u, SS_ERR_FORMAT, "OrderedDict() with arguments at byte %zu", pos(u));
		return push(u, newobj(u, P_DICT));
	}
	if (fn->i == G_REBUILD_V2)
		return rebuild_tensor(u, args);
	return fail(u, SS_ERR_FORMAT, "refusing to call a storage class at byte %zu", pos(u));
}

/* BINPERSID of ('storage', <StorageClass>, key, location, numel). */
static int op_persid(unpickler *u)
{
	pobj *pid = pop(u);
	if (!pid || pid->type != P_TUPLE || pid->n != 5 ||
	    pid->items[0]->type != P_STR || strcmp(pid->items[0]->s, "storage") ||
	    pid->items[1]->type != P_GLOBAL || pid->items[2]->type != P_STR ||
	    pid->items[4]->type != P_INT || pid->items[4]->i < 0)
		return fail(u, SS_ERR_FORMAT, "unexpected persistent id at byte %zu", pos(u));
	pobj *st = newobj(u, P_STORAGE);
	if (!st)
		return push(u, NULL);
	switch (pid->items[1]->i) {
	case G_FLOAT_STORAGE: st->dtype = SS_DTYPE_F32; break;
	case G_HALF_STORAGE: st->dtype = SS_DTYPE_F16; break;
	case G_BF16_STORAGE: st->dtype = SS_DTYPE_BF16; break;
	default: return fail(u, SS_ERR_FORMAT, "persistent id without a storage class at byte %zu", pos(u));
	}
	st->s = pid->items[2]->s;   /* borrowed: the key string outlives us */
	st->i = pid->items[4]->i;
	return push(u, st);
}

static int run(unpickler *u, pobj **result)
{
	int r = 0;
	while (u->p < u->end) {
		uint8_t op = *u->p++;
		pobj *o = NULL, *a, *b;
		long m;
		switch (op) {
		case 0x80: /* PROTO */
			if ((r = need(u, 1, "PROTO")))
				return r;
			if (*u->p > 5)
				return fail(u, SS_ERR_FORMAT, "protocol %d", *u->p);
			u->p++;
			break;
		case '.': /* STOP */
			if (u->nstack != 1 || u->stack[0]->type == P_MARK)
				return fail(u, SS_ERR_FORMAT, "STOP with %zu items on the stack", u->nstack);
			*result = u->stack[0];
			return 0;
		case '(': r = push(u, newobj(u, P_MARK)); break;
		case ')': r = push(u, newobj(u, P_TUPLE)); break;
		case ']': r = push(u, newobj(u, P_LIST)); break;
		case '}': r = push(u, newobj(u, P_DICT)); break;
		case 'N': r = push(u, newobj(u, P_NONE)); break;
		case 0x88: case 0x89: /* NEWTRUE, NEWFALSE */
			if ((o = newobj(u, P_BOOL)))
				o->i = op == 0x88;
			r = push(u, o);
			break;
		case 't': /* TUPLE */
			if (!(r = pop_to_mark(u, P_TUPLE, &o)))
				r = push(u, o);
			break;
		case 0x85: r = op_tuple_n(u, 1); break;
		case 0x86: r = op_tuple_n(u, 2); break;
		case 0x87: r = op_tuple_n(u, 3); break;
		case 'a': /* APPEND */
			b = pop(u);
			a = u->nstack ? u->stack[u->nstack - 1] : NULL;
			if (!b || !a || a->type != P_LIST)
				return fail(u, SS_ERR_FORMAT, "bad APPEND at byte %zu", pos(u));
			r = append_item(u, a, b);
			break;
		case 'e': /* APPENDS */
			m = find_mark(u);
			if (m < 1 || u->stack[m - 1]->type != P_LIST)
				return fail(u, SS_ERR_FORMAT, "bad APPENDS at byte %zu", pos(u));
			for (size_t i = (size_t)m + 1; i < u->nstack && !r; i++)
				r = append_item(u, u->stack[m - 1], u->stack[i]);
			u->nstack = (size_t)m;
			break;
		case 's': /* SETITEM */
			b = pop(u);
			a = pop(u);
			o = u->nstack ? u->stack[u->nstack - 1] : NULL;
			if (!a || !b || !o || o->type != P_DICT)
				return fail(u, SS_ERR_FORMAT, "bad SETITEM at byte %zu", pos(u));
			r = dict_set(u, o, a, b);
			break;
		case 'u': /* SETITEMS */
			m = find_mark(u);
			if (m < 1 || u->stack[m - 1]->type != P_DICT || (u->nstack - (size_t)m - 1) % 2)
				return fail(u, SS_ERR_FORMAT, "bad SETITEMS at byte %zu", pos(u));
			for (size_t i = (size_t)m + 1; i + 1 < u->nstack && !r; i += 2)
				r = dict_set(u, u->stack[m - 1], u->stack[i], u->stack[i + 1]);
			u->nstack = (size_t)m;
			break;
		case 'c': r = op_global(u); break;
		case 'R': r = op_reduce(u); break;
		case 'Q': r = op_persid(u); break;
		case 'b': /* BUILD: only a dict's state (torch's _metadata), ignored */
			b = pop(u);
			o = u->nstack ? u->stack[u->nstack - 1] : NULL;
			if (!b || !o || o->type != P_DICT)
				return fail(u, SS_ERR_FORMAT, "refusing BUILD of a non-dict at byte %zu", pos(u));
			break;
		case 'q': /* BINPUT */
			if ((r = need(u, 1, "BINPUT")))
				return r;
			r = memo_put(u, *u->p++);
			break;
		case 'r': /* LONG_BINPUT */
			if ((r = need(u, 4, "LONG_BINPUT")))
				return r;
			r = memo_put(u, rd_le(u->p, 4));
			u->p += 4;
			break;
		case 'h': /* BINGET */
			if ((r = need(u, 1, "BINGET")))
				return r;
			r = memo_get(u, *u->p++);
			break;
		case 'j': /* LONG_BINGET */
			if ((r = need(u, 4, "LONG_BINGET")))
				return r;
			r = memo_get(u, rd_le(u->p, 4));
			u->p += 4;
			break;
		case 'X': /* BINUNICODE */
			if ((r = need(u, 4, "BINUNICODE")))
				return r;
			u->p += 4;
			r = push_str(u, (size_t)rd_le(u->p - 4, 4));
			break;
		case 'U': /* SHORT_BINSTRING */
			if ((r = need(u, 1, "SHORT_BINSTRING")))
				return r;
			u->p++;
			r = push_str(u, u->p[-1]);
			break;
		case 'J': /* BININT */
			if ((r = need(u, 4, "BININT")))
				return r;
			r = push_int(u, (int32_t)(uint32_t)rd_le(u->p, 4));
			u->p += 4;
			break;
		case 'K': /* BININT1 */
			if ((r = need(u, 1, "BININT1")))
				return r;
			r = push_int(u, *u->p++);
			break;
		case 'M': /* BININT2 */
			if ((r = need(u, 2, "BININT2")))
				return r;
			r = push_int(u, (int64_t)rd_le(u->p, 2));
			u->p += 2;
			break;
		case 0x8a: { /* LONG1: little-endian two's complement, up to 8 bytes */
			if ((r = need(u, 1, "LONG1")))
				return r;
			size_t n = *u->p++;
			if (n > 8)
				return fail(u, SS_ERR_TOO_LARGE, "LONG1 of %zu bytes at byte %zu", n, pos(u));
			if ((r = need(u, n, "LONG1")))
				return r;
			uint64_t v = n ? rd_le(u->p, (int)n) : 0;
			if (n && n < 8 && (u->p[n - 1] & 0x80))
				v |= ~(uint64_t)0 << (8 * n);
			u->p += n;
			r = push_int(u, (int64_t)v);
			break;
		}
		case 'G': { /* BINFLOAT, big-endian */
			if ((r = need(u, 8, "BINFLOAT")))
				return r;
			uint64_t v = 0;
			for (int i = 0; i < 8; i++)
				v = v << 8 | u->p[i];
			u->p += 8;
			if ((o = newobj(u, P_FLOAT)))
				memcpy(&o->f, &v, sizeof o->f);
			r = push(u, o);
			break;
		}
		default:
			return fail(u, SS_ERR_FORMAT, "opcode 0x%02x not allowed at byte %zu", op, pos(u) - 1);
		}
		if (r)
			return r;
	}
	return fail(u, SS_ERR_FORMAT, "no STOP before end of data");
}

void ss_pickle_tensors_free(ss_pickle_tensor *t, size_t n)
{
	if (!t)
		return;
	for (size_t i = 0; i < n; i++) {
		free(t[i].name);
		free(t[i].storage_key);
	}
	free(t);
}

static int collect(unpickler *u, const pobj *d, ss_pickle_tensor **out, size_t *n)
{
	if (d->type != P_DICT)
		return fail(u, SS_ERR_FORMAT, "top-level object is not a dict");
	ss_pickle_tensor *t = calloc(d->n / 2 + 1, sizeof *t);
	if (!t)
		return fail(u, SS_ERR_NOMEM, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i + 1 < d->n; i += 2) {
		const pobj *key = d->items[i], *v = d->items[i + 1];
		if (key->type != P_STR || v->type != P_TENSOR)
			continue;
		ss_pickle_tensor *e = &t[k++];
		e->name = strdup(key->s);
		e->storage_key = strdup(v->storage->s);
		if (!e->name || !e->storage_key) {
			ss_pickle_tensors_free(t, k);
			return fail(u, SS_ERR_NOMEM, "out of memory");
		}
		e->dtype = v->dtype;
		e->storage_numel = v->storage->i;
		e->offset = v->offset;
		e->ndim = v->ndim;
		memcpy(e->shape, v->shape, sizeof e->shape);
		memcpy(e->stride, v->stride, sizeof e->stride);
	}
	*out = t;
	*n = k;
	return 0;
}

int ss_pickle_load_state_dict(const uint8_t *buf, size_t len,
                              ss_pickle_tensor **out, size_t *n, char *errmsg)
{
	unpickler u = {.p = buf, .start = buf, .end = buf + len, .errmsg = errmsg};
	pobj *res = NULL;
	*out = NULL;
	*n = 0;
	int r = run(&u, &res);
	if (!r)
		r = collect(&u, res, out, n);
	for (size_t i = 0; i < u.nall; i++) {
		pobj *o = u.all[i];
		if (o->type == P_STR)
			free(o->s);
		free(o->items);
		free(o);
	}
	free(u.all);
	free(u.stack);
	free(u.memo);
	return r;
}
