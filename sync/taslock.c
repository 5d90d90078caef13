// SPDX-License-Identifier: MIT
/*
 * The test-and-test-and-set lock's contended path (see sync/taslock.h).
 */
#include <sched.h>
#include <aorta/clock.h>
#include "taslock.h"

void ao__tas_lock_slow(struct ao_taslock *l)
{
	unsigned int spins = 0;

	for (;;) {
		/* Test, then test-and-set: the line stays shared while the
		 * holder works, and only a free lock is written. */
		while (__atomic_load_n(&l->v, __ATOMIC_RELAXED)) {
			if (++spins < AO_TASLOCK_SPINS)
				cpu_relax();
			else
				sched_yield(); /* a preempted holder runs */
		}
		/* ACQUIRE: pairs with the RELEASE store in ao_tas_unlock(). */
		if (!__atomic_exchange_n(&l->v, 1, __ATOMIC_ACQUIRE))
			return;
	}
}
