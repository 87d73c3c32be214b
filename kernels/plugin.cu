/*
 * plugin.cu — the entry point of libss_cuda.so: the ss_cuda_api table
 * (lib/forward/device_plugin.h; its op slots from SS_CUDA_OPS) with the
 * layouts nvcc compiled, the device query, memory helpers, and the error
 * record behind last_error().
 *
 * device_count() must never fail: on a machine with the plugin but no
 * driver or no GPU, cudaGetDeviceCount returns an error, which means 0
 * devices (and "auto" falls back to the CPU).
 * ref: lib/forward/device.c (the loader); docs/DESIGN.md §5.
 */
#include <stdio.h>
#include <string.h>

#include "forward.cuh"
#include "linear.cuh"

static thread_local char last_err[256] = "no error";

int ss_cuda_note(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	snprintf(last_err, sizeof(last_err), "%s: %s", what, cudaGetErrorString(e));
	return SS_ERR_DEVICE;
}

void ss_cuda_note_msg(const char *what, const char *detail)
{
	snprintf(last_err, sizeof(last_err), "%s: %s", what, detail);
}

const char *ss_cuda_last_error(void)
{
	return last_err;
}

static int device_count(void)
{
	int n = 0;
	const cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		ss_cuda_note(e, "cudaGetDeviceCount");
		cudaGetLastError();
		return 0;
	}
	if (n == 0)
		ss_cuda_note_msg("cudaGetDeviceCount", "no device");
	return n;
}

static int device_select(int dev, char *name, size_t name_len, size_t *mem_bytes)
{
	cudaDeviceProp p;
	if (ss_cuda_note(cudaSetDevice(dev), "cudaSetDevice") ||
	    ss_cuda_note(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties"))
		return SS_ERR_DEVICE;
	if (p.major < 8) {
		ss_cuda_note_msg("device", "compute capability below 8.0 (this build: sm_80, sm_90)");
		return SS_ERR_DEVICE;
	}
	if (name && name_len)
		snprintf(name, name_len, "%s, sm_%d%d", p.name, p.major, p.minor);
	if (mem_bytes)
		*mem_bytes = p.totalGlobalMem;
	return 0;
}

static void *dmalloc(size_t bytes)
{
	void *p = NULL;
	if (ss_cuda_note(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc"))
		return NULL;
	return p;
}

static void dfree(void *p)
{
	cudaFree(p);
}

static int h2d(void *dst, const void *src, size_t bytes)
{
	return ss_cuda_note(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "h2d");
}

static int d2h(void *dst, const void *src, size_t bytes)
{
	return ss_cuda_note(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "d2h");
}

static int sync_all(void)
{
	return ss_cuda_note(cudaDeviceSynchronize(), "sync");
}

static ss_cuda_blas *blas_create(ss_cuda_stream st)
{
	return ss_cuda_blas_create(st, 0);
}

#define STR2(x) #x
#define STR(x) STR2(x)

/* The types shared with libss as nvcc lays them out: lib/forward/device.c compares
 * them with its own at load (ss_cuda_api_check). */
static const ss_cuda_layout layout[] = SS_CUDA_LAYOUT_INIT;

/* Positional, in the order of ss_cuda_api's fields; the op slots from
 * SS_CUDA_OPS. */
#define SS_CUDA_FILL_(op, ret, params) ss_##op##_cuda,
static const ss_cuda_api api = {
	SS_CUDA_ABI,
	sizeof(ss_cuda_api),
	"CUDA " STR(__CUDACC_VER_MAJOR__) "." STR(__CUDACC_VER_MINOR__) ", sm_80 sm_90",
	layout,
	device_count,
	device_select,
	ss_cuda_last_error,
	ss_cuda_backend_init,
	ss_cuda_bench_linear,
	dmalloc,
	dfree,
	h2d,
	d2h,
	sync_all,
	blas_create,
	ss_cuda_blas_free,
	SS_CUDA_OPS(SS_CUDA_FILL_)
};

extern "C" __attribute__((visibility("default"))) const ss_cuda_api *ss_cuda_plugin(uint32_t abi)
{
	return abi == SS_CUDA_ABI ? &api : NULL;
}
