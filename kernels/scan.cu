/*
 * scan.cu — the selective scan, sequential in time: a first, simple kernel
 * (the chunked SSD form is ssd.cu).
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

#include "scan.cuh"

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

/* ------------------------------------------------------------- backward */

#define SCANB_WARPS 4

/* One token of the forward recurrence on a lane's columns of row p. */
template <int NJ>
__device__ __forceinline__ void scan_row_step(float *st, float a, float xdt, const float *Br,
					      int lane, int N)
{
#pragma unroll
	for (int j = 0; j < NJ; j++) {
		const int c = lane + 32 * j;
		if (c < N)
			st[j] = fmaf(xdt, __ldg(Br + c), st[j] * a);
	}
}

/* The reverse recurrence of ss_ssm_scan_backward_cpu, laid out as
 * scan_kernel: warp w of the block owns row p of head h's state in
 * sequence s, lane l its columns l + 32j. A first pass forward stores the
 * row's state at the start of each chunk of SS_CUDA_SCAN_CHUNK tokens in
 * work; then, last chunk first, the chunk's states are recomputed into
 * registers/local memory and walked backwards. Per token the row's sums
 * (ds·B, ⟨ds, s_{t-1}⟩) are warp shuffles; dx[t][h][p] belongs to the warp;
 * dB, dC (shared by the group's heads and rows) and ddt (by the head's rows)
 * are atomicAdds, as are dA_log and dD once per warp. The dlogdecay terms
 * of ddt and dA are added by the warp of row 0. */
template <int NJ>
__global__ void scan_backward_kernel(ss_scan_dims d, const int64_t *seq_start, int64_t max_len,
				     const float *x, float *dx, ptrdiff_t ldx, const float *B,
				     float *dB, ptrdiff_t ldb, const float *C, float *dC,
				     ptrdiff_t ldc, const float *dt, float *ddt, ptrdiff_t lddt,
				     const float *A_log, float *dA_log, const float *D, float *dD,
				     const float *ssm, float *dssm, ptrdiff_t ld_ssm,
				     const float *dy, ptrdiff_t ldy, const float *dlogdecay,
				     ptrdiff_t ld_logdecay, float *work)
{
	const int Q = SS_CUDA_SCAN_CHUNK;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int s = blockIdx.z, h = blockIdx.y;
	const int p = blockIdx.x * SCANB_WARPS + warp;
	const int N = d.d_state, P = d.headdim;
	const int g = h / (d.nheads / d.ngroups);
	const int64_t r0 = seq_start[s], n = seq_start[s + 1] - r0;
	float st[NJ], ds[NJ], buf[SS_CUDA_SCAN_CHUNK][NJ];

	if (p >= P || n <= 0 || n > max_len)
		return;
	const float A = -expf(A_log[h]);
	const float Dh = D ? D[h] : 0.0f;
	const float dlg = dlogdecay ? dlogdecay[s * ld_logdecay + h] : 0.0f;
	const int64_t nck = (n + Q - 1) / Q, nck_max = (max_len + Q - 1) / Q;
	const int64_t xo = (int64_t)h * P + p, go = (int64_t)g * N;
	float *ck = work + (((int64_t)s * d.nheads + h) * P + p) * nck_max * N;
	const float *s0 = ssm + s * ld_ssm + xo * N;
	float *ds0 = dssm + s * ld_ssm + xo * N;
	double dA_acc = 0.0, dD_acc = 0.0, dtsum = 0.0;

#pragma unroll
	for (int j = 0; j < NJ; j++) {
		const int c = lane + 32 * j;
		st[j] = c < N ? s0[c] : 0.0f;
		ds[j] = c < N ? ds0[c] : 0.0f;
	}
	for (int64_t t = 0; t < (nck - 1) * Q; t++) {
		const int64_t r = r0 + t;
		if (t % Q == 0) {
#pragma unroll
			for (int j = 0; j < NJ; j++)
				if (lane + 32 * j < N)
					ck[(t / Q) * N + lane + 32 * j] = st[j];
		}
		const float dtv = dt[r * lddt + h];
		scan_row_step<NJ>(st, expf(dtv * A), x[r * ldx + xo] * dtv, B + r * ldb + go, lane, N);
	}
#pragma unroll
	for (int j = 0; j < NJ; j++)
		if (lane + 32 * j < N)
			ck[(nck - 1) * N + lane + 32 * j] = st[j];

	for (int64_t c = nck - 1; c >= 0; c--) {
		const int64_t t0 = c * Q;
		const int q = n - t0 < Q ? (int)(n - t0) : Q;
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			const int col = lane + 32 * j;
			st[j] = col < N ? ck[c * N + col] : 0.0f;
		}
		for (int i = 0; i < q; i++) {
			const int64_t r = r0 + t0 + i;
			const float dtv = dt[r * lddt + h];
			scan_row_step<NJ>(st, expf(dtv * A), x[r * ldx + xo] * dtv, B + r * ldb + go,
					  lane, N);
#pragma unroll
			for (int j = 0; j < NJ; j++)
				buf[i][j] = st[j];
		}
		for (int i = q - 1; i >= 0; i--) {
			const int64_t r = r0 + t0 + i;
			const float dtv = dt[r * lddt + h], a = expf(dtv * A);
			const float xv = x[r * ldx + xo];
			const float *Br = B + r * ldb + go;
			float dyp = 0.0f, dsB = 0.0f, dda = 0.0f;
			if (dy) {
				const float *Cr = C + r * ldc + go;
				dyp = dy[r * ldy + xo];
#pragma unroll
				for (int j = 0; j < NJ; j++) {
					const int col = lane + 32 * j;
					if (col < N) {
						ds[j] = fmaf(dyp, Cr[col], ds[j]);
						atomicAdd(dC + r * ldc + go + col, dyp * buf[i][j]);
					}
				}
			}
#pragma unroll
			for (int j = 0; j < NJ; j++) {
				const int col = lane + 32 * j;
				if (col < N) {
					const float sp = i ? buf[i - 1][j] : ck[c * N + col];
					dsB = fmaf(ds[j], Br[col], dsB);
					dda = fmaf(ds[j], sp, dda);
					atomicAdd(dB + r * ldb + go + col, dtv * ds[j] * xv);
					ds[j] *= a;
				}
			}
			dsB = ss_warp_sum(dsB);
			dda = ss_warp_sum(dda);
			if (lane == 0) {
				dx[r * ldx + xo] += Dh * dyp + dtv * dsB;
				atomicAdd(ddt + r * lddt + h,
					  xv * dsB + dda * A * a + (p == 0 ? dlg * A : 0.0f));
				dA_acc += (double)dda * dtv * a;
				dD_acc += (double)dyp * xv;
				dtsum += dtv;
			}
		}
	}
