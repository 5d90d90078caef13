// SPDX-License-Identifier: MIT
/*
 * The seed's three thread pools (seeds/001), ported faithfully to C with
 * pthreads.  Baselines only: pthread_mutex and pthread_cond are what the
 * seed uses (std::mutex, std::condition_variable), so they are right here.
 * See seed_pools.h for what was fixed and what was kept.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "seed_pools.h"

struct seed_pool_task {
	seed_pool_fn fn;
	void *arg;
};

/*
 * std::queue<std::function<void()>> is a std::deque: it allocates a block
 * every few pushes, and a std::function may allocate for its capture.  This
 * ring stores tasks by value and allocates only when it grows: it doubles
 * (malloc + copy, under the pool's lock, as the deque allocates under the
 * lock) and never shrinks, so memory is amortised, not per task.  A fixed
 * ring (the backpressure pool) is allocated once, at create.
 */
struct seed_pool_ring {
	struct seed_pool_task *buf;
	size_t cap; /* a power of two */
	size_t head; /* index of front() */
	size_t len;
};

#define SEED_POOL_RING_INIT 256

static int ring_init(struct seed_pool_ring *r, size_t cap)
{
	size_t c = 1;

	while (c < cap)
		c <<= 1;
	r->buf = calloc(c, sizeof(*r->buf));
	r->cap = c;
	r->head = 0;
	r->len = 0;
	return r->buf ? 0 : -1;
}

static void ring_free(struct seed_pool_ring *r)
{
	free(r->buf);
	r->buf = NULL;
}

static void ring_grow(struct seed_pool_ring *r)
{
	struct seed_pool_task *nb = malloc(2 * r->cap * sizeof(*nb));

	if (!nb) {
		/* std::bad_alloc would end the program the same way. */
		fputs("seed_pools: out of memory\n", stderr);
		abort();
	}
	for (size_t i = 0; i < r->len; i++)
		nb[i] = r->buf[(r->head + i) & (r->cap - 1)];
	free(r->buf);
	r->buf = nb;
	r->head = 0;
	r->cap *= 2;
}

/* push(): at the back. */
static void ring_push(struct seed_pool_ring *r, struct seed_pool_task t)
{
	if (r->len == r->cap)
		ring_grow(r);
	r->buf[(r->head + r->len) & (r->cap - 1)] = t;
	r->len++;
}

/* front() + pop(); the ring must not be empty. */
static struct seed_pool_task ring_pop_front(struct seed_pool_ring *r)
{
	struct seed_pool_task t = r->buf[r->head];

	r->head = (r->head + 1) & (r->cap - 1);
	r->len--;
	return t;
}

/* back() + remove that same element; the ring must not be empty. */
static struct seed_pool_task ring_pop_back(struct seed_pool_ring *r)
{
	r->len--;
	return r->buf[(r->head + r->len) & (r->cap - 1)];
}

static void name_thread(pthread_t t, const char *kind, unsigned int i)
{
	char name[32];

	snprintf(name, sizeof(name), "seed-%s%u", kind, i);
	pthread_setname_np(t, name);
}

/* ------------------------------------------------------------------------
 * ThreadPool: one mutex, one condvar, one queue.
 */

struct seed_pool_basic {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct seed_pool_ring tasks;
	bool shutdown;
	unsigned int nworkers;
	pthread_t *workers;
};

static void *basic_worker(void *arg)
{
	struct seed_pool_basic *p = arg;

	for (;;) {
		struct seed_pool_task t;

		pthread_mutex_lock(&p->mu);
		/* cv.wait(lock, [] { return !tasks.empty() || shutdown; }) */
		while (!p->tasks.len && !p->shutdown)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->shutdown && !p->tasks.len) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		t = ring_pop_front(&p->tasks);
		pthread_mutex_unlock(&p->mu);
		t.fn(t.arg);
	}
	return NULL;
}

