/*
 * device_plugin.h — INTERNAL to libss and its CUDA plugin: the table of
 * functions libss_cuda.so hands to lib/forward/device.c, and the check that a loaded
 * plugin was built from the same headers. Included by lib/forward/device.c,
 * lib/forward/forward.c, the kernels (through kernels/common.cuh),
 * tests/test_cuda_parity.c (which runs the op slots one by one) and
 * bench/cuda.c (which times bench_linear). Not installed; tools never see
 * it (ss_device.h is their interface).
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
 * twins (embed_backward .. cross_entropy_backward). 6: those dropped
 * (nothing ran them: training is CPU only), the op slots from SS_CUDA_OPS,
 * blas_create/blas_free before them. 7: backend_init without its dtype
 * argument (the device holds the matrices in m->weights_dtype). */
#define SS_CUDA_ABI 7
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

/* The op twins, each registered once: X(op, return type, (parameters)) is
 * ss_<op>_cuda, defined in kernels/<file>.cu (ss_ops.h's table names the
 * file), the twin of ss_<op>_cpu in ss_ops.h: the same arguments as device
 * pointers (seq_start arrays too), then a stream (the linear: a cuBLAS
 * handle first, no stream). They are asynchronous: errors show at sync.
 * From this list come the table's op slots (below), their SS_CUDA_LAYOUT
 * entries, the declarations the kernels see (kernels/common.cuh), the
 * table's fill (kernels/plugin.cu), and the list of ops
 * tests/test_cuda_parity.c requires an adapter for.
 *
 * Nothing in libss calls these slots: the GPU forward pass calls the twins
 * inside the plugin (kernels/forward.cu, through backend_init). They stay
 * in the table for tests/test_cuda_parity.c, which runs each twin on its
 * own against its CPU op, so that a GPU run that disagrees with the CPU
 * names the op at fault instead of only a wrong final state. */
#define SS_CUDA_OPS(X) \
	X(embed, void, (float *h, const void *emb, ss_dtype et, const int32_t *tokens, int64_t n, \
			int d_model, ss_cuda_stream st)) \
	X(rmsnorm, void, (float *y, float *h, const float *res, const float *w, int64_t n, int d, \
			  float eps, ss_cuda_stream st)) \
	X(linear, int, (ss_cuda_blas *b, float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, \
			const void *W, ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K, \
			float beta)) \
	X(conv1d_silu, void, (float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, \
			      const int64_t *seq_start, int nseq, float *conv_state, \
			      ptrdiff_t ld_state, const float *wt, ptrdiff_t ldw, const float *b, \
			      int nch, int d_conv, ss_cuda_stream st)) \
	X(conv1d_step, void, (float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, int nseq, \
			      float *conv_state, ptrdiff_t ld_state, const float *wt, \
			      ptrdiff_t ldw, const float *b, int nch, int d_conv, \
			      ss_cuda_stream st)) \
	X(dt_softplus, void, (float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr, \
			      const float *dt_bias, int64_t n, int nheads, float dt_min, \
			      float dt_max, ss_cuda_stream st)) \
	/* the scan, sequential in t; ssd_scan: its chunked SSD form, with \
	 * max_len, a host upper bound of the longest sequence (sizes the grid) */ \
	X(ssm_scan, int, (const ss_scan_dims *d, const int64_t *seq_start, int nseq, \
			  const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb, \
			  const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt, \
			  const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm, \
			  float *y, ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay, \
			  ss_cuda_stream st)) \
	X(ssd_scan, int, (const ss_scan_dims *d, const int64_t *seq_start, int nseq, \
			  int64_t max_len, const float *x, ptrdiff_t ldx, const float *B, \
			  ptrdiff_t ldb, const float *C, ptrdiff_t ldc, const float *dt, \
			  ptrdiff_t lddt, const float *A_log, const float *D, float *ssm, \
			  ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay, \
			  ptrdiff_t ld_logdecay, ss_cuda_stream st)) \
	X(ssm_step, int, (const ss_scan_dims *d, int nseq, const float *x, ptrdiff_t ldx, \
			  const float *B, ptrdiff_t ldb, const float *C, ptrdiff_t ldc, \
			  const float *dt, ptrdiff_t lddt, const float *A_log, const float *D, \
			  float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, \
			  float *logdecay, ptrdiff_t ld_logdecay, ss_cuda_stream st)) \
	X(gated_rmsnorm, void, (float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz, \
				const float *w, int64_t n, int d, int ngroups, float eps, \
				ss_cuda_stream st)) \
	X(argmax_rows, void, (int32_t *ids, const float *logits, ptrdiff_t ld, int64_t nrows, \
			      int64_t n, ss_cuda_stream st)) \
	/* Mamba-1's */ \
	X(dt_proj, void, (float *dt, ptrdiff_t lddt, const float *low, ptrdiff_t ldl, \
			  const float *W, const float *dt_bias, int64_t n, int d_inner, \
			  int dt_rank, ss_cuda_stream st)) \
	X(ssm1_scan, int, (int d_inner, int d_state, const int64_t *seq_start, int nseq, \
			   const float *x, ptrdiff_t ldx, const float *BC, ptrdiff_t ldbc, \
			   const float *dt, ptrdiff_t lddt, const float *A_log, const float *D, \
			   float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, \
			   float *logdecay, ptrdiff_t ld_logdecay, ss_cuda_stream st)) \
	X(gate_silu, void, (float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz, int64_t n, \
			    int d, ss_cuda_stream st))

