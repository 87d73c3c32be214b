/*
 * device_plugin.h — INTERNAL to libss and its CUDA plugin: the table of
 * functions libss_cuda.so hands to lib/forward/device.c, and the check that a loaded
 * plugin was built from the same headers. Included by lib/forward/device.c,
 * lib/forward/forward.c, the kernels (through kernels/common.cuh) and the tests
 * and benches that drive GPU ops directly (tests/test_cuda_parity.c,
 * bench/cuda.c). Not installed; tools never see it (ss_device.h is their
 * interface).
 *
 * The plugin is built by nvcc, libss by the C compiler, possibly at other
 * times (an installed plugin, a build tree rebuilt in part). Both include
 * these headers; what could differ is checked at load: SS_CUDA_ABI (bumped
 * by hand when signatures change), the table's size, and the sizeof and
 * offsetof of every shared type as each compiler saw them (SS_CUDA_LAYOUT).
 * ref: lib/forward/device.c (the loader), kernels/plugin.cu (the table).
 */
#ifndef SS_DEVICE_PLUGIN_H
#define SS_DEVICE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "ss.h"
#include "forward/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bump when a function's signature or the meaning of an entry changes: the
 * layout check below sees where fields are, not what they mean. 2: the
 * table carries its layout list. 3: the forward pass is a backend
 * (backend.h) run by lib/forward/forward.c, not fwd_* entries. 5: the backward
 * twins (embed_backward .. cross_entropy_backward). */
#define SS_CUDA_ABI 5
#define SS_CUDA_PLUGIN_SYMBOL "ss_cuda_plugin"

/* One sizeof or offsetof of a type the plugin shares with libss, as the
 * compiler of one side computed it. A list ends with what == NULL. */
typedef struct {
	const char *what; /* "sizeof(ss_model)", "offsetof(ss_state, ssm)" */
	uint64_t value;   /* bytes */
} ss_cuda_layout;

/* CUDA's stream type (cudaStream_t is struct CUstream_st *); NULL = the
 * legacy default stream. Declared here so that the table needs no CUDA
 * header. */
struct CUstream_st;
typedef struct CUstream_st *ss_cuda_stream;
/* A cuBLAS handle bound to a stream, with the scratch the bf16/f16 linears
 * need (kernels/linear.cuh). */
typedef struct ss_cuda_blas ss_cuda_blas;

/* Every op takes device pointers and the same arguments as its CPU twin in
 * ss_ops.h, then a stream; they are asynchronous (errors show at sync).
 * Memory helpers and sync return 0 or SS_ERR_DEVICE (last_error() says
 * why). Pointers to int64 seq_start arrays are device pointers too. */
