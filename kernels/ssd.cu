/*
 * ssd.cu — the Mamba-2 scan in its chunked "state space duality" form, for
 * prefill of many variable-length sequences packed in one batch, each from
 * its own initial state, leaving its final state.
 *
 * Each sequence is cut into chunks of Q = SS_SSD_CHUNK tokens (a chunk never
 * crosses a sequence). With a_t = Σ_{u<=t in chunk} dt_u·A (the cumulative
 * log decay inside the chunk) and L = a at the chunk's last token:
 *   1. chunk state   S_c[p][n] = Σ_t exp(L - a_t)·dt_t·x_t[p]·B_t[n]
 *   2. state passing S_in(0) = the initial state,
 *                    S_in(c+1) = exp(L_c)·S_in(c) + S_c; the last is the
 *                    final state (ssm, in place)
 *   3. output        y_t[p] = exp(a_t)·Σ_n C_t[n]·S_in(c)[p][n]
 *                           + Σ_{u<=t} (C_t·B_u)·exp(a_t - a_u)·dt_u·x_u[p]
 *                           + D·x_t[p]
 * All exponents are <= 0. This is the algorithm of the reference's Triton
 * kernels (_chunk_cumsum, _chunk_state, _state_passing, _chunk_scan) in
 * plain CUDA cores: a correct first version. Tensor-core tiles for the
 * C·Bᵀ and state products are the next step (bench/gpu-notes.md).
 * ref: mamba_ssm ops/triton/ssd_combined.py (mamba_chunk_scan_combined with
 *      seq_idx, initial_states, return_final_states); Dao & Gu 2024 §6.
 */
#include <math.h>

#include "ssd.cuh"

#define Q SS_SSD_CHUNK
#define SSD_THREADS 256

struct seq_chunk {
	int64_t r0; /* first row of the chunk */
	int len;    /* rows in the chunk (0: past the sequence's end) */
	int nck;    /* chunks of the sequence */
};

__device__ __forceinline__ seq_chunk chunk_of(const int64_t *seq_start, int s, int c)
{
	const int64_t a = seq_start[s], n = seq_start[s + 1] - a;
	seq_chunk k;
	k.nck = (int)((n + Q - 1) / Q);
	k.r0 = a + (int64_t)c * Q;
	k.len = c < k.nck ? (int)(n - (int64_t)c * Q < Q ? n - (int64_t)c * Q : Q) : 0;
	return k;
}

/* Cumulative log decay of a chunk into a[] and dt into dv[] (shared);
 * thread 0 also returns Σ dt in double. */
__device__ void chunk_cumsum(const float *dt, ptrdiff_t lddt, int h, const seq_chunk &k, float A,
			     float *a, float *dv, double *dtsum)
{
	if (threadIdx.x == 0) {
		float cs = 0.0f;
		double sum = 0.0;
		for (int t = 0; t < k.len; t++) {
			const float v = dt[(k.r0 + t) * lddt + h];
			dv[t] = v;
			cs += v * A;
			a[t] = cs;
			sum += v;
		}
		*dtsum = sum;
	}
	__syncthreads();
}

/* 1: S_c into cs[((s*nck_max + c)*nheads + h)][P][N]; L_c and Σdt into meta. */
__global__ void ssd_chunk_state(ss_scan_dims d, const int64_t *seq_start, int nck_max,
				const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
				const float *dt, ptrdiff_t lddt, const float *A_log, float *cs,
				float *lastA, double *dsum)
{
	__shared__ float a[Q], dv[Q];
	__shared__ double dts;
	const int c = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
	const int P = d.headdim, N = d.d_state;
	const int g = h / (d.nheads / d.ngroups);
	const seq_chunk k = chunk_of(seq_start, s, c);
	const int64_t slot = ((int64_t)s * nck_max + c) * d.nheads + h;

	if (k.len == 0)
		return;
	chunk_cumsum(dt, lddt, h, k, -expf(A_log[h]), a, dv, &dts);
	const float L = a[k.len - 1];
	if (threadIdx.x == 0) {
		lastA[slot] = L;
		dsum[slot] = dts;
	}
	float *out = cs + slot * P * N;
	for (int e = threadIdx.x; e < P * N; e += blockDim.x) {
		const int p = e / N, n = e % N;
		float acc = 0.0f;
		for (int t = 0; t < k.len; t++) {
			const int64_t r = k.r0 + t;
			const float w = expf(L - a[t]) * dv[t];
			acc = fmaf(w * x[r * ldx + (int64_t)h * P + p], B[r * ldb + (int64_t)g * N + n],
				   acc);
		}
		out[e] = acc;
	}
}

/* 2: per state element, sequential over the sequence's chunks; cs[c]
 * becomes S_in(c); the final state goes to ssm; logdecay += A·Σdt. */
__global__ void ssd_state_pass(ss_scan_dims d, const int64_t *seq_start, int nck_max,
			       const float *A_log, float *cs, const float *lastA,
			       const double *dsum, float *ssm, ptrdiff_t ld_ssm, float *logdecay,
			       ptrdiff_t ld_logdecay)
{
	const int h = blockIdx.y, s = blockIdx.z;
	const int PN = d.headdim * d.d_state;
	const int e = blockIdx.x * blockDim.x + threadIdx.x;
	const seq_chunk k = chunk_of(seq_start, s, 0);

	if (k.nck == 0)
		return;
	if (e < PN) {
		float *sp = ssm + s * ld_ssm + (int64_t)h * PN + e;
		float run = *sp;
		for (int c = 0; c < k.nck; c++) {
			const int64_t slot = ((int64_t)s * nck_max + c) * d.nheads + h;
			float *q = cs + slot * PN + e;
			const float sc = *q;
			*q = run;
			run = fmaf(expf(lastA[slot]), run, sc);
		}
		*sp = run;
	}
	if (logdecay && blockIdx.x == 0 && threadIdx.x == 0) {
		double sum = 0.0;
		for (int c = 0; c < k.nck; c++)
			sum += dsum[((int64_t)s * nck_max + c) * d.nheads + h];
		float *ld = logdecay + s * ld_logdecay + h;
		*ld = (float)((double)*ld - exp((double)A_log[h]) * sum);
	}
}

