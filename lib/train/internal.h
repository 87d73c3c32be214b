/*
 * lib/train/internal.h — INTERNAL to libss (lib/train/train.c, lib/train/train_bptc.c):
 * what the objectives built on ss_train need to know of a trainer.
 */
#ifndef SS_TRAIN_INTERNAL_H
#define SS_TRAIN_INTERNAL_H

#include "ss.h"

/* t's model config and its batch limits (ss_train_init's max_tokens,
 * max_seqs). */
void ss_train_shape(const ss_train *t, ss_model_config *c, int64_t *max_tokens, int *max_seqs);

#endif /* SS_TRAIN_INTERNAL_H */