typedef struct ss_cuda_api {
	/* These four come first and keep their places in every ABI. */
	uint32_t abi;  /* SS_CUDA_ABI */
	uint32_t size; /* sizeof(ss_cuda_api) as the plugin was built */
	const char *build; /* e.g. "CUDA 13.0, sm_80 sm_90" */
	const ss_cuda_layout *layout; /* SS_CUDA_LAYOUT as nvcc compiled it */

	/* device: count is 0 when there is no driver or no GPU (never fails) */
	int (*device_count)(void);
	int (*device_select)(int dev, char *name, size_t name_len, size_t *mem_bytes);
	const char *(*last_error)(void);

	/* memory and sync (tests, benches) */
	void *(*dmalloc)(size_t bytes);
	void (*dfree)(void *p);
	int (*h2d)(void *dst, const void *src, size_t bytes);
	int (*d2h)(void *dst, const void *src, size_t bytes);
	int (*sync)(void);

	/* ops: ss_<op>_cuda, declared in kernels/<op>.cuh */
	void (*embed)(float *h, const void *emb, ss_dtype et, const int32_t *tokens, int64_t n,
		      int d_model, ss_cuda_stream st);
	void (*rmsnorm)(float *y, float *h, const float *res, const float *w, int64_t n, int d,
			float eps, ss_cuda_stream st);
	ss_cuda_blas *(*blas_create)(ss_cuda_stream st);
	void (*blas_free)(ss_cuda_blas *b);
	int (*linear)(ss_cuda_blas *b, float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
		      const void *W, ss_dtype wt, int64_t M, int64_t N, int64_t K, float beta);
	void (*conv1d_silu)(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
			    const int64_t *seq_start, int nseq, float *conv_state,
			    ptrdiff_t ld_state, const float *wt, ptrdiff_t ldw, const float *b,
			    int nch, int d_conv, ss_cuda_stream st);
	void (*conv1d_step)(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, int nseq,
			    float *conv_state, ptrdiff_t ld_state, const float *wt, ptrdiff_t ldw,
			    const float *b, int nch, int d_conv, ss_cuda_stream st);
	void (*dt_softplus)(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
			    const float *dt_bias, int64_t n, int nheads, float dt_min, float dt_max,
			    ss_cuda_stream st);
	/* scan: sequential in t (ss_ssm_scan_cuda) and chunked SSD
	 * (ss_ssd_scan_cuda); the same op. max_len: an upper bound of the
	 * longest sequence (host value, sizes the grid of the chunked form). */
	int (*ssm_scan)(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
			const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
			const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
			const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm, float *y,
			ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay, ss_cuda_stream st);
	int (*ssd_scan)(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
			int64_t max_len, const float *x, ptrdiff_t ldx, const float *B,
			ptrdiff_t ldb, const float *C, ptrdiff_t ldc, const float *dt,
			ptrdiff_t lddt, const float *A_log, const float *D, float *ssm,
			ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
			ptrdiff_t ld_logdecay, ss_cuda_stream st);
	int (*ssm_step)(const ss_scan_dims *d, int nseq, const float *x, ptrdiff_t ldx,
			const float *B, ptrdiff_t ldb, const float *C, ptrdiff_t ldc,
			const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
			float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
			ptrdiff_t ld_logdecay, ss_cuda_stream st);
	void (*gated_rmsnorm)(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
			      const float *w, int64_t n, int d, int ngroups, float eps,
			      ss_cuda_stream st);
	void (*argmax_rows)(int32_t *ids, const float *logits, ptrdiff_t ld, int64_t nrows,
			    int64_t n, ss_cuda_stream st);
	/* Mamba-1's ops (ss_ops.h) */
	void (*dt_proj)(float *dt, ptrdiff_t lddt, const float *low, ptrdiff_t ldl, const float *W,
			const float *dt_bias, int64_t n, int d_inner, int dt_rank, ss_cuda_stream st);
	int (*ssm1_scan)(int d_inner, int d_state, const int64_t *seq_start, int nseq,
			 const float *x, ptrdiff_t ldx, const float *BC, ptrdiff_t ldbc,
			 const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
			 float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
			 ptrdiff_t ld_logdecay, ss_cuda_stream st);
	void (*gate_silu)(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz, int64_t n, int d,
			  ss_cuda_stream st);

	/* The GPU backend of the forward driver (backend.h; lib/forward/forward.c runs
	 * it for a context made on a CUDA device): m put on the current device
	 * (projections in wdtype when m holds them in f32 and wdtype is bf16 or
	 * f16), scratch for ubatch rows. Returns 0 with *be and *ops set (free
	 * with (*ops)->free), or SS_ERR_UNSUPPORTED / SS_ERR_DEVICE /
	 * SS_ERR_NOMEM with errmsg. kernels/forward.cuh. */
	int (*backend_init)(void **be, const ss_backend_ops **ops, const ss_model *m,
			    ss_dtype wdtype, int ubatch, char *errmsg);

	/* Benchmark: the best time in seconds of `reps` calls of the linear
	 * y[M][N] = x[M][K]·W[N][K]ᵀ with W in dtype wt (random data), after a
	 * warm-up; < 0 on error. For the GEMM floor of bench/gpu.sh. */
	double (*bench_linear)(int64_t M, int64_t N, int64_t K, ss_dtype wt, int reps);

	/* Backward (training): ss_<op>_backward_cuda, the twins of the
	 * ss_<op>_backward_cpu of ss_ops.h, same arguments and accumulation
	 * (+=), then a stream (the linear: a handle). Sums over rows or
	 * sequences into one gradient (dw, dB, ...) are atomicAdds: their
	 * order, hence their last bits, vary from run to run. */
	void (*embed_backward)(const float *dh, float *demb, const int32_t *tokens, int64_t n,
			       int d_model, ss_cuda_stream st);
	void (*rmsnorm_backward)(const float *dy, const float *h, float *dh, const float *w,
				 float *dw, int64_t n, int d, float eps, ss_cuda_stream st);
	void (*gated_rmsnorm_backward)(const float *y, float *dy, ptrdiff_t ldy, const float *z,
				       float *dz, ptrdiff_t ldz, const float *w, float *dw,
				       int64_t n, int d, int ngroups, float eps, ss_cuda_stream st);
	int (*linear_backward)(ss_cuda_blas *b, const float *dy, ptrdiff_t ldy, const float *x,
			       float *dx, ptrdiff_t ldx, const float *W, float *dW, int64_t M,
			       int64_t N, int64_t K);
	int (*conv1d_silu_backward)(const float *dy, ptrdiff_t ldy, const float *x, float *dx,
				    ptrdiff_t ldx, const int64_t *seq_start, int nseq,
				    const float *conv_state, float *dconv_state, ptrdiff_t ld_state,
				    const float *wt, float *dwt, ptrdiff_t ldw, const float *b,
				    float *db, int nch, int d_conv, ss_cuda_stream st);
	void (*dt_softplus_backward)(const float *ddt, ptrdiff_t lddt, const float *raw,
				     float *draw, ptrdiff_t ldr, const float *dt_bias,
				     float *ddt_bias, int64_t n, int nheads, float dt_min,
				     float dt_max, ss_cuda_stream st);
	/* max_len and work: ss_cuda_scan_backward_work below */
	int (*ssm_scan_backward)(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
				 int64_t max_len, const float *x, float *dx, ptrdiff_t ldx,
				 const float *B, float *dB, ptrdiff_t ldb, const float *C, float *dC,
				 ptrdiff_t ldc, const float *dt, float *ddt, ptrdiff_t lddt,
				 const float *A_log, float *dA_log, const float *D, float *dD,
				 const float *ssm, float *dssm, ptrdiff_t ld_ssm, const float *dy,
				 ptrdiff_t ldy, const float *dlogdecay, ptrdiff_t ld_logdecay,
				 float *work, ss_cuda_stream st);
	int (*cross_entropy_backward)(const float *dnll, const float *logits, float *dlogits,
				      ptrdiff_t ld, const int32_t *targets, int64_t n, int64_t V,
				      ss_cuda_stream st);
} ss_cuda_api;

