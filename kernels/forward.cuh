/* forward.cuh — the GPU backend of the forward driver (lib/forward/forward.c runs it
 * through the plugin table's backend_init for a context made on a CUDA
 * device; the contracts are those of backend.h and of backend_init in
 * device_plugin.h). */
#pragma once
#include "common.cuh"

extern "C" int ss_cuda_backend_init(void **be, const ss_backend_ops **ops, const ss_model *m,
				    int ubatch, char *errmsg);
