/* conv.cuh — the limit of the conv twins ss_conv1d_silu_cuda and
 * ss_conv1d_step_cuda (kernels/conv.cu; declared from SS_CUDA_OPS, as every
 * twin, in common.cuh): d_conv <= SS_CONV_MAX. */
#pragma once
#include "common.cuh"

#define SS_CONV_MAX 8
