/* SPDX-License-Identifier: MIT */
/*
 * Executors: a fixed set of worker threads running intrusive work items.
 *
 * One interface over two queue disciplines:
 *	AO_EXEC_SHARED	one FIFO for every worker, guarded by the sync/ lock;
 *	AO_EXEC_STEAL	a Chase-Lev ring per worker (LIFO for its owner,
 *			stolen FIFO by the others) plus an injector for
 *			submissions from outside the pool.
 * Either may be bounded (capacity: items accepted but not yet started) with
 * a block or fail policy.  Idle workers park on an event count and burn no
 * CPU.  See core/exec.c for the design.
 *
 * Every function returns 0 or a negative errno:
 *	-ESHUTDOWN	ao_exec_shutdown()/ao_exec_destroy() has started;
 *	-EAGAIN		the executor is full (fail policy, or try_submit);
 *	-EDEADLK	drain/destroy called from one of the executor's workers;
 *	-EINVAL		a bad argument.
 * An accepted item always runs exactly once; a refused one is not queued.
 *
 * Submitting from one of the executor's own workers: the item goes to that
 * worker's deque (AO_EXEC_STEAL) or the shared queue, never blocks, and if
 * the executor is full under the block policy the item runs at once,
 * inline, on the submitting worker (see core/exec.c: "Bound").  Items run
 * in no particular order (use a strand for order).  ao_exec_destroy() must
 * not race with calls that start after it returns.  A worker of one
 * executor that blocks on another (a full submit, a group wait) is only a
 * thread outside that other pool: two pools that wait on each other can
 * deadlock.
 */
#ifndef AORTA_CORE_EXEC_H
#define AORTA_CORE_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <aorta/compiler.h>
#include <aorta/core/call.h>
#include <aorta/core/work.h>

/* Queue discipline. */
enum ao_exec_kind {
	AO_EXEC_SHARED = 0, /* one shared queue */
	AO_EXEC_STEAL = 1, /* per-worker deques, work stealing */
};

/* What a submit does when a bounded executor is full. */
enum ao_exec_policy {
	AO_EXEC_BLOCK = 0, /* wait for room (a worker runs the item inline) */
	AO_EXEC_FAIL = 1, /* return -EAGAIN */
};

/* Worker threads are named name_prefix + index ("ao-w0", "ao-w1", ...). */
#define AO_EXEC_NAME_DEFAULT "ao-w"
/* Most workers one executor may have. */
#define AO_EXEC_MAX_WORKERS 1024u
/* Slots in each worker's deque (AO_EXEC_STEAL); a power of two. */
#define AO_EXEC_DEQUE_SIZE 256u
/* A worker's blocking submit to a full executor runs the item inline, up
 * to this nesting depth; deeper, it queues the item beyond the bound. */
#define AO_EXEC_INLINE_MAX 32u
/* Workers give the slots of started items back in batches of up to this
 * many (capacity / (8 * workers) at least 1), so while they are busy a
 * bounded executor may refuse up to an eighth of its capacity early. */
#define AO_EXEC_CREDIT_MAX 32
/* The largest capacity: slots are counted in 32 bits (core/exec.c),
 * with room above it for the items a pool may queue beyond its bound. */
#define AO_EXEC_CAPACITY_MAX ((size_t)1 << 30)
/* Default idle spin before a worker parks, in nanoseconds. */
#define AO_EXEC_DEFAULT_SPIN_NS 20000u

struct ao_exec_config {
	enum ao_exec_kind kind; /* queue discipline */
	unsigned int workers; /* 0: ao_cpu_count() */
	size_t capacity; /* most items queued, not started; 0: no bound;
			  * at most AO_EXEC_CAPACITY_MAX */
	enum ao_exec_policy policy; /* when full: block or fail */
	const char *name; /* thread name prefix; NULL: "ao-w" */
	bool pin; /* pin worker i to the i-th CPU of the affinity mask */
	uint32_t spin_ns; /* idle spin before parking; 0: the default */
};

#define AO_EXEC_CONFIG_INIT                                          \
	{                                                            \
		.kind = AO_EXEC_SHARED, .workers = 0, .capacity = 0, \
		.policy = AO_EXEC_BLOCK, .name = NULL, .pin = false, \
		.spin_ns = 0,                                        \
	}

