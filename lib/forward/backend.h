/*
 * backend.h — INTERNAL to libss and its CUDA plugin: the table of ops the
 * one forward driver (lib/forward/forward.c) runs a Mamba-2 pass with. A backend is
 * a model put on a device with the scratch of one pass: the CPU's
 * (lib/forward/backend_cpu.c: the ops of ss_ops.h over a thread pool) or the GPU's
 * (kernels/forward.cu: the CUDA twins on one stream, handed over by the
 * plugin's table, device_plugin.h).
 *
 * The driver cuts a call into passes (ss_pass) and, per pass, calls
 * pass_begin, embed, then per layer rmsnorm, linear (in_proj), conv, dt,
 * scan, gated_norm (or mixer, the four in one call), linear (out_proj),
 * then the output ops. Every op works
 * on the backend's own activation rows, as lib/forward/forward.c's comment names
 * them (H, U, ZXD, XBC, DT, Y, then the output rows and the logits buffer);
 * the arguments say which layer and which rows. Ops return 0 or an SS_ERR_*
 * code (SS_ERR_DEVICE, SS_ERR_NOMEM); error() then says why. A GPU op may
 * run asynchronously: its host outputs are there after sync().
 * ref: lib/forward/forward.c (the driver), ss_ops.h (the ops' math).
 */
#ifndef SS_BACKEND_H
#define SS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ss.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rows of one sequence in a pass. The segments of a pass are
 * consecutive sequences: segment k is sequence segs[0].seq + k (which is
 * also its state slot, see states_in); an empty sequence has n = 0. */
typedef struct {
	int seq;       /* index into the pass's seqs */
	int64_t start; /* first token of the segment within its sequence */
	int64_t n;     /* tokens */
	int64_t row0;  /* first row of the segment in the pass */
} ss_segment;

/* One pass: T <= ubatch rows of nseg segments, packed in order. */
typedef struct {
	const ss_forward_seq *seqs; /* the call's sequences (tokens, state) */
	const ss_segment *segs;     /* [nseg] */
	int nseg;
	int64_t T;
	int blocked;    /* deterministic: results must not depend on the batch */
	int decode;     /* one token per sequence, states in slots (decode_next) */
	int state_only; /* the last layer's mixer output (Y) is not needed */
} ss_pass;

typedef enum {
	SS_LINEAR_IN_PROJ,  /* ZXD = U · in_projᵀ */
	SS_LINEAR_OUT_PROJ, /* H += Y · out_projᵀ */
} ss_linear_which;

typedef struct ss_backend_ops {
	/* rows of the logits buffer (lm_head with dst NULL); most rows of a
	 * decode step (0: any) */
	int64_t lm_rows, step_rows;
	int deterministic; /* supports ss_pass.blocked */
	void (*free)(void *be);
	size_t (*bytes)(const void *be); /* host or device bytes held */
	const char *(*error)(void *be);  /* why the last op failed */

	/* States: copy states[0..n) into the device's slots 0..n-1 / back.
	 * NULL for the CPU, whose ops read and write the states of the pass's
	 * seqs in place. */
	int (*states_in)(void *be, ss_state *const *states, int n);
	int (*states_out)(void *be, ss_state *const *states, int n);

	/* Before the ops of a pass: its tokens and row layout (a GPU stages and
	 * uploads them). Outside a decode-step capture. */
	int (*pass_begin)(void *be, const ss_pass *p);

	/* The ops of a pass, in the driver's order (ss_ops.h twins):
	 *   embed       H = embedding[tokens]
	 *   rmsnorm     U = rmsnorm(H) · layers[l].norm
	 *   linear      in_proj or out_proj (ss_linear_which); in_proj may leave
	 *               ZXD's z columns unwritten when p->state_only on the
	 *               last layer (nothing reads them: no gated_norm)
	 *   conv        XBC = silu(conv1d(ZXD's xBC columns)), conv states
	 *   dt          DT = softplus(ZXD's dt columns + dt_bias)
	 *   scan        Y (none when p->state_only on the last layer), ssm
	 *               states and logdecay
	 *   gated_norm  Y = rmsnorm_grouped(Y · silu(ZXD's z columns)) · gnorm */
	int (*embed)(void *be, const ss_pass *p);
	int (*rmsnorm)(void *be, const ss_pass *p, int layer);
	int (*linear)(void *be, const ss_pass *p, int layer, ss_linear_which w);
	int (*conv)(void *be, const ss_pass *p, int layer);
	int (*dt)(void *be, const ss_pass *p, int layer);
	int (*scan)(void *be, const ss_pass *p, int layer);
	int (*gated_norm)(void *be, const ss_pass *p, int layer);

	/* Outputs. norm_f: output rows [0, n) = rmsnorm(H rows) · norm_f, the
	 * H rows being rows[0..n) (host array, rows[i] >= i) or, rows NULL,
	 * r0.. r0+n-1. hidden: host dst[n][d_model] = output rows [i, i+n).
	 * lm_head: the logits of output rows [i, i+n) into host dst
	 * [n][vocab_padded], or (dst NULL, n <= lm_rows or a decode step's rows)
	 * into the logits buffer's rows [0, n). argmax: ids buffer [0, n) =
	 * argmax of logits buffer rows over columns [0, n_ids). logits, ids:
	 * host copies of logits buffer rows [k, k+n) / ids [0, n). */
	int (*norm_f)(void *be, const int64_t *rows, int64_t r0, int64_t n);
	int (*hidden)(void *be, float *dst, int64_t i, int64_t n);
	int (*lm_head)(void *be, int64_t i, int64_t n, float *dst);
	int (*argmax)(void *be, int64_t n, int32_t n_ids);
	int (*logits)(void *be, float *dst, int64_t k, int64_t n);
	int (*ids)(void *be, int32_t *dst, int64_t n);

	/* Waits for the ops queued so far (NULL: ops are synchronous). */
	int (*sync)(void *be);

	/* Decode-step capture (NULL: none). graph_begin: *replayed = 1 when a
	 * step recorded for this pass's shape and `key` (the step's outputs)
	 * was replayed, and the driver skips the ops; else it runs them, which
	 * may be recording. graph_end (after the ops, with their error):
	 * finishes a recording and replays it; *again = 1 when recording
	 * failed and the driver must run the ops once more, plainly. */
	int (*graph_begin)(void *be, const ss_pass *p, int key, int *replayed);
	int (*graph_end)(void *be, int err, int *again);

	/* conv, dt, scan and gated_norm of a layer (gated_norm skipped as the
	 * driver skips it: p->state_only on the last layer) in one call, for a
	 * backend that joins them (NULL: the driver calls the four). */
	int (*mixer)(void *be, const ss_pass *p, int layer);

	/* 1: scan starts the first segment (start 0) of a fresh sequence
	 * (ss_forward_seq.fresh) from ssm = 0 without reading it; 0 (the
	 * GPU's): the driver zeroes that ssm first. The driver zeroes the fresh
	 * states' conv and logdecay either way (0.5 MB at the 130m shape,
	 * against 19 MB of ssm). */
	int fresh_ssm;
} ss_backend_ops;

/* The CPU backend (lib/forward/backend_cpu.c): m's weights used in place (borrowed,
 * must outlive it), n_threads >= 1 workers, scratch for ubatch rows.
 * Returns 0 with *be and *ops set, or SS_ERR_NOMEM / SS_ERR_* with errmsg. */
int ss_backend_cpu_init(void **be, const ss_backend_ops **ops, const ss_model *m, int n_threads,
			int64_t ubatch, char *errmsg);

#ifdef __cplusplus
}
#endif
#endif /* SS_BACKEND_H */