#pragma unroll
	for (int j = 0; j < NJ; j++)
		if (lane + 32 * j < N)
			ds0[lane + 32 * j] = ds[j];
	if (lane == 0) {
		if (p == 0)
			dA_acc += (double)dlg * dtsum;
		atomicAdd(dA_log + h, (float)(dA_acc * A));
		if (dD)
			atomicAdd(dD + h, (float)dD_acc);
	}
}

extern "C" int ss_ssm_scan_backward_cuda(const ss_scan_dims *d, const int64_t *seq_start,
					 int nseq, int64_t max_len, const float *x, float *dx,
					 ptrdiff_t ldx, const float *B, float *dB, ptrdiff_t ldb,
					 const float *C, float *dC, ptrdiff_t ldc, const float *dt,
					 float *ddt, ptrdiff_t lddt, const float *A_log,
					 float *dA_log, const float *D, float *dD, const float *ssm,
					 float *dssm, ptrdiff_t ld_ssm, const float *dy,
					 ptrdiff_t ldy, const float *dlogdecay,
					 ptrdiff_t ld_logdecay, float *work, cudaStream_t st)
{
	if (!d || !seq_start || nseq < 0 || max_len < 0 || d->nheads <= 0 || d->headdim <= 0 ||
	    d->d_state <= 0 || d->d_state > 256 || d->ngroups <= 0 ||
	    d->nheads % d->ngroups != 0 || !x || !dx || !B || !dB || !dt || !ddt || !A_log ||
	    !dA_log || !ssm || !dssm || (dy && (!C || !dC)) ||
	    ldx < (ptrdiff_t)d->nheads * d->headdim || ldb < (ptrdiff_t)d->ngroups * d->d_state ||
	    lddt < d->nheads || (dy && ldy < (ptrdiff_t)d->nheads * d->headdim) ||
	    (dy && ldc < (ptrdiff_t)d->ngroups * d->d_state) || (max_len > 0 && !work)) {
		ss_cuda_note_msg("ssm_scan_backward", "bad dims, strides or a NULL array");
		return SS_ERR_INVALID;
	}
	if (nseq == 0 || max_len == 0)
		return 0;
	const dim3 grid(ss_cdiv(d->headdim, SCANB_WARPS), (unsigned)d->nheads, (unsigned)nseq);
	const int nj = (d->d_state + 31) / 32;
#define SCANB_CASE(J)                                                                         \
	case J:                                                                               \
		scan_backward_kernel<J><<<grid, 32 * SCANB_WARPS, 0, st>>>(                    \
			*d, seq_start, max_len, x, dx, ldx, B, dB, ldb, C, dC, ldc, dt, ddt, lddt, \
			A_log, dA_log, D, dD, ssm, dssm, ld_ssm, dy, ldy, dlogdecay, ld_logdecay, \
			work);                                                                 \
		break;
	switch (nj) {
	SCANB_CASE(1) SCANB_CASE(2) SCANB_CASE(3) SCANB_CASE(4)
	SCANB_CASE(5) SCANB_CASE(6) SCANB_CASE(7) SCANB_CASE(8)
	}
#undef SCANB_CASE
	return SS_CUDA_LAUNCHED("ssm_scan_backward");
}
