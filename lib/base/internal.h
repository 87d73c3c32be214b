/*
 * lib/base/internal.h — INTERNAL to libss: the bottom layer every folder of lib/ may include.
 * The checked multiply of the readers and the CPU features the kernels probe; errors
 * (ss_strerror, ss_errf) and ss_open_regular are public, in ss.h.
 */
#ifndef SS_BASE_INTERNAL_H
#define SS_BASE_INTERNAL_H

#include <stdint.h>

/* *r = a * b, a size or count computed from a file's fields. Returns 1
 * (true) when the product does not fit in 64 bits (*r then holds it
 * modulo 2^64), else 0: C23's ckd_mul for uint64_t. The one checked
 * multiply of the readers (GGUF, safetensors, state dims, plan frames,
 * llama.cpp blobs): a product of a file's values is never used unchecked. */
static inline int ss_ckd_mul(uint64_t *r, uint64_t a, uint64_t b)
{
	return __builtin_mul_overflow(a, b, r);
}

/* 1 when the CPU has AVX and F16C and the OS saves their registers (x86-64
 * at run time), else 0: the f16 kernels of stream/dtype.c, compose/compose.c and forward/ops. */
int ss_cpu_f16c(void);

#endif
