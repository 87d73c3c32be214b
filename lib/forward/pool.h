/*
 * pool.h — a small fork-join thread pool (internal to libss).
 *
 * ss_pool_run() hands n_tasks task indices to the pool's threads and the
 * caller, and returns when all are done. Workers spin briefly between runs
 * (the forward pass issues many short runs back to back) and then sleep on a
 * condition variable, so an idle pool costs no CPU.
 */
#ifndef SS_POOL_H
#define SS_POOL_H

#include <stdint.h>

typedef struct ss_pool ss_pool;

/* fn(arg, task, thread): task in [0, n_tasks), thread in [0, n_threads)
 * (0 = the caller). Tasks of one run may execute in any order, concurrently. */
typedef void (*ss_pool_fn)(void *arg, int64_t task, int thread);

/* Starts n_threads-1 worker threads (n_threads >= 1). Returns 0, or
 * SS_ERR_NOMEM / SS_ERR_INVALID. */
int ss_pool_init(ss_pool **out, int n_threads);
/* Joins the workers and frees the pool. NULL is a no-op. */
void ss_pool_free(ss_pool *p);
int ss_pool_threads(const ss_pool *p);
/* Runs fn over [0, n_tasks) and waits for all of it. Not reentrant: one run
 * at a time, from one thread. */
void ss_pool_run(ss_pool *p, int64_t n_tasks, ss_pool_fn fn, void *arg);

#endif /* SS_POOL_H */