/* 3: y of one chunk and head. */
__global__ void ssd_chunk_out(ss_scan_dims d, const int64_t *seq_start, int nck_max,
			      const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
			      const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
			      const float *A_log, const float *D, const float *cs, float *y,
			      ptrdiff_t ldy)
{
	__shared__ float a[Q], dv[Q], cb[Q][Q + 1];
	__shared__ double dts;
	const int c = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
	const int P = d.headdim, N = d.d_state;
	const int g = h / (d.nheads / d.ngroups);
	const seq_chunk k = chunk_of(seq_start, s, c);
	const int64_t slot = ((int64_t)s * nck_max + c) * d.nheads + h;
	const float Dh = D ? D[h] : 0.0f;

	if (k.len == 0)
		return;
	chunk_cumsum(dt, lddt, h, k, -expf(A_log[h]), a, dv, &dts);
	for (int e = threadIdx.x; e < k.len * k.len; e += blockDim.x) {
		const int t = e / k.len, u = e % k.len;
		float acc = 0.0f;
		if (u <= t) {
			const float *Ct = C + (k.r0 + t) * ldc + (int64_t)g * N;
			const float *Bu = B + (k.r0 + u) * ldb + (int64_t)g * N;
			for (int n = 0; n < N; n++)
				acc = fmaf(Ct[n], Bu[n], acc);
		}
		cb[t][u] = acc;
	}
	__syncthreads();
	const float *Sin = cs + slot * P * N;
	for (int e = threadIdx.x; e < k.len * P; e += blockDim.x) {
		const int t = e / P, p = e % P;
		const int64_t r = k.r0 + t;
		const float *Ct = C + r * ldc + (int64_t)g * N;
		const float *Sp = Sin + (int64_t)p * N;
		float inter = 0.0f, intra = 0.0f;
		for (int n = 0; n < N; n++)
			inter = fmaf(Ct[n], Sp[n], inter);
		for (int u = 0; u <= t; u++)
			intra = fmaf(cb[t][u] * expf(a[t] - a[u]) * dv[u],
				     x[(k.r0 + u) * ldx + (int64_t)h * P + p], intra);
		const float xv = x[r * ldx + (int64_t)h * P + p];
		y[r * ldy + (int64_t)h * P + p] = expf(a[t]) * inter + intra + Dh * xv;
	}
}

extern "C" int ss_ssd_scan_cuda(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
				int64_t max_len, const float *x, ptrdiff_t ldx, const float *B,
				ptrdiff_t ldb, const float *C, ptrdiff_t ldc, const float *dt,
				ptrdiff_t lddt, const float *A_log, const float *D, float *ssm,
				ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
				ptrdiff_t ld_logdecay, cudaStream_t st)
{
	float *cs = NULL, *lastA = NULL;
	double *dsum = NULL;
	int err;

	if (!d || !seq_start || nseq < 0 || max_len < 0 || d->nheads <= 0 || d->headdim <= 0 ||
	    d->d_state <= 0 || d->ngroups <= 0 || d->nheads % d->ngroups != 0) {
		ss_cuda_note_msg("ssd_scan", "bad dims");
		return SS_ERR_INVALID;
	}
	if (nseq == 0 || max_len == 0)
		return 0;
	const int nck = (int)((max_len + Q - 1) / Q);
	const size_t slots = (size_t)nseq * nck * d->nheads;
	const size_t PN = (size_t)d->headdim * d->d_state;
	if ((err = ss_cuda_note(cudaMallocAsync((void **)&cs, slots * PN * sizeof(float), st),
				"ssd_scan scratch")) ||
	    (err = ss_cuda_note(cudaMallocAsync((void **)&lastA, slots * sizeof(float), st),
				"ssd_scan scratch")) ||
	    (err = ss_cuda_note(cudaMallocAsync((void **)&dsum, slots * sizeof(double), st),
				"ssd_scan scratch")))
		goto out;
	ssd_chunk_state<<<dim3(nck, d->nheads, nseq), SSD_THREADS, 0, st>>>(
		*d, seq_start, nck, x, ldx, B, ldb, dt, lddt, A_log, cs, lastA, dsum);
	if ((err = SS_CUDA_LAUNCHED("ssd_chunk_state")))
		goto out;
	ssd_state_pass<<<dim3(ss_cdiv(PN, SSD_THREADS), d->nheads, nseq), SSD_THREADS, 0, st>>>(
		*d, seq_start, nck, A_log, cs, lastA, dsum, ssm, ld_ssm, logdecay, ld_logdecay);
	if ((err = SS_CUDA_LAUNCHED("ssd_state_pass")))
		goto out;
	if (y) {
		ssd_chunk_out<<<dim3(nck, d->nheads, nseq), SSD_THREADS, 0, st>>>(
			*d, seq_start, nck, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, D, cs, y, ldy);
		err = SS_CUDA_LAUNCHED("ssd_chunk_out");
	}
out:
	if (cs)
		cudaFreeAsync(cs, st);
	if (lastA)
		cudaFreeAsync(lastA, st);
	if (dsum)
		cudaFreeAsync(dsum, st);
	return err;
}