/* Tokens per chunk of ssm_scan_backward: the states at each chunk's start
 * are kept in its work, those inside a chunk recomputed (as the CPU's
 * SS_SCAN_CHUNK). */
#define SS_CUDA_SCAN_CHUNK 64

/* Floats of device work ssm_scan_backward needs for nseq sequences of at
 * most max_len tokens: one checkpoint of every head's [headdim][d_state]
 * state per chunk, nseq·nheads·ceil(max_len/64)·headdim·d_state. */
static inline size_t ss_cuda_scan_backward_work(const ss_scan_dims *d, int nseq, int64_t max_len)
{
	const int64_t nck = max_len > 0 ? (max_len + SS_CUDA_SCAN_CHUNK - 1) / SS_CUDA_SCAN_CHUNK : 0;
	return (size_t)(nseq > 0 ? nseq : 0) * (size_t)d->nheads * (size_t)nck *
	       (size_t)d->headdim * (size_t)d->d_state;
}

/* The plugin's one entry point: returns its table when abi == SS_CUDA_ABI,
 * else NULL. */
typedef const ss_cuda_api *(*ss_cuda_plugin_fn)(uint32_t abi);

/* The table of a CUDA device, NULL for the CPU. Borrowed from d. */
const ss_cuda_api *ss_device_cuda(const ss_device *d);

/* ------------------------------------------------------ the layout check */

