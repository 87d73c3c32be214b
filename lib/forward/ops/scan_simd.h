/*
 * ops/scan_simd.h (internal to libss) — the vector kernels of ops/scan.c written once for two
 * widths: scan.c includes this text once with the AVX2 names and once with
 * the AVX-512 ones (ggml's GGML_F32_VEC habit), so the two cannot drift.
 * The includer defines, and this file undefines at its end:
 *   SIMD_NAME(f)  f with the width's suffix (f##_avx2, f##_avx512)
 *   SIMD_TARGET   the kernels' target attribute
 *   SIMD_W        floats per vector (8, 16): the kernels need N % SIMD_W == 0
 *   vf            the vector type; VSET1(s), VZERO(), VLOAD(p), VSTORE(p, v)
 *                 (unaligned), VFMA(a, b, c) = a·b + c fused, VMUL(a, b),
 *                 VADD(a, b), VHSUM(v) the sum of the lanes (a float)
 * and has ss_scan_head_args (ops/scan.h) and scan_token_grad (scan.c) in
 * scope. No include guard: it is meant to be included more than once.
 */

/* ss_scan_head's recurrence, N % SIMD_W == 0. Two accumulators for the
 * read-out break the FMA dependency chain when N >= 2·SIMD_W. */
SIMD_TARGET
static double SIMD_NAME(scan_head)(const ss_scan_head_args *a)
{
	const int P = a->headdim, N = a->d_state;
	double dtsum = 0.0;
	int64_t t;
	int p, n;

	for (t = 0; t < a->n; t++) {
		const float dt = a->dt[t * a->lddt];
		const vf dA = VSET1(expf(dt * a->A));
		const float *x = a->x + t * a->ldx;
		const float *B = a->B + t * a->ldb;
		dtsum += dt;
		if (a->y && SIMD_W == 16 && N == 8 * SIMD_W) {
			/* d_state 128 with AVX-512: the token's B and C held in 16
			 * registers over the rows; the same operations, in the same
			 * order, as the loop below (24 layers' decode scans of 32
			 * sequences through ss_ssm_scan_cpu, 1 thread: 34 -> 42 GB/s) */
			const float *C = a->C + t * a->ldc;
			float *y = a->y + t * a->ldy;
			vf b[8], c[8];
			for (n = 0; n < 8; n++) {
				b[n] = VLOAD(B + n * SIMD_W);
				c[n] = VLOAD(C + n * SIMD_W);
			}
			for (p = 0; p < P; p++) {
				float *s = a->ssm + (size_t)p * N;
				const vf xdt = VSET1(x[p] * dt);
				vf acc0 = VZERO(), acc1 = VZERO();
				_Pragma("GCC unroll 4") for (n = 0; n < 8; n += 2) {
					vf s0 = VLOAD(s + n * SIMD_W), s1 = VLOAD(s + (n + 1) * SIMD_W);
					_mm_prefetch((const char *)(s + n * SIMD_W) + SCAN_PREFETCH, _MM_HINT_T0);
					_mm_prefetch((const char *)(s + n * SIMD_W) + SCAN_PREFETCH + 64, _MM_HINT_T0);
					s0 = VFMA(xdt, b[n], VMUL(s0, dA));
					s1 = VFMA(xdt, b[n + 1], VMUL(s1, dA));
					VSTORE(s + n * SIMD_W, s0);
					VSTORE(s + (n + 1) * SIMD_W, s1);
					acc0 = VFMA(s0, c[n], acc0);
					acc1 = VFMA(s1, c[n + 1], acc1);
				}
				y[p] = VHSUM(VADD(acc0, acc1)) + a->D * x[p];
			}
		} else if (a->y) {
			const float *C = a->C + t * a->ldc;
			float *y = a->y + t * a->ldy;
			for (p = 0; p < P; p++) {
				float *s = a->ssm + (size_t)p * N;
				const vf xdt = VSET1(x[p] * dt);
				vf acc0 = VZERO(), acc1 = VZERO();
				for (n = 0; n + 2 * SIMD_W <= N; n += 2 * SIMD_W) {
					vf s0 = VLOAD(s + n), s1 = VLOAD(s + n + SIMD_W);
					/* the lines SCAN_PREFETCH bytes ahead (2·SIMD_W floats:
					 * one line for AVX2, two for AVX-512) */
					_mm_prefetch((const char *)(s + n) + SCAN_PREFETCH, _MM_HINT_T0);
					if (SIMD_W == 16)
						_mm_prefetch((const char *)(s + n) + SCAN_PREFETCH + 64, _MM_HINT_T0);
					s0 = VFMA(xdt, VLOAD(B + n), VMUL(s0, dA));
					s1 = VFMA(xdt, VLOAD(B + n + SIMD_W), VMUL(s1, dA));
					VSTORE(s + n, s0);
					VSTORE(s + n + SIMD_W, s1);
					acc0 = VFMA(s0, VLOAD(C + n), acc0);
					acc1 = VFMA(s1, VLOAD(C + n + SIMD_W), acc1);
				}
				for (; n < N; n += SIMD_W) {
					vf s0 = VLOAD(s + n);
					s0 = VFMA(xdt, VLOAD(B + n), VMUL(s0, dA));
					VSTORE(s + n, s0);
					acc0 = VFMA(s0, VLOAD(C + n), acc0);
				}
				y[p] = VHSUM(VADD(acc0, acc1)) + a->D * x[p];
			}
		} else {
			for (p = 0; p < P; p++) {
				float *s = a->ssm + (size_t)p * N;
				const vf xdt = VSET1(x[p] * dt);
				for (n = 0; n < N; n += SIMD_W) {
					vf s0 = VLOAD(s + n);
					s0 = VFMA(xdt, VLOAD(B + n), VMUL(s0, dA));
					VSTORE(s + n, s0);
				}
			}
		}
	}
	return dtsum;
}

