/* forward.cuh — the Mamba-2 forward pass on the GPU, behind ss_forward_*
 * (lib/forward.c calls these through the plugin table for a context made on
 * a CUDA device; the contracts are those of ss_forward.h and of the fwd_*
 * entries of ss_cuda_api in device_plugin.h). */
#pragma once
#include "common.cuh"

extern "C" int ss_cuda_fwd_init(ss_cuda_fwd **out, const ss_model *m, ss_dtype wdtype,
				int ubatch, char *errmsg);
extern "C" void ss_cuda_fwd_free(ss_cuda_fwd *g);
extern "C" size_t ss_cuda_fwd_bytes(const ss_cuda_fwd *g);
extern "C" int ss_cuda_fwd_prefill(ss_cuda_fwd *g, ss_forward_seq *seqs, int n_seqs,
				   ss_logits_mode mode, char *errmsg);
extern "C" int ss_cuda_fwd_decode_begin(ss_cuda_fwd *g, ss_state **states, int n, char *errmsg);
extern "C" int ss_cuda_fwd_decode_next(ss_cuda_fwd *g, const int32_t *tokens, float *logits,
				       int32_t *ids, int32_t n_ids, char *errmsg);
extern "C" int ss_cuda_fwd_decode_end(ss_cuda_fwd *g, char *errmsg);