/* Every type whose layout both sides must agree on: the structs the table's
 * functions take or read through pointers (kernels/forward.cu reads
 * ss_model, ss_layer, ss_state, ss_forward_seq and the backend's ss_pass
 * field by field), the enums passed by value, and the tables themselves. S(T) stands for sizeof(T),
 * F(T, f) for offsetof(T, f). A field added to one of these types goes
 * here too. */
#define SS_CUDA_LAYOUT(S, F) \
	S(ss_dtype) S(ss_logits_mode) \
	S(ss_model_config) F(ss_model_config, arch) F(ss_model_config, d_model) \
	F(ss_model_config, n_layer) F(ss_model_config, d_state) F(ss_model_config, headdim) \
	F(ss_model_config, nheads) F(ss_model_config, ngroups) F(ss_model_config, d_conv) \
	F(ss_model_config, expand) F(ss_model_config, d_inner) F(ss_model_config, conv_dim) \
	F(ss_model_config, d_in_proj) F(ss_model_config, vocab_size) \
	F(ss_model_config, vocab_padded) F(ss_model_config, eps) F(ss_model_config, dt_min) \
	F(ss_model_config, dt_max) F(ss_model_config, tied) F(ss_model_config, eos_token_id) \
	S(ss_layer) F(ss_layer, norm) F(ss_layer, in_proj) F(ss_layer, conv_w) \
	F(ss_layer, conv_b) F(ss_layer, dt_bias) F(ss_layer, A_log) F(ss_layer, D) \
	F(ss_layer, gnorm) F(ss_layer, out_proj) \
	S(ss_model) F(ss_model, cfg) F(ss_model, fingerprint) F(ss_model, weight_dtype) \
	F(ss_model, embedding) F(ss_model, norm_f) F(ss_model, lm_head) F(ss_model, layers) \
	F(ss_model, priv) \
	S(ss_state_dims) F(ss_state_dims, arch) F(ss_state_dims, n_layer) \
	F(ss_state_dims, nheads) F(ss_state_dims, headdim) F(ss_state_dims, d_state) \
	F(ss_state_dims, conv_dim) F(ss_state_dims, d_conv) \
	S(ss_state) F(ss_state, id) F(ss_state, fingerprint) F(ss_state, dims) \
	F(ss_state, n_tokens) F(ss_state, dtype) F(ss_state, logdecay) F(ss_state, conv) \
	F(ss_state, ssm) F(ss_state, mode) F(ss_state, sources) F(ss_state, n_sources) \
	F(ss_state, weights) F(ss_state, has_rank) F(ss_state, rank) F(ss_state, score) \
	S(ss_forward_seq) F(ss_forward_seq, tokens) F(ss_forward_seq, n_tokens) \
	F(ss_forward_seq, state) F(ss_forward_seq, logits) F(ss_forward_seq, hidden) \
	S(ss_scan_dims) F(ss_scan_dims, nheads) F(ss_scan_dims, headdim) \
	F(ss_scan_dims, d_state) F(ss_scan_dims, ngroups) \
	S(ss_cuda_api) F(ss_cuda_api, device_count) F(ss_cuda_api, device_select) \
	F(ss_cuda_api, last_error) F(ss_cuda_api, dmalloc) F(ss_cuda_api, dfree) \
	F(ss_cuda_api, h2d) F(ss_cuda_api, d2h) F(ss_cuda_api, sync) F(ss_cuda_api, embed) \
	F(ss_cuda_api, rmsnorm) F(ss_cuda_api, blas_create) F(ss_cuda_api, blas_free) \
	F(ss_cuda_api, linear) F(ss_cuda_api, conv1d_silu) F(ss_cuda_api, conv1d_step) \
	F(ss_cuda_api, dt_softplus) F(ss_cuda_api, ssm_scan) F(ss_cuda_api, ssd_scan) \
	F(ss_cuda_api, ssm_step) F(ss_cuda_api, gated_rmsnorm) F(ss_cuda_api, argmax_rows) \
	F(ss_cuda_api, backend_init) F(ss_cuda_api, bench_linear) \
	F(ss_cuda_api, embed_backward) F(ss_cuda_api, rmsnorm_backward) \
	F(ss_cuda_api, gated_rmsnorm_backward) F(ss_cuda_api, linear_backward) \
	F(ss_cuda_api, conv1d_silu_backward) F(ss_cuda_api, dt_softplus_backward) \
	F(ss_cuda_api, ssm_scan_backward) F(ss_cuda_api, cross_entropy_backward) \
	S(ss_linear_which) S(ss_segment) F(ss_segment, seq) F(ss_segment, start) \
	F(ss_segment, n) F(ss_segment, row0) \
	S(ss_pass) F(ss_pass, seqs) F(ss_pass, segs) F(ss_pass, nseg) F(ss_pass, T) \
	F(ss_pass, blocked) F(ss_pass, decode) F(ss_pass, state_only) \
	S(ss_backend_ops) F(ss_backend_ops, lm_rows) F(ss_backend_ops, step_rows) \
	F(ss_backend_ops, deterministic) F(ss_backend_ops, free) F(ss_backend_ops, bytes) \
	F(ss_backend_ops, error) F(ss_backend_ops, states_in) F(ss_backend_ops, states_out) \
	F(ss_backend_ops, pass_begin) F(ss_backend_ops, embed) F(ss_backend_ops, rmsnorm) \
	F(ss_backend_ops, linear) F(ss_backend_ops, conv) F(ss_backend_ops, dt) \
	F(ss_backend_ops, scan) F(ss_backend_ops, gated_norm) F(ss_backend_ops, norm_f) \
	F(ss_backend_ops, hidden) F(ss_backend_ops, lm_head) F(ss_backend_ops, argmax) \
	F(ss_backend_ops, logits) F(ss_backend_ops, ids) F(ss_backend_ops, sync) \
	F(ss_backend_ops, graph_begin) F(ss_backend_ops, graph_end)

