/*
 * scan1.cu — the twin (SS_CUDA_OPS) of ss_ssm1_scan_cpu, Mamba-1's
 * selective scan: one warp per (sequence, channel), lane k holding state
 * elements k, k+32, ... (d_state <= 256), sequential in t; y's sum over the
 * state is a warp reduction. logdecay as on the CPU (A and Σ dt in
 * double).
 * ref: ss_ssm1_scan_cpu (lib/forward/ops/scan1.c).
 */
#include <math.h>

#include "common.cuh"

#define SCAN1_MAX_STATE SS_SCAN1_MAX_STATE
#define SCAN1_PER_LANE (SCAN1_MAX_STATE / 32)

__global__ void scan1_kernel(int d_inner, int d_state, const int64_t *seq_start, int nseq,
			     const float *x, ptrdiff_t ldx, const float *BC, ptrdiff_t ldbc,
			     const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
			     float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
			     ptrdiff_t ld_logdecay)
{
	const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	const int lane = threadIdx.x % 32;
	if (w >= (int64_t)nseq * d_inner)
		return;
	const int q = (int)(w / d_inner), d = (int)(w % d_inner);
	const int64_t r0 = seq_start ? seq_start[q] : q;
	const int64_t n = seq_start ? seq_start[q + 1] - r0 : 1;
	float A[SCAN1_PER_LANE], s[SCAN1_PER_LANE];
	float *st = ssm + q * ld_ssm + (size_t)d * d_state;
	const float Dd = D ? D[d] : 0.0f;
	double dtsum = 0;

	if (n <= 0)
		return;
#pragma unroll
	for (int j = 0; j < SCAN1_PER_LANE; j++) {
		const int k = lane + 32 * j;
		A[j] = k < d_state ? -expf(A_log[(size_t)d * d_state + k]) : 0.0f;
		s[j] = k < d_state ? st[k] : 0.0f;
	}
	for (int64_t t = r0; t < r0 + n; t++) {
		const float dv = dt[t * lddt + d], xv = x[t * ldx + d], dx = dv * xv;
		const float *B = BC + t * ldbc, *C = B + d_state;
		float acc = 0.0f;
		dtsum += dv;
#pragma unroll
		for (int j = 0; j < SCAN1_PER_LANE; j++) {
			const int k = lane + 32 * j;
			if (k < d_state) {
				s[j] = expf(dv * A[j]) * s[j] + B[k] * dx;
				acc += s[j] * C[k];
			}
		}
		for (int o = 16; o > 0; o /= 2)
			acc += __shfl_xor_sync(0xffffffffu, acc, o);
		if (y && lane == 0)
			y[t * ldy + d] = acc + Dd * xv;
	}
#pragma unroll
	for (int j = 0; j < SCAN1_PER_LANE; j++) {
		const int k = lane + 32 * j;
		if (k < d_state) {
			st[k] = s[j];
			if (logdecay) {
				float *ld = logdecay + q * ld_logdecay + (size_t)d * d_state + k;
				*ld = (float)((double)*ld - exp((double)A_log[(size_t)d * d_state + k]) * dtsum);
			}
		}
	}
}

extern "C" int ss_ssm1_scan_cuda(int d_inner, int d_state, const int64_t *seq_start, int nseq,
				 const float *x, ptrdiff_t ldx, const float *BC, ptrdiff_t ldbc,
				 const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
				 float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy,
				 float *logdecay, ptrdiff_t ld_logdecay, cudaStream_t st)
{
	if (!ss_scan1_args_ok(d_inner, d_state, nseq, x, ldx, BC, ldbc, dt, lddt, A_log, ssm, y, ldy))
		return SS_ERR_INVALID;
	if (nseq == 0 || d_inner == 0)
		return 0;
	const int64_t threads = (int64_t)nseq * d_inner * 32;
	scan1_kernel<<<ss_cdiv(threads, 256), 256, 0, st>>>(d_inner, d_state, seq_start, nseq, x, ldx,
							     BC, ldbc, dt, lddt, A_log, D, ssm,
							     ld_ssm, y, ldy, logdecay, ld_logdecay);
	SS_CUDA_LAUNCHED("ssm1_scan");
	return 0;
}
