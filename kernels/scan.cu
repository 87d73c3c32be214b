/*
 * scan.cu — the twins (SS_CUDA_OPS) of ss_ssm_scan_cpu and ss_ssm_step_cpu:
 * the selective scan, sequential in time, parallel over (sequence, head,
 * headdim, d_state): a first, simple kernel (the chunked SSD form is
 * ssd.cu). d_state <= 256. Returns 0, SS_ERR_INVALID (dims), or
 * SS_ERR_DEVICE (launch).
 *
 * Block = SCAN_WARPS warps over (sequence, head, a slice of headdim); warp w
 * owns row p of the head's [headdim][d_state] state, lane l the columns
 * n = l + 32j (NJ = ceil(d_state/32) registers). Per token: dA and dt·x[p]
 * are warp-uniform, the state update is elementwise, y[p] = Σ_n s[n]·C[n]
 * is a warp shuffle reduction. The state is read once and written once.
 * Σ dt for logdecay is accumulated in double by the block of slice 0.
 * ref: ss_ssm_scan_cpu (lib/forward/ops/scan.c);
 *      mamba_ssm ops/triton/selective_state_update.py.
 */
#include <math.h>

#include "common.cuh"

#define SCAN_WARPS 8

template <int NJ>
__global__ void scan_kernel(ss_scan_dims d, const int64_t *seq_start, const float *x,
			    ptrdiff_t ldx, const float *B, ptrdiff_t ldb, const float *C,
			    ptrdiff_t ldc, const float *dt, ptrdiff_t lddt, const float *A_log,
			    const float *D, float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy,
			    float *logdecay, ptrdiff_t ld_logdecay)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int s = blockIdx.z, h = blockIdx.y;
	const int p = blockIdx.x * SCAN_WARPS + warp;
	const int N = d.d_state, P = d.headdim;
	const int g = h / (d.nheads / d.ngroups);
	const int64_t r0 = seq_start ? seq_start[s] : s;
	const int64_t n = seq_start ? seq_start[s + 1] - r0 : 1;
	const float A = -expf(A_log[h]);
	const float Dh = D ? D[h] : 0.0f;
	float st[NJ];
	double dtsum = 0.0;

	if (n <= 0)
		return;
	if (p < P) {
		float *sp = ssm + s * ld_ssm + ((int64_t)h * P + p) * N;
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			const int c = lane + 32 * j;
			st[j] = c < N ? sp[c] : 0.0f;
		}
		for (int64_t t = 0; t < n; t++) {
			const int64_t r = r0 + t;
			const float dtv = dt[r * lddt + h];
			const float dA = expf(dtv * A);
			const float xv = x[r * ldx + (int64_t)h * P + p];
			const float xdt = xv * dtv;
			const float *Br = B + r * ldb + (int64_t)g * N;
			float acc = 0.0f;
			if (y) {
				const float *Cr = C + r * ldc + (int64_t)g * N;
#pragma unroll
				for (int j = 0; j < NJ; j++) {
					const int c = lane + 32 * j;
					if (c < N) {
						st[j] = fmaf(xdt, __ldg(Br + c), st[j] * dA);
						acc = fmaf(st[j], __ldg(Cr + c), acc);
					}
				}
				acc = ss_warp_sum(acc);
				if (lane == 0)
					y[r * ldy + (int64_t)h * P + p] = acc + Dh * xv;
			} else {
#pragma unroll
				for (int j = 0; j < NJ; j++) {
					const int c = lane + 32 * j;
					if (c < N)
						st[j] = fmaf(xdt, __ldg(Br + c), st[j] * dA);
				}
			}
		}
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			const int c = lane + 32 * j;
			if (c < N)
				sp[c] = st[j];
		}
	}
	if (logdecay && blockIdx.x == 0 && threadIdx.x == 0) {
		for (int64_t t = 0; t < n; t++)
			dtsum += (double)dt[(r0 + t) * lddt + h];
		float *ld = logdecay + s * ld_logdecay + h;
		*ld = (float)((double)*ld - exp((double)A_log[h]) * dtsum);
	}
}

static int scan_launch(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
		       const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
		       const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
		       const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm, float *y,
		       ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay, cudaStream_t st)
{
	if (!d || nseq < 0 || d->nheads <= 0 || d->headdim <= 0 || d->d_state <= 0 ||
	    d->d_state > 256 || d->ngroups <= 0 || d->nheads % d->ngroups != 0) {
		ss_cuda_note_msg("ssm_scan", "bad dims (d_state must be <= 256)");
		return SS_ERR_INVALID;
	}
	if (nseq == 0)
		return 0;
	const dim3 grid(ss_cdiv(d->headdim, SCAN_WARPS), (unsigned)d->nheads, (unsigned)nseq);
	const int nj = (d->d_state + 31) / 32;
#define SCAN_CASE(J)                                                                          \
	case J:                                                                               \
		scan_kernel<J><<<grid, 32 * SCAN_WARPS, 0, st>>>(*d, seq_start, x, ldx, B, ldb, C, \
								 ldc, dt, lddt, A_log, D, ssm, \
								 ld_ssm, y, ldy, logdecay,    \
								 ld_logdecay);                 \
		break;
	switch (nj) {
	SCAN_CASE(1) SCAN_CASE(2) SCAN_CASE(3) SCAN_CASE(4)
	SCAN_CASE(5) SCAN_CASE(6) SCAN_CASE(7) SCAN_CASE(8)
	}
#undef SCAN_CASE
	return SS_CUDA_LAUNCHED("ssm_scan");
}

extern "C" int ss_ssm_scan_cuda(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
				const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
				const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
				const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm,
				float *y, ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay,
				cudaStream_t st)
{
	if (!seq_start) {
		ss_cuda_note_msg("ssm_scan", "no seq_start");
		return SS_ERR_INVALID;
	}
	return scan_launch(d, seq_start, nseq, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, D, ssm,
			   ld_ssm, y, ldy, logdecay, ld_logdecay, st);
}

extern "C" int ss_ssm_step_cuda(const ss_scan_dims *d, int nseq, const float *x, ptrdiff_t ldx,
				const float *B, ptrdiff_t ldb, const float *C, ptrdiff_t ldc,
				const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
				float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy,
				float *logdecay, ptrdiff_t ld_logdecay, cudaStream_t st)
{
	return scan_launch(d, NULL, nseq, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, D, ssm, ld_ssm,
			   y, ldy, logdecay, ld_logdecay, st);
}
