/*
 * pickle.h — restricted unpickler for torch.save state_dict pickles
 * (internal to libss; not installed).
 *
 * It understands only what torch.save(state_dict) writes with pickle
 * protocol 2: an OrderedDict of tensors rebuilt by
 * torch._utils._rebuild_tensor_v2 from persistent storage ids. Any other
 * global is refused by name and nothing is ever executed: REDUCE is
 * interpreted for exactly two callables (OrderedDict() and
 * _rebuild_tensor_v2), BUILD only on a dict (it sets _metadata, ignored).
 * ref: Python Lib/pickletools.py (opcode table, protocol 2);
 *      torch/serialization.py _save() (persistent id tuple);
 *      torch/_utils.py _rebuild_tensor_v2 (argument order).
 */
#ifndef SS_PICKLE_H
#define SS_PICKLE_H

#include "ss.h"

#define SS_PICKLE_MAXDIM 8

/* One state_dict entry: a view of a typed storage. */
typedef struct {
	char *name;            /* state_dict key */
	char *storage_key;     /* persistent id key: zip entry <prefix>/data/<key> */
	ss_dtype dtype;        /* from the storage class (Float/Half/BFloat16) */
	int64_t storage_numel; /* elements in the whole storage */
	int64_t offset;        /* storage offset, elements */
	int ndim;
	int64_t shape[SS_PICKLE_MAXDIM];
	int64_t stride[SS_PICKLE_MAXDIM]; /* elements; >= 0 */
} ss_pickle_tensor;

/* Parses a torch data.pkl holding a state_dict.
 * buf: len bytes of pickle. On success *out is a malloc'ed array of *n
 * entries in pickle order (free with ss_pickle_tensors_free); every entry's
 * view lies inside its storage (checked). Non-tensor values are skipped.
 * Errors: SS_ERR_FORMAT ("pickle: refusing global os.system", unknown opcode,
 * stack misuse, truncated opcode argument), SS_ERR_TOO_LARGE (object or memo
 * limits), SS_ERR_NOMEM. errmsg (SS_ERRMSG_MAX) starts with "pickle: ". */
int ss_pickle_load_state_dict(const uint8_t *buf, size_t len,
                              ss_pickle_tensor **out, size_t *n, char *errmsg);

/* Frees an array returned by ss_pickle_load_state_dict (NULL is fine). */
void ss_pickle_tensors_free(ss_pickle_tensor *t, size_t n);

#endif /* SS_PICKLE_H */