struct seed_pool_basic *seed_pool_basic_create(unsigned int nworkers)
{
	struct seed_pool_basic *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->workers = calloc(nworkers, sizeof(*p->workers));
	if (!p->workers || ring_init(&p->tasks, SEED_POOL_RING_INIT)) {
		free(p->workers);
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	for (unsigned int i = 0; i < nworkers; i++) {
		if (pthread_create(&p->workers[i], NULL, basic_worker, p))
			abort(); /* std::thread throws: the seed dies too */
		name_thread(p->workers[i], "b", i);
	}
	p->nworkers = nworkers;
	return p;
}

void seed_pool_basic_destroy(struct seed_pool_basic *p)
{
	pthread_mutex_lock(&p->mu);
	p->shutdown = true;
	pthread_mutex_unlock(&p->mu);
	pthread_cond_broadcast(&p->cv);
	for (unsigned int i = 0; i < p->nworkers; i++)
		pthread_join(p->workers[i], NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	ring_free(&p->tasks);
	free(p->workers);
	free(p);
}

void seed_pool_basic_enqueue(struct seed_pool_basic *p, seed_pool_fn fn,
			     void *arg)
{
	pthread_mutex_lock(&p->mu);
	ring_push(&p->tasks, (struct seed_pool_task){ fn, arg });
	pthread_mutex_unlock(&p->mu);
	pthread_cond_signal(&p->cv); /* notify_one, for every task */
}

/* ------------------------------------------------------------------------
 * WorkStealingPool: a mutex-guarded queue per worker, busy-yield idle.
 */

struct seed_pool_steal_worker {
	pthread_mutex_t mu;
	struct seed_pool_ring q;
	pthread_t thread;
	struct seed_pool_steal *pool;
	unsigned int id;
} __attribute__((aligned(64)));

struct seed_pool_steal {
	atomic_bool shutdown;
	unsigned int nworkers;
	struct seed_pool_steal_worker *w;
};

static __thread const struct seed_pool_steal *steal_self_pool;
static __thread int steal_self_id = -1;

static void *steal_worker(void *arg)
{
	struct seed_pool_steal_worker *me = arg;
	struct seed_pool_steal *p = me->pool;
	unsigned int n = p->nworkers;

	steal_self_pool = p;
	steal_self_id = (int)me->id;
	for (;;) {
		struct seed_pool_task t = { NULL, NULL };

		/* Own queue first, from the front. */
		pthread_mutex_lock(&me->mu);
		if (me->q.len)
			t = ring_pop_front(&me->q);
		pthread_mutex_unlock(&me->mu);

		if (!t.fn) {
			/*
			 * Then steal from the others.  The seed moved back()
			 * out and pop()ped the front: the front task was
			 * lost, and the emptied std::function left at the
			 * back threw when it came up.  Fixed: take and
			 * remove the same, back, element.
			 */
			for (unsigned int i = 1; i < n; i++) {
				struct seed_pool_steal_worker *v =
					&p->w[(me->id + i) % n];

				pthread_mutex_lock(&v->mu);
				if (v->q.len) {
					t = ring_pop_back(&v->q);
					pthread_mutex_unlock(&v->mu);
					break;
				}
				pthread_mutex_unlock(&v->mu);
			}
		}

		if (!t.fn) {
			/* Kept: the busy-yield idle loop ("wait (omitted)"). */
			if (atomic_load_explicit(&p->shutdown,
						 memory_order_relaxed))
				break;
			sched_yield();
			continue;
		}
		t.fn(t.arg);
	}
	return NULL;
}

struct seed_pool_steal *seed_pool_steal_create(unsigned int nworkers)
{
	struct seed_pool_steal *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->w = aligned_alloc(64, nworkers * sizeof(*p->w));
	if (!p->w) {
		free(p);
		return NULL;
	}
	memset(p->w, 0, nworkers * sizeof(*p->w));
	atomic_init(&p->shutdown, false);
	p->nworkers = nworkers;
	for (unsigned int i = 0; i < nworkers; i++) {
		pthread_mutex_init(&p->w[i].mu, NULL);
		if (ring_init(&p->w[i].q, SEED_POOL_RING_INIT))
			abort();
		p->w[i].pool = p;
		p->w[i].id = i;
	}
	/* As the seed: every Worker exists before the first thread starts. */
	for (unsigned int i = 0; i < nworkers; i++) {
		if (pthread_create(&p->w[i].thread, NULL, steal_worker,
				   &p->w[i]))
			abort();
		name_thread(p->w[i].thread, "s", i);
	}
	return p;
}

void seed_pool_steal_destroy(struct seed_pool_steal *p)
{
	bool more = true;

	atomic_store_explicit(&p->shutdown, true, memory_order_relaxed);
	for (unsigned int i = 0; i < p->nworkers; i++)
		pthread_join(p->w[i].thread, NULL);
	/*
	 * Fixed: a worker leaves as soon as it sees shutdown and finds no
	 * work, so a task enqueued after every worker left (or onto the
	 * queue of one that left) was lost.  Run what is left, here.
	 */
	while (more) {
		more = false;
		for (unsigned int i = 0; i < p->nworkers; i++) {
			struct seed_pool_steal_worker *w = &p->w[i];
			struct seed_pool_task t;

			pthread_mutex_lock(&w->mu);
			if (!w->q.len) {
				pthread_mutex_unlock(&w->mu);
				continue;
			}
			t = ring_pop_front(&w->q);
			pthread_mutex_unlock(&w->mu);
			t.fn(t.arg);
			more = true;
		}
	}
	for (unsigned int i = 0; i < p->nworkers; i++) {
		pthread_mutex_destroy(&p->w[i].mu);
		ring_free(&p->w[i].q);
	}
	free(p->w);
	free(p);
}

void seed_pool_steal_enqueue(struct seed_pool_steal *p, seed_pool_fn fn,
			     void *arg, unsigned int preferred)
{
	struct seed_pool_steal_worker *w = &p->w[preferred % p->nworkers];

	pthread_mutex_lock(&w->mu);
	ring_push(&w->q, (struct seed_pool_task){ fn, arg });
	pthread_mutex_unlock(&w->mu);
}

int seed_pool_steal_self(const struct seed_pool_steal *p)
{
	return steal_self_pool == p ? steal_self_id : -1;
}

/* ------------------------------------------------------------------------
 * ThreadPoolWithBackpressure: bounded queue, notEmpty and notFull.
 */

struct seed_pool_bp {
	pthread_mutex_t mu;
	pthread_cond_t not_empty, not_full;
	struct seed_pool_ring tasks; /* fixed: never grows past max */
	size_t max;
	bool shutdown;
	unsigned int nworkers;
	pthread_t *workers;
};

static void *bp_worker(void *arg)
{
	struct seed_pool_bp *p = arg;

	for (;;) {
		struct seed_pool_task t;

		pthread_mutex_lock(&p->mu);
		while (!p->tasks.len && !p->shutdown)
			pthread_cond_wait(&p->not_empty, &p->mu);
		if (p->shutdown && !p->tasks.len) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		t = ring_pop_front(&p->tasks);
		/* notFull.notify_one() under the lock, per task, as the seed */
		pthread_cond_signal(&p->not_full);
		pthread_mutex_unlock(&p->mu);
		t.fn(t.arg);
	}
	return NULL;
}

struct seed_pool_bp *seed_pool_bp_create(unsigned int nworkers,
					 size_t max_queue)
{
	struct seed_pool_bp *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->workers = calloc(nworkers, sizeof(*p->workers));
	if (!p->workers || !max_queue || ring_init(&p->tasks, max_queue)) {
		free(p->workers);
		free(p);
		return NULL;
	}
	p->max = max_queue;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->not_empty, NULL);
	pthread_cond_init(&p->not_full, NULL);
	for (unsigned int i = 0; i < nworkers; i++) {
		if (pthread_create(&p->workers[i], NULL, bp_worker, p))
			abort();
		name_thread(p->workers[i], "p", i);
	}
	p->nworkers = nworkers;
	return p;
}

void seed_pool_bp_destroy(struct seed_pool_bp *p)
{
	pthread_mutex_lock(&p->mu);
	p->shutdown = true;
	pthread_mutex_unlock(&p->mu);
	pthread_cond_broadcast(&p->not_empty);
	/*
	 * Fixed: the seed only woke the workers.  A producer blocked in
	 * enqueue() waits on notFull for "room || shutdown"; nobody told
	 * it, so with the workers gone it slept forever (and a worker
	 * blocked enqueueing into its own full pool was never joined).
	 */
	pthread_cond_broadcast(&p->not_full);
	for (unsigned int i = 0; i < p->nworkers; i++)
		pthread_join(p->workers[i], NULL);
	pthread_cond_destroy(&p->not_full);
	pthread_cond_destroy(&p->not_empty);
	pthread_mutex_destroy(&p->mu);
	ring_free(&p->tasks);
	free(p->workers);
	free(p);
}

bool seed_pool_bp_enqueue(struct seed_pool_bp *p, seed_pool_fn fn, void *arg)
{
	pthread_mutex_lock(&p->mu);
	while (p->tasks.len >= p->max && !p->shutdown)
		pthread_cond_wait(&p->not_full, &p->mu);
	if (p->shutdown) {
		/* Kept: the seed returns here and the task is gone. */
		pthread_mutex_unlock(&p->mu);
		return false;
	}
	ring_push(&p->tasks, (struct seed_pool_task){ fn, arg });
	pthread_cond_signal(&p->not_empty);
	pthread_mutex_unlock(&p->mu);
	return true;
}

bool seed_pool_bp_try_enqueue(struct seed_pool_bp *p, seed_pool_fn fn,
			      void *arg)
{
	pthread_mutex_lock(&p->mu);
	if (p->tasks.len >= p->max) {
		pthread_mutex_unlock(&p->mu);
		return false;
	}
	/* Kept: like the seed, no shutdown check here. */
	ring_push(&p->tasks, (struct seed_pool_task){ fn, arg });
	pthread_cond_signal(&p->not_empty);
	pthread_mutex_unlock(&p->mu);
	return true;
}
