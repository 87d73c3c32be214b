/*
 * ss_device.h — where the forward pass runs: the CPU, or a GPU through the
 * CUDA plugin libss_cuda.so (part of libss; include "ss.h").
 *
 * libss and the tools never link CUDA. ss_device_open("cuda"|"auto")
 * dlopen()s the plugin, which links cudart and cuBLAS, and asks it whether a
 * GPU is there; "cpu" never touches it. So every binary runs on a machine
 * without the CUDA driver, and tools that do not run the model (ss-compose,
 * ss-retrieve) never load it.
 *
 * Plugin search, first hit wins:
 *   1. $SS_CUDA_PLUGIN (a path to the .so; when set, only this one);
 *   2. <directory of the executable>/../lib/libss_cuda.so (build/bin → build/lib,
 *      and BINDIR → LIBDIR after `make install`);
 *   3. SS_LIBDIR/libss_cuda.so (the install LIBDIR, compiled in);
 *   4. libss_cuda.so through the dynamic loader's own path (LD_LIBRARY_PATH).
 *
 * The plugin exports one C symbol, ss_cuda_plugin (SS_CUDA_PLUGIN_SYMBOL),
 * returning a versioned table of function pointers (ss_cuda_api). A plugin
 * built against another SS_CUDA_ABI is refused (SS_ERR_VERSION).
 * ref: DESIGN.md §5; STYLE.md (kernels/ built into a plugin loaded at run time).
 */
#ifndef SS_DEVICE_H
#define SS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	SS_DEVICE_CPU = 0,
	SS_DEVICE_CUDA = 1,
} ss_device_kind;

typedef struct ss_device ss_device;

/* Opens a device. want: "cpu", "cuda" (the first GPU; "cuda:N" for GPU N)
 * or "auto" (a GPU when the plugin loads and reports one, else the CPU,
 * silently; the plugin is loaded only after the driver, libcuda.so.1, loads
 * and cuDeviceGetCount reports a GPU, so auto costs a CPU-only machine one
 * failed dlopen). NULL means "auto".
 * Returns 0 and sets *out (close with ss_device_close); SS_ERR_INVALID
 * (unknown name), SS_ERR_DEVICE ("cuda" asked and no plugin, no driver or no
 * GPU: errmsg says which, in one line), SS_ERR_VERSION (plugin of another
 * ABI), SS_ERR_NOMEM. "auto" never fails for want of a GPU. */
int ss_device_open(ss_device **out, const char *want, char *errmsg);
/* Unloads the plugin if this device loaded it. NULL is a no-op. Close a
 * device only after every context made on it is freed. */
void ss_device_close(ss_device *d);
ss_device_kind ss_device_kind_of(const ss_device *d);
/* "cpu", or "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB)". Owned by d. */
const char *ss_device_name(const ss_device *d);
/* Path of the loaded plugin, or NULL (CPU device). Owned by d. */
const char *ss_device_plugin_path(const ss_device *d);

/* ------------------------------------------------- the plugin's table */

#define SS_CUDA_ABI 1
#define SS_CUDA_PLUGIN_SYMBOL "ss_cuda_plugin"

/* CUDA's stream type (cudaStream_t is struct CUstream_st *); NULL = the
 * legacy default stream. Declared here so that the table needs no CUDA
 * header. */
struct CUstream_st;
typedef struct CUstream_st *ss_cuda_stream;
/* A cuBLAS handle bound to a stream, with the scratch the bf16/f16 linears
 * need (kernels/linear.cuh). */
typedef struct ss_cuda_blas ss_cuda_blas;
/* A model on the GPU with its forward pass's scratch (kernels/forward.cuh). */
typedef struct ss_cuda_fwd ss_cuda_fwd;

/* Every op takes device pointers and the same arguments as its CPU twin in
 * ss_ops.h, then a stream; they are asynchronous (errors show at sync).
 * Memory helpers and sync return 0 or SS_ERR_DEVICE (last_error() says
 * why). Pointers to int64 seq_start arrays are device pointers too. */
typedef struct ss_cuda_api {
	uint32_t abi;  /* SS_CUDA_ABI */
	uint32_t size; /* sizeof(ss_cuda_api) as the plugin was built */
	const char *build; /* e.g. "CUDA 13.0, sm_80 sm_90" */

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

	/* The forward pass on the GPU, behind ss_forward_* (forward.c calls
	 * these for a context made on a CUDA device; see ss_forward.h). */
	int (*fwd_init)(ss_cuda_fwd **out, const ss_model *m, ss_dtype wdtype, int ubatch,
			char *errmsg);
	void (*fwd_free)(ss_cuda_fwd *g);
	size_t (*fwd_bytes)(const ss_cuda_fwd *g);
	int (*fwd_prefill)(ss_cuda_fwd *g, ss_forward_seq *seqs, int n_seqs, ss_logits_mode mode,
			   char *errmsg);
	int (*fwd_decode_begin)(ss_cuda_fwd *g, ss_state **states, int n, char *errmsg);
	int (*fwd_decode_next)(ss_cuda_fwd *g, const int32_t *tokens, float *logits, int32_t *ids,
			       int32_t n_ids, char *errmsg);
	int (*fwd_decode_end)(ss_cuda_fwd *g, char *errmsg);

	/* Benchmark: the best time in seconds of `reps` calls of the linear
	 * y[M][N] = x[M][K]·W[N][K]ᵀ with W in dtype wt (random data), after a
	 * warm-up; < 0 on error. For the GEMM floor of bench/gpu.sh. */
	double (*bench_linear)(int64_t M, int64_t N, int64_t K, ss_dtype wt, int reps);
} ss_cuda_api;

/* The plugin's one entry point: returns its table when abi == SS_CUDA_ABI,
 * else NULL. */
typedef const ss_cuda_api *(*ss_cuda_plugin_fn)(uint32_t abi);

/* The table of a CUDA device, NULL for the CPU. Borrowed from d. */
const ss_cuda_api *ss_device_cuda(const ss_device *d);
/* The GPU index a CUDA device was opened on (0 for the CPU). */
int ss_device_index(const ss_device *d);

#ifdef __cplusplus
}
#endif
#endif /* SS_DEVICE_H */
