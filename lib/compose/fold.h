/*
 * lib/compose/fold.h — INTERNAL to lib/compose/: the accumulation kernels
 * (fold.c) that compose.c folds every input through, and the one way it
 * names an input array.
 */
#ifndef SS_COMPOSE_FOLD_H
#define SS_COMPOSE_FOLD_H

#include <stddef.h>
#include <stdint.h>

#include "ss.h"

/* An input array: bytes in a storage dtype (d, its row of ss_dtype_info);
 * `direct` when it is f32 and aligned, so the kernels read it in place. A
 * scaled (q8, q4) array's codes are elements e0.. of the whole array (for
 * q4 e0 is even: p points at a byte), whose scales and blocks come along.
 * planes: a byte-shuffled block of that many 2-byte elements (f16, bf16),
 * low bytes at p, high bytes at p + planes, read without unshuffling it
 * first (formats/states.md "shuffle"). */
typedef struct {
	const unsigned char *p;
	ss_dtype t;
	const ss_dtype_info *d;
	size_t es;
	int direct;
	const float *scale;
	size_t e0, row, block;
	size_t planes;
} src_arr;

/* x at p in dtype t; direct when f32 and aligned. */
src_arr src_of(const void *p, ss_dtype t);

enum { OP_COPY, OP_SCALE, OP_AXPY, OP_AXPBY, OP_MAX };
/* y[0..n) op= c·x[off..off+n) (OP_AXPBY: y = d·y + c·x; OP_MAX: y =
 * max(c·x, y)): the one loop every mode goes through, f32, unfused, so
 * every build rounds alike. */
void apply(float *restrict y, src_arr x, size_t off, size_t n, int op, float c, float d);
/* L2 norm of x[off..off+n), accumulated in f64. */
double norm2(src_arr x, size_t off, size_t n);
/* y[0..n) *= c; y[0..n) /= c; Σ x² of n floats in f64. */
void k_mul(float *y, float c, size_t n);
void k_div(float *y, float c, size_t n);
double k_sumsq(const float *x, size_t n);

#endif