#define SS_CUDA_LAYOUT_S_(T) { "sizeof(" #T ")", sizeof(T) },
#define SS_CUDA_LAYOUT_F_(T, f) { "offsetof(" #T ", " #f ")", offsetof(T, f) },
/* Initialiser of a `static const ss_cuda_layout x[]`: the list as this
 * compiler lays the types out (gcc for libss, nvcc for the plugin). */
#define SS_CUDA_LAYOUT_INIT { SS_CUDA_LAYOUT(SS_CUDA_LAYOUT_S_, SS_CUDA_LAYOUT_F_) { NULL, 0 } }

/* Whether `api`, the table a plugin at `path` returned for SS_CUDA_ABI, is
 * one this libss can use: its abi, its size (at least this build's
 * sizeof(ss_cuda_api)) and its layout list (the same entries, in order, with
 * the same values as this build's SS_CUDA_LAYOUT_INIT). api may be NULL (the
 * plugin refused the ABI). Returns 0, or SS_ERR_VERSION with errmsg (may be
 * NULL) "PATH: ..." naming the first difference, e.g. "sizeof(ss_state) is
 * 160 in the plugin, 168 in this libss". */
int ss_cuda_api_check(const ss_cuda_api *api, const char *path, char *errmsg);

/* The argument check of ss_ssm1_scan_cpu and its CUDA twin (here, in the ABI
 * both sides share): 1 when the
 * dims and strides are valid (d_state <= SS_SCAN1_MAX_STATE, strides at
 * least the widths, the arrays present), else 0. */
#define SS_SCAN1_MAX_STATE 256
static inline int ss_scan1_args_ok(int d_inner, int d_state, int nseq, const float *x,
				   ptrdiff_t ldx, const float *BC, ptrdiff_t ldbc, const float *dt,
				   ptrdiff_t lddt, const float *A_log, const float *ssm,
				   const float *y, ptrdiff_t ldy)
{
	if (nseq < 0 || d_inner < 0 || d_state <= 0 || d_state > SS_SCAN1_MAX_STATE)
		return 0;
	if (nseq == 0 || d_inner == 0)
		return 1;
	return x && BC && dt && A_log && ssm && ldx >= d_inner && lddt >= d_inner &&
	       ldbc >= 2 * (ptrdiff_t)d_state && (!y || ldy >= d_inner);
}

#ifdef __cplusplus
}
#endif
#endif /* SS_DEVICE_PLUGIN_H */