#define SS_CUDA_OP_SLOT_(op, ret, params) ret(*op) params;

/* Memory helpers and sync return 0 or SS_ERR_DEVICE (last_error() says
 * why). */
typedef struct ss_cuda_api {
	/* These four come first and keep their places in every ABI. */
	uint32_t abi;  /* SS_CUDA_ABI */
	uint32_t size; /* sizeof(ss_cuda_api) as the plugin was built */
	const char *build; /* e.g. "CUDA 13.0, sm_80 sm_90" */
	const ss_cuda_layout *layout; /* SS_CUDA_LAYOUT as nvcc compiled it */

	/* device: count is 0 when there is no driver or no GPU (never fails)
	 * (lib/forward/device.c) */
	int (*device_count)(void);
	int (*device_select)(int dev, char *name, size_t name_len, size_t *mem_bytes);
	const char *(*last_error)(void);

	/* The GPU backend of the forward driver (backend.h; lib/forward/forward.c runs
	 * it for a context made on a CUDA device): m put on the current device,
	 * its four matrices in m->weights_dtype (f32, bf16 or f16: what the host
	 * holds, as --weights-dtype asked), scratch for ubatch rows. Returns 0
	 * with *be and *ops set (free with (*ops)->free), or SS_ERR_UNSUPPORTED / SS_ERR_DEVICE /
	 * SS_ERR_NOMEM with errmsg. kernels/forward.cuh. */
	int (*backend_init)(void **be, const ss_backend_ops **ops, const ss_model *m, int ubatch,
			    char *errmsg);

	/* Benchmark: the best time in seconds of `reps` calls of the linear
	 * y[M][N] = x[M][K]·W[N][K]ᵀ with W in dtype weights_dtype (random data), after a
	 * warm-up; < 0 on error. For the GEMM floor of bench/cuda.c. */
	double (*bench_linear)(int64_t M, int64_t N, int64_t K, ss_dtype weights_dtype, int reps);

	/* Memory, sync and the cuBLAS handle of the linear slot: what
	 * tests/test_cuda_parity.c needs to run the op slots on their own. */
	void *(*dmalloc)(size_t bytes);
	void (*dfree)(void *p);
	int (*h2d)(void *dst, const void *src, size_t bytes);
	int (*d2h)(void *dst, const void *src, size_t bytes);
	int (*sync)(void);
	ss_cuda_blas *(*blas_create)(ss_cuda_stream st);
	void (*blas_free)(ss_cuda_blas *b);

	/* The op twins, ss_<op>_cuda, in SS_CUDA_OPS's order. */
	SS_CUDA_OPS(SS_CUDA_OP_SLOT_)
} ss_cuda_api;

/* The plugin's one entry point: returns its table when abi == SS_CUDA_ABI,
 * else NULL. */
typedef const ss_cuda_api *(*ss_cuda_plugin_fn)(uint32_t abi);

/* The table of a CUDA device, NULL for the CPU. Borrowed from d. */
const ss_cuda_api *ss_device_cuda(const ss_device *d);

/* ------------------------------------------------------ the layout check */

/* Every type whose layout both sides must agree on: the structs the table's
 * functions take or read through pointers (kernels/forward.cu reads
 * ss_model, ss_layer, ss_state, ss_forward_seq and the backend's ss_pass
 * field by field), the enums passed by value, and the tables themselves.
 * S(T) stands for sizeof(T), F(T, f) for offsetof(T, f). Every field of
 * these structs is listed, whether the plugin reads it today or not: a
 * field added to one of these types goes here too. The op slots of
 * ss_cuda_api follow from SS_CUDA_OPS (SS_CUDA_LAYOUT_INIT). */
