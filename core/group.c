// SPDX-License-Identifier: MIT
/*
 * Groups: fork-join over an executor.
 *
 * pending packs the count of unfinished items (low 31 bits) and a flag,
 * SLEEPERS, set by a waiter before it sleeps.  The last ao_group_done()
 * clears both in one CAS and, if the flag was set, wakes the sleepers.
 * It must not touch the group after that CAS: a waiter spinning on the
 * count may see zero, return, and free the group (it is often on the
 * waiter's stack).  So the wake-ups go to event counts that outlive the
 * group: the executor's idle event count, where waiting workers park, and
 * one event count shared by every group for waiters outside the pool.  The
 * executor pointer is read before the CAS.
 *
 * A wait on one of the executor's workers runs queued work while the count
 * is not zero, and parks on the executor's idle event count (so a submit
 * can wake it to run new work as well) only when there is nothing to run.
 * With one worker, a task that submits children and waits for them runs
 * them itself: fork-join cannot deadlock.
 */
#include <errno.h>
#include <aorta/core/exec.h>
#include <aorta/core/group.h>
#include <aorta/sync/eventcount.h>
#include "exec_priv.h"

#define SLEEPERS 0x80000000u
#define COUNT_MASK 0x7fffffffu

/* Where threads outside any pool wait for any group. */
static struct ao_eventcount outside_ec = AO_EVENTCOUNT_INIT;

void ao_group_init(struct ao_group *g, struct ao_exec *ex)
{
	g->exec = ex;
	g->pending = 0;
	g->worker_sleepers = 0;
	ao_ec_init(&g->ec);
}

void ao_group_work_init(struct ao_group_work *gw, ao_work_fn fn)
{
	ao_work_init(&gw->work, NULL);
	gw->fn = fn;
	gw->group = NULL;
}

void ao_group_add(struct ao_group *g, unsigned int n)
{
	__atomic_fetch_add(&g->pending, n, __ATOMIC_RELAXED);
}

void ao_group_done(struct ao_group *g)
{
	struct ao_exec *ex = g->exec;
	uint32_t v = __atomic_load_n(&g->pending, __ATOMIC_RELAXED);
	uint32_t nv;

	do {
		nv = (v & COUNT_MASK) == 1 ? 0 : v - 1;
		/* SEQ_CST (release for the item's effects, which the waiter
		 * acquires with its load of pending; SEQ_CST against the
		 * waiter's flag-set / prepare / re-check): pairs with the
		 * SEQ_CST RMW and loads in ao_group_wait(). */
	} while (!__atomic_compare_exchange_n(
		&g->pending, &v, nv, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
	if (nv != 0 || !(v & SLEEPERS))
		return;
	/* g may be gone from here on. */
	if (ex)
		ao__exec_wake_all(ex);
	ao_ec_notify_all(&outside_ec);
}

static void group_run(struct ao_work *w)
{
	struct ao_group_work *gw = container_of(w, struct ao_group_work, work);
	struct ao_group *g = gw->group;

	/* fn may free gw: g was read first. */
	gw->fn(&gw->work);
	ao_group_done(g);
}

static int group_submit(struct ao_group *g, struct ao_group_work *gw, bool try)
{
	int r;

	if (!g || !gw || !gw->fn || !g->exec)
		return -EINVAL;
	gw->group = g;
	ao_work_init(&gw->work, group_run);
	ao_group_add(g, 1);
	r = try ? ao_exec_try_submit(g->exec, &gw->work) :
		  ao_exec_submit(g->exec, &gw->work);
	if (r)
		ao_group_done(g);
	return r;
}

int ao_group_submit(struct ao_group *g, struct ao_group_work *gw)
{
	return group_submit(g, gw, false);
}

int ao_group_try_submit(struct ao_group *g, struct ao_group_work *gw)
{
	return group_submit(g, gw, true);
}

unsigned int ao_group_pending(const struct ao_group *g)
{
	return __atomic_load_n(&g->pending, __ATOMIC_ACQUIRE) & COUNT_MASK;
}

static bool group_finished(void *arg)
{
	struct ao_group *g = arg;

	/* SEQ_CST: pairs with the CAS in ao_group_done(). */
	return !(__atomic_load_n(&g->pending, __ATOMIC_SEQ_CST) & COUNT_MASK);
}

/* Set SLEEPERS unless the count is zero; false if it is. */
static bool mark_sleeper(struct ao_group *g)
{
	/* SEQ_CST RMW, before the waiter's prepare: either ao_group_done()
	 * sees the flag, or we see its zero. */
	uint32_t v = __atomic_fetch_or(&g->pending, SLEEPERS, __ATOMIC_SEQ_CST);

	if (!(v & COUNT_MASK)) {
		/* Finished meanwhile; do not leave the flag on a zero
		 * count (a later add would inherit it: harmless, but the
		 * next done would then wake for nothing). */
		__atomic_compare_exchange_n(&g->pending,
					    &(uint32_t){ SLEEPERS }, 0, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		return false;
	}
	return true;
}

int ao_group_wait(struct ao_group *g)
{
	struct ao_exec *ex;

	if (!g)
		return -EINVAL;
	ex = g->exec;
	if (ex && ao_exec_current() == ex) {
		while (!group_finished(g)) {
			if (ao_exec_run_one(ex))
				continue;
			if (!mark_sleeper(g))
				break;
			ao__exec_park_worker(ex, group_finished, g);
		}
		return 0;
	}
	while (!group_finished(g)) {
		uint32_t key;

		if (!mark_sleeper(g))
			break;
		key = ao_ec_prepare(&outside_ec);
		if (group_finished(g)) {
			ao_ec_cancel(&outside_ec);
			break;
		}
		ao_ec_wait(&outside_ec, key, -1);
	}
	return 0;
}