/* Totals over the executor (all counters since create). */
struct ao_exec_stats {
	uint64_t submitted; /* accepted submissions (queued or inline) */
	uint64_t executed; /* items run by workers (queued or inline); not
			    * those other threads run (ao_io_stats.assisted) */
	uint64_t inlined; /* of executed: run inline by a full worker submit */
	uint64_t rejected; /* refused: -EAGAIN or -ESHUTDOWN */
	uint64_t stolen; /* items taken from another worker's deque */
	uint64_t overflowed; /* items moved from a full deque to the injector */
	uint64_t parks; /* times a worker went to sleep */
	uint64_t wakeups; /* sleeps ended by a notify */
	uint64_t notifies; /* futex wakes issued by submits */
	uint64_t queued; /* items queued now (a snapshot) */
	unsigned int workers; /* worker threads */
};

/* One worker's counters. */
struct ao_exec_worker_stats {
	uint64_t executed; /* items this worker ran */
	uint64_t inlined; /* of executed: run inline by a full submit */
	uint64_t stolen; /* items it stole from others */
	uint64_t stolen_from; /* items others stole from it */
	uint64_t overflowed; /* items it moved to the injector */
	uint64_t parks; /* times it went to sleep */
	uint64_t wakeups; /* of parks: ended by a notify */
	uint64_t depth; /* items in its deque now (steal only) */
};

struct ao_exec;

/* Create an executor and start its workers; *out is set on success.
 * -EINVAL for a bad config, -ENOMEM, or -errno from pthread_create. */
AO_API int ao_exec_create(const struct ao_exec_config *cfg,
			  struct ao_exec **out);
/* Stop accepting, run everything accepted, join the workers, free. */
AO_API int ao_exec_destroy(struct ao_exec *ex);
/* Stop accepting (submits return -ESHUTDOWN); does not wait. */
AO_API void ao_exec_shutdown(struct ao_exec *ex);
/* Submit an item; when full, the policy says whether to wait. */
AO_API int ao_exec_submit(struct ao_exec *ex, struct ao_work *work);
/* Submit an item if there is room now; never blocks (-EAGAIN if full). */
AO_API int ao_exec_try_submit(struct ao_exec *ex, struct ao_work *work);
/* Run fn(arg) on ex, as ao_exec_submit() would an item (core/call.h): the
 * item comes from the calling thread's cache.  Refused (-EAGAIN,
 * -ESHUTDOWN, -ENOMEM, -EINVAL): fn is not run and arg not touched. */
AO_API int ao_exec_call(struct ao_exec *ex, ao_call_fn fn, void *arg);
/* Same, but never blocks (-EAGAIN if full). */
AO_API int ao_exec_try_call(struct ao_exec *ex, ao_call_fn fn, void *arg);
/* Wait until every item accepted so far has run (the executor is idle at
 * some instant).  -EDEADLK from one of its own workers. */
AO_API int ao_exec_drain(struct ao_exec *ex);
/* On one of ex's workers: run one queued item if there is one; true if so.
 * From any other thread it does nothing and returns false. */
AO_API bool ao_exec_run_one(struct ao_exec *ex);

/* The executor whose worker is calling, or NULL. */
AO_API struct ao_exec *ao_exec_current(void);
/* The calling thread's worker index in ex, or -1. */
AO_API int ao_exec_worker_index(const struct ao_exec *ex);
/* Number of worker threads. */
AO_API unsigned int ao_exec_workers(const struct ao_exec *ex);
/* True once shutdown has started. */
AO_API bool ao_exec_stopping(const struct ao_exec *ex);
/* The configuration in effect (workers and spin resolved). */
AO_API void ao_exec_get_config(const struct ao_exec *ex,
			       struct ao_exec_config *cfg);
/* Totals (a racy snapshot, exact once the executor is drained). */
AO_API int ao_exec_stats(const struct ao_exec *ex, struct ao_exec_stats *st);
/* One worker's counters; -EINVAL if i is out of range. */
AO_API int ao_exec_worker_stats(const struct ao_exec *ex, unsigned int i,
				struct ao_exec_worker_stats *st);

#endif /* AORTA_CORE_EXEC_H */
