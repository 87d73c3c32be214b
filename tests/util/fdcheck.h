/* fdcheck.h — a gradient against central finite differences of an f32
 * forward, at a few elements of a tensor (test_train, test_train_bptc). */
#ifndef SS_TEST_FDCHECK_H
#define SS_TEST_FDCHECK_H

#include <stddef.h>
#include <stdint.h>

/* Checks grad[n], the gradient of loss(arg) w.r.t. v[n], at the element of
 * largest |grad| and two random ones (drawn with *rng) among those of at
 * least a tenth of it (below that the differences of an f32 forward are
 * mostly its rounding): v[i] ± h, h = step·max(1, |v[i]|), the exact f32
 * steps, v restored. Prints each mismatch, |grad − fd| > 2%·|fd| +
 * 1%·max|grad|, naming `what`, and returns their number. */
int test_fd_check(const char *what, double (*loss)(void *arg), void *arg, float *v,
		  const float *grad, size_t n, float step, uint64_t *rng);

#endif
