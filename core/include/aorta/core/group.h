/* SPDX-License-Identifier: MIT */
/*
 * Groups: count work in, wait for all of it (fork-join).
 *
 *	struct ao_group g;
 *	ao_group_init(&g, exec);
 *	ao_group_work_init(&child->gw, child_run);
 *	ao_group_submit(&g, &child->gw);	(any number of times)
 *	ao_group_wait(&g);
 *
 * A wait called on one of the executor's workers runs other queued work
 * while it waits, so a task that waits for its own children cannot deadlock
 * the pool, even with one worker.  ao_group_add()/ao_group_done() count work
 * that is not submitted through the group (a WaitGroup).
 *
 * A group may live on the waiter's stack: once ao_group_wait() returns,
 * nothing touches it (the last ao_group_done() wakes waiters through event
 * counts that outlive it).  At most 2^31 - 1 items may be pending.
 */
#ifndef AORTA_CORE_GROUP_H
#define AORTA_CORE_GROUP_H

#include <stdint.h>
#include <aorta/compiler.h>
#include <aorta/core/call.h>
#include <aorta/core/work.h>
#include <aorta/sync/eventcount.h>

struct ao_exec;

struct ao_group {
	struct ao_exec *exec;
	uint32_t pending; /* not yet done (low 31 bits), a waiter sleeps */
	uint32_t worker_sleepers; /* reserved */
	struct ao_eventcount ec; /* reserved */
};

/* A work item that belongs to a group: fn is called with &gw->work. */
struct ao_group_work {
	struct ao_work work; /* what the executor queues */
	ao_work_fn fn; /* the caller's function */
	struct ao_group *group; /* set by ao_group_submit() */
};

/* Initialise a group whose items run on ex. */
AO_API void ao_group_init(struct ao_group *g, struct ao_exec *ex);
/* Initialise a group item that runs fn. */
AO_API void ao_group_work_init(struct ao_group_work *gw, ao_work_fn fn);
/* Count gw in and submit it to the group's executor (its policy applies);
 * on error it is not counted.  fn may free gw. */
AO_API int ao_group_submit(struct ao_group *g, struct ao_group_work *gw);
/* Same, but never blocks (-EAGAIN if the executor is full). */
AO_API int ao_group_try_submit(struct ao_group *g, struct ao_group_work *gw);
/* Count fn(arg) in and run it on the group's executor (core/call.h).
 * Refused: not counted, fn is not run and arg not touched. */
AO_API int ao_group_call(struct ao_group *g, ao_call_fn fn, void *arg);
/* Same, but never blocks (-EAGAIN if the executor is full). */
AO_API int ao_group_try_call(struct ao_group *g, ao_call_fn fn, void *arg);
/* Count n items of outside work in. */
AO_API void ao_group_add(struct ao_group *g, unsigned int n);
/* Count one item out (after ao_group_add()). */
AO_API void ao_group_done(struct ao_group *g);
/* Wait until everything counted in is done; on a worker, run other work
 * meanwhile.  Returns 0. */
AO_API int ao_group_wait(struct ao_group *g);
/* Items counted in and not yet done (a snapshot). */
AO_API unsigned int ao_group_pending(const struct ao_group *g);

#endif /* AORTA_CORE_GROUP_H */
