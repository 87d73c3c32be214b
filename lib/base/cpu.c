/* cpu.c — CPU features probed at run time (base/internal.h): the build targets x86-64-v2, and
 * the kernels that need more (F16C, AVX2, AVX-512) ask here before they run. */
#include "base/internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
int ss_cpu_f16c(void)
{
	/* cpuid and xgetbv rather than __builtin_cpu_supports("f16c"), which
	 * clang (14) does not know: make fuzz builds lib/ with clang */
	static int cached = -1; /* threads may race to fill it: atomic, same value */
	int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (v < 0) {
		unsigned a, b, c, d, lo = 0, hi = 0;
		int avx = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && (c & bit_AVX) && (c & bit_F16C);
		if (avx)
			__asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		v = avx && (lo & 6) == 6; /* the OS saves the xmm and ymm registers */
		(void)hi;
		__atomic_store_n(&cached, v, __ATOMIC_RELAXED);
	}
	return v;
}
#else
int ss_cpu_f16c(void)
{
	return 0;
}
#endif
