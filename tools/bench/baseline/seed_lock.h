/* SPDX-License-Identifier: MIT */
/*
 * The seed's lock (seeds/003: the 2006 "XIOSpinLock"), ported faithfully as
 * a baseline for tools/bench/lockbench.  The seed is the code aorta
 * started from, a 2006 game server's (its thread pools: seed_pools.h).
 * Do not use it for anything else: it is what aorta's lock must beat.
 *
 *	phase 1: 4000 times { CAS 0 -> 1; PAUSE }
 *	phase 2: 4000 times { sched_yield(); CAS 0 -> 1 }
 *	phase 3: forever    { usleep(1000); CAS 0 -> 1 }
 *
 * The CAS is InterlockedCompareExchange, a full barrier (lock cmpxchg); the
 * unlock is a release store of 0.  It spins with CAS, not on a plain load;
 * its budget is a count, not a time; its sleepers poll every 1 ms and can
 * be passed over forever.  All of that is kept on purpose.
 */
#ifndef AORTA_BENCH_SEED_LOCK_H
#define AORTA_BENCH_SEED_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#define SEED_LOCK_SPINS 4000
#define SEED_LOCK_YIELDS 4000
#define SEED_LOCK_SLEEP_US 1000

struct seed_lock {
	uint32_t word; /* 0 free, 1 held */
};

#define SEED_LOCK_INIT \
	{              \
		0      \
	}

/* InterlockedCompareExchange(&word, 1, 0) == 0 */
static inline bool seed_lock_try(struct seed_lock *l)
{
	uint32_t v = 0;

	return __atomic_compare_exchange_n(&l->word, &v, 1, false,
					   __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* XIOSpinLock::Wait(): the three loops, out of line. */
void seed_lock_wait(struct seed_lock *l);

static inline void seed_lock_init(struct seed_lock *l)
{
	__atomic_store_n(&l->word, 0, __ATOMIC_RELAXED);
}

static inline void seed_lock_acquire(struct seed_lock *l)
{
	if (__builtin_expect(seed_lock_try(l), 1))
		return;
	seed_lock_wait(l);
}

static inline void seed_lock_release(struct seed_lock *l)
{
	__atomic_store_n(&l->word, 0, __ATOMIC_RELEASE);
}

#endif /* AORTA_BENCH_SEED_LOCK_H */