#define SS_CUDA_LAYOUT(S, F) \
	S(ss_dtype) S(ss_logits_mode) \
	S(ss_model_config) F(ss_model_config, arch) F(ss_model_config, d_model) \
	F(ss_model_config, n_layer) F(ss_model_config, d_state) F(ss_model_config, headdim) \
	F(ss_model_config, nheads) F(ss_model_config, ngroups) F(ss_model_config, d_conv) \
	F(ss_model_config, expand) F(ss_model_config, d_inner) F(ss_model_config, conv_dim) \
	F(ss_model_config, d_in_proj) F(ss_model_config, dt_rank) F(ss_model_config, vocab_size) \
	F(ss_model_config, vocab_padded) F(ss_model_config, eps) F(ss_model_config, dt_min) \
	F(ss_model_config, dt_max) F(ss_model_config, tied) F(ss_model_config, eos_token_id) \
	S(ss_layer) F(ss_layer, norm) F(ss_layer, in_proj) F(ss_layer, conv_w) \
	F(ss_layer, conv_b) F(ss_layer, dt_bias) F(ss_layer, A_log) F(ss_layer, D) \
	F(ss_layer, gnorm) F(ss_layer, x_proj) F(ss_layer, dt_proj) F(ss_layer, out_proj) \
	S(ss_model) F(ss_model, cfg) F(ss_model, fingerprint) F(ss_model, ckpt_dtype) \
	F(ss_model, weights_dtype) F(ss_model, embedding) F(ss_model, norm_f) F(ss_model, lm_head) \
	F(ss_model, layers) F(ss_model, priv) \
	S(ss_state_dims) F(ss_state_dims, arch) F(ss_state_dims, n_layer) \
	F(ss_state_dims, nheads) F(ss_state_dims, headdim) F(ss_state_dims, d_state) \
	F(ss_state_dims, conv_dim) F(ss_state_dims, d_conv) \
	S(ss_state) F(ss_state, id) F(ss_state, fingerprint) F(ss_state, dims) \
	F(ss_state, n_tokens) F(ss_state, dtype) F(ss_state, logdecay) F(ss_state, conv) \
	F(ss_state, ssm) F(ss_state, conv_scale) F(ss_state, ssm_scale) F(ss_state, shuffle) \
	F(ss_state, mode) F(ss_state, sources) F(ss_state, n_sources) F(ss_state, weights) \
	F(ss_state, has_rank) F(ss_state, rank) F(ss_state, score) \
	S(ss_forward_seq) F(ss_forward_seq, tokens) F(ss_forward_seq, n_tokens) \
	F(ss_forward_seq, state) F(ss_forward_seq, logits) F(ss_forward_seq, hidden) \
	S(ss_scan_dims) F(ss_scan_dims, nheads) F(ss_scan_dims, headdim) \
	F(ss_scan_dims, d_state) F(ss_scan_dims, ngroups) \
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
	F(ss_backend_ops, graph_begin) F(ss_backend_ops, graph_end) \
	S(ss_cuda_api) F(ss_cuda_api, device_count) F(ss_cuda_api, device_select) \
	F(ss_cuda_api, last_error) F(ss_cuda_api, backend_init) F(ss_cuda_api, bench_linear) \
	F(ss_cuda_api, dmalloc) F(ss_cuda_api, dfree) F(ss_cuda_api, h2d) F(ss_cuda_api, d2h) \
	F(ss_cuda_api, sync) F(ss_cuda_api, blas_create) F(ss_cuda_api, blas_free)

#define SS_CUDA_LAYOUT_S_(T) { "sizeof(" #T ")", sizeof(T) },
#define SS_CUDA_LAYOUT_F_(T, f) { "offsetof(" #T ", " #f ")", offsetof(T, f) },
#define SS_CUDA_LAYOUT_OP_(op, ret, params) SS_CUDA_LAYOUT_F_(ss_cuda_api, op)
/* Initialiser of a `static const ss_cuda_layout x[]`: the list as this
 * compiler lays the types out (gcc for libss, nvcc for the plugin), then
 * the offset of every op slot. */
#define SS_CUDA_LAYOUT_INIT \
	{ SS_CUDA_LAYOUT(SS_CUDA_LAYOUT_S_, SS_CUDA_LAYOUT_F_) \
	  SS_CUDA_OPS(SS_CUDA_LAYOUT_OP_) { NULL, 0 } }

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
