/* SPDX-License-Identifier: MIT */
/*
 * Drivers: the one seam between an executor and what its workers drive
 * besides their queues.
 *
 * A driver has no thread of its own: the executor's workers run it.  The
 * timer service (core/timer.c) is one; an io ring could be another.  The
 * executor knows a driver only through the four calls below, the way
 * Tokio's scheduler knows its time driver only as park, park with a
 * timeout and unpark, and the kernel's scheduler and kernel/time/timer.c
 * meet at a few named functions:
 *  - run: run what is due.  A busy worker calls it between two items,
 *    about every 10 us of work; an idle one while it spins, before it
 *    parks, and a worker waiting for a group before it sleeps;
 *  - park: a worker with nothing to do sleeps through the driver.  The
 *    driver picks the timeout (its next deadline) and calls the executor's
 *    wait, or returns without calling it when something is due (the
 *    worker then runs it);
 *  - unpark (the driver's call into the executor): wake one parked
 *    worker, because the driver needs one earlier than any will wake;
 *  - release: the executor is done with a detached driver, which frees
 *    itself.  A detached driver stays allocated until the executor ends,
 *    because workers may still hold it, and so may its users' handles
 *    (an arm on a timer of a destroyed service answers -ESHUTDOWN).
 *
 * The park protocol: the executor calls park only after the worker has
 * announced itself as parking (its event count key is taken and it is
 * counted among the sleepers, core/exec.c "Waking"), so whatever the
 * driver reads in park is read after that.  A driver whose state changes
 * after it so that a parked worker must wake earlier calls unpark: either
 * park saw the change, or the change sees the parked worker.  The driver
 * provides the pairing on its own state (core/timer.c: next_lowered()).
 *
 * One driver per executor at a time.
 */
#ifndef AORTA_CORE_DRIVER_H
#define AORTA_CORE_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

struct ao_exec;
struct ao_driver;

/* How a parking worker sleeps: the executor's side of a park. */
struct ao_park {
	/* Sleep until the executor wakes this worker (a submit, an unpark,
	 * shutdown) or timeout_ns passes (< 0: no timeout).  At most once
	 * per park. */
	void (*wait)(struct ao_park *p, int64_t timeout_ns);
};

struct ao_driver_ops {
	/* Run what is due.  idle false: a busy worker, now is the clock it
	 * has just read (ao_now_ns()).  idle true: the worker has nothing
	 * else to do (now is unused); the driver reads the clock only if
	 * something is pending, and may spin to a deadline closer than it
	 * could sleep to.  True if it ran anything. */
	bool (*run)(struct ao_driver *d, uint64_t now, bool idle);
	/* Park the calling worker: p->wait() with the timeout until the
	 * driver next needs a worker, or return at once (something is due,
	 * or about to be). */
	void (*park)(struct ao_driver *d, struct ao_park *p);
	/* The executor is done with d: free it.  No call into d follows. */
	void (*release)(struct ao_driver *d);
};

struct ao_driver {
	const struct ao_driver_ops *ops;
	struct ao_driver *next; /* the executor's, once detached */
};

/* Attach d to ex: -EBUSY if ex has a driver. */
int ao__exec_attach_driver(struct ao_exec *ex, struct ao_driver *d);
/* Detach d: no worker calls it from now on, except those already inside
 * a call; ex releases it when it ends. */
void ao__exec_detach_driver(struct ao_exec *ex, struct ao_driver *d);
/* ex's driver, or NULL. */
struct ao_driver *ao__exec_driver(const struct ao_exec *ex);
/* Wake one parked worker of ex (it parks again through the driver). */
void ao__exec_unpark(struct ao_exec *ex);

#endif /* AORTA_CORE_DRIVER_H */
