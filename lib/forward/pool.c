/*
 * pool.c — fork-join thread pool for the forward pass. See pool.h.
 *
 * A run is published as one 64-bit ticket, generation << 32 | next task
 * index. Every thread, the caller included, claims task indices with a
 * compare-and-swap on the ticket, so a claim is only ever made for the
 * current run: a worker that wakes late (descheduled by another process on a
 * small machine) finds the run finished or moved on and takes nothing. The
 * caller waits for the tasks to be done, not for the workers to check in,
 * so a preempted idle worker never stalls a run.
 *
 * Sleep/wake: a worker registers as a sleeper and re-reads the ticket under
 * the mutex before waiting; the caller stores the ticket and then reads the
 * sleeper count (both seq_cst), so a wake-up cannot be missed.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ss.h"
#include "forward/pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spins before a worker sleeps: long enough to bridge the gaps between the
 * runs of one forward call (microseconds), short enough (about a
 * millisecond) not to burn a core for long after it. */
#define SPIN_ITERS 50000
/* Spins of the caller waiting for running tasks before it starts yielding. */
#define WAIT_SPINS 20000

struct ss_pool {
	int n_threads;
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic uint64_t ticket;     /* gen << 32 | next task index */
	_Atomic int64_t n_tasks;     /* of the current run */
	_Atomic(ss_pool_fn) fn;
	_Atomic(void *) arg;
	_Atomic int64_t done;        /* tasks of the current run finished */
	_Atomic int sleepers;        /* workers blocked (or about to block) on cv */
	_Atomic int stop;
	uint32_t gen;                /* caller's copy of the generation */
};

typedef struct {
	ss_pool *p;
	int id;
} worker_arg;

/* Task index of a ticket while its run is being published: no claims. */
#define CLOSED UINT32_MAX

static inline uint32_t gen_of(uint64_t t)
{
	return (uint32_t)(t >> 32);
}

/* Claims and runs tasks of generation g until none is left or the run is
 * over. */
static void drain(ss_pool *p, uint32_t g, int thread)
{
	for (;;) {
		uint64_t t = atomic_load(&p->ticket);
		if ((uint32_t)t == CLOSED) {
			/* the next run is being published */
			if (gen_of(t) != g)
				return;
			cpu_relax();
			continue;
		}
		const int64_t n = atomic_load(&p->n_tasks);
		const ss_pool_fn fn = atomic_load(&p->fn);
		void *const arg = atomic_load(&p->arg);
		const int64_t i = (int64_t)(uint32_t)t;
		if (gen_of(t) != g || i >= n)
			return;
		if (!atomic_compare_exchange_weak(&p->ticket, &t, t + 1))
			continue;
		/* The claim succeeded, so the ticket was still open for run g when
		 * fn/arg/n were read after it: publish() closes the ticket before
		 * it changes them, and that would have failed the claim. */
		fn(arg, i, thread);
		atomic_fetch_add(&p->done, 1);
	}
}

static void *worker(void *v)
{
	worker_arg wa = *(worker_arg *)v;
	ss_pool *p = wa.p;
	uint32_t seen = 0;

	free(v);
	for (;;) {
		int spins = 0;
		uint32_t g;
		while ((g = gen_of(atomic_load(&p->ticket))) == seen && spins < SPIN_ITERS) {
			cpu_relax();
			spins++;
		}
		if (g == seen) {
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while ((g = gen_of(atomic_load(&p->ticket))) == seen)
				pthread_cond_wait(&p->cv, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
		}
		seen = g;
		if (atomic_load(&p->stop))
			break;
		drain(p, g, wa.id);
	}
	return NULL;
}

static void publish(ss_pool *p, int64_t n_tasks, ss_pool_fn fn, void *arg)
{
	p->gen++;
	/* Close the ticket first: a thread still looping in drain() for the
	 * previous run may have read the old ticket and be about to claim with
	 * it; once the ticket has changed its claim fails, so it can never run
	 * a task of this run with this run's fn/arg or count it as done. */
	atomic_store(&p->ticket, (uint64_t)p->gen << 32 | CLOSED);
	atomic_store(&p->fn, fn);
	atomic_store(&p->arg, arg);
	atomic_store(&p->n_tasks, n_tasks);
	atomic_store(&p->done, 0);
	atomic_store(&p->ticket, (uint64_t)p->gen << 32);
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
}

int ss_pool_init(ss_pool **out, int n_threads)
{
	ss_pool *p;
	int i;

	*out = NULL;
	if (n_threads < 1)
		return SS_ERR_INVALID;
	p = calloc(1, sizeof(*p));
	if (!p)
		return SS_ERR_NOMEM;
	p->n_threads = n_threads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	if (n_threads > 1) {
		p->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
		if (!p->threads) {
			p->n_threads = 1;
			ss_pool_free(p);
			return SS_ERR_NOMEM;
		}
	}
	for (i = 1; i < n_threads; i++) {
		worker_arg *wa = malloc(sizeof(*wa));
		if (wa) {
			wa->p = p;
			wa->id = i;
		}
		if (!wa || pthread_create(&p->threads[i - 1], NULL, worker, wa) != 0) {
			free(wa);
			p->n_threads = i; /* join only the ones started */
			ss_pool_free(p);
			return SS_ERR_NOMEM;
		}
	}
	*out = p;
	return 0;
}

void ss_pool_free(ss_pool *p)
{
	int i;

	if (!p)
		return;
	if (p->n_threads > 1) {
		atomic_store(&p->stop, 1);
		publish(p, 0, NULL, NULL);
		for (i = 1; i < p->n_threads; i++)
			pthread_join(p->threads[i - 1], NULL);
	}
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->threads);
	free(p);
}

int ss_pool_threads(const ss_pool *p)
{
	return p->n_threads;
}

void ss_pool_run(ss_pool *p, int64_t n_tasks, ss_pool_fn fn, void *arg)
{
	int64_t i;
	int spins = 0;

	if (n_tasks <= 0)
		return;
	if (p->n_threads == 1 || n_tasks == 1) {
		for (i = 0; i < n_tasks; i++)
			fn(arg, i, 0);
		return;
	}
	publish(p, n_tasks, fn, arg);
	drain(p, p->gen, 0);
	while (atomic_load(&p->done) < n_tasks) {
		if (spins < WAIT_SPINS) {
			cpu_relax();
			spins++;
		} else
			sched_yield();
	}
}
