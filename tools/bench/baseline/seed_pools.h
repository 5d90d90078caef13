/* SPDX-License-Identifier: MIT */
/*
 * The seed's three thread pools (seeds/001, chapter 06), ported to C with
 * pthreads as baselines for tools/bench/execbench.  The seed is the code
 * aorta started from, a 2006 game server's: its textbook thread pools
 * and its spin-yield-usleep lock (seed_lock.h) are the baselines.  Do not
 * use them for anything else: they are what aorta's executors must beat.
 *
 *	basic:	ThreadPool: one mutex, one condvar, one queue; a notify
 *		per task.
 *	steal:	WorkStealingPool: a mutex-guarded queue per worker; an idle
 *		worker tries its own queue, then every other queue, then
 *		sched_yield()s and tries again (the busy-yield idle loop).
 *	bp:	ThreadPoolWithBackpressure: one mutex, a bounded queue,
 *		notEmpty/notFull condvars, blocking enqueue, non-blocking
 *		try_enqueue.
 *
 * What was fixed, and only that (see seed_pools.c for the details):
 *  - the thief moved back() out and then pop()ped the front: the front
 *    task was lost unrun and the emptied std::function left at the back
 *    threw bad_function_call when its turn came.  It now takes and removes
 *    the same (back) element;
 *  - the work-stealing pool could lose tasks left in its queues when its
 *    workers exit: destroy runs whatever is left after the join;
 *  - the backpressure pool's destroy did not wake producers blocked in
 *    enqueue (they waited on notFull, which it never signalled), so a
 *    destroy with blocked producers hung: it now broadcasts notFull too.
 *
 * What was kept on purpose: one mutex per pool (basic, bp) shared by every
 * worker and producer, a condvar signal per task, the busy-yield idle loop,
 * the silent drop of a task enqueued into the backpressure pool after
 * shutdown (enqueue returns false so a benchmark can count it, which the
 * seed's void enqueue could not), and the deadlock of a worker that
 * enqueues into its own full backpressure pool.
 *
 * The seed's tasks are std::function<void()>; here a task is a function
 * and an argument, stored by value (16 bytes), so enqueueing allocates
 * nothing except when a queue grows (see struct seed_pool_ring).
 *
 * Every symbol is prefixed seed_pool_: this object is linked into every
 * benchmark.
 */
#ifndef AORTA_BENCH_SEED_POOLS_H
#define AORTA_BENCH_SEED_POOLS_H

#include <stdbool.h>
#include <stddef.h>

typedef void (*seed_pool_fn)(void *arg);

struct seed_pool_basic;
struct seed_pool_steal;
struct seed_pool_bp;

/* ThreadPool(numWorkers); NULL on failure. */
struct seed_pool_basic *seed_pool_basic_create(unsigned int nworkers);
/* ~ThreadPool(): runs every queued task, then joins. */
void seed_pool_basic_destroy(struct seed_pool_basic *p);
/* enqueue(task) */
void seed_pool_basic_enqueue(struct seed_pool_basic *p, seed_pool_fn fn,
			     void *arg);

/* WorkStealingPool(numWorkers); NULL on failure. */
struct seed_pool_steal *seed_pool_steal_create(unsigned int nworkers);
/* ~WorkStealingPool(): workers exit when they find no work; fixed to run
 * what is left over after the join. */
void seed_pool_steal_destroy(struct seed_pool_steal *p);
/* enqueue(task, preferredWorker): onto worker (preferred % nworkers). */
void seed_pool_steal_enqueue(struct seed_pool_steal *p, seed_pool_fn fn,
			     void *arg, unsigned int preferred);
/*
 * The index of the calling thread if it is one of p's workers, else -1.
 * Not in the seed (its tasks would have to capture the id themselves); the
 * benchmark uses it so that a task spawns onto its own worker's queue,
 * which is what the seed's design intends.
 */
int seed_pool_steal_self(const struct seed_pool_steal *p);

/* ThreadPoolWithBackpressure(numWorkers, maxQueue); NULL on failure. */
struct seed_pool_bp *seed_pool_bp_create(unsigned int nworkers,
					 size_t max_queue);
/* ~ThreadPoolWithBackpressure(): runs every queued task, then joins. */
void seed_pool_bp_destroy(struct seed_pool_bp *p);
/* enqueue(task): blocks while the queue is full; false if shutdown began
 * (the task is dropped, as in the seed). */
bool seed_pool_bp_enqueue(struct seed_pool_bp *p, seed_pool_fn fn, void *arg);
/* tryEnqueue(task): false at once if the queue is full. */
bool seed_pool_bp_try_enqueue(struct seed_pool_bp *p, seed_pool_fn fn,
			      void *arg);

#endif /* AORTA_BENCH_SEED_POOLS_H */