/* token_backward_generic (scan.c), N % SIMD_W == 0, the sums in f32 per
 * row. */
SIMD_TARGET
static void SIMD_NAME(token_backward)(scan_token_grad *k)
{
	const int P = k->P, N = k->N;
	const vf dA = VSET1(k->dA);
	vf dda = VZERO();
	double ddt = 0.0, dD = 0.0;
	int p, n;

	for (p = 0; p < P; p++) {
		float *ds = k->ds + (size_t)p * N;
		const float *sr = k->st + (size_t)p * N, *spr = k->sp + (size_t)p * N;
		const vf xdt = VSET1(k->dt * k->x[p]);
		const vf dy = VSET1(k->dy ? k->dy[p] : 0.0f);
		vf acc = VZERO();
		for (n = 0; n < N; n += SIMD_W) {
			vf v = VLOAD(ds + n);
			if (k->dy) {
				v = VFMA(dy, VLOAD(k->C + n), v);
				VSTORE(k->dC + n, VFMA(dy, VLOAD(sr + n),
									   VLOAD(k->dC + n)));
			}
			acc = VFMA(v, VLOAD(k->B + n), acc);
			VSTORE(k->dB + n, VFMA(xdt, v, VLOAD(k->dB + n)));
			dda = VFMA(v, VLOAD(spr + n), dda);
			VSTORE(ds + n, VMUL(v, dA));
		}
		const double dsB = VHSUM(acc);
		if (k->dy) {
			dD += (double)k->dy[p] * k->x[p];
			k->dx[p] += k->D * k->dy[p];
		}
		k->dx[p] += (float)(k->dt * dsB);
		ddt += dsB * k->x[p];
	}
	k->dda = VHSUM(dda), k->ddt = ddt, k->dD = dD;
}

#undef SIMD_NAME
#undef SIMD_TARGET
#undef SIMD_W
#undef vf
#undef VSET1
#undef VZERO
#undef VLOAD
#undef VSTORE
#undef VFMA
#undef VMUL
#undef VADD
#undef VHSUM
