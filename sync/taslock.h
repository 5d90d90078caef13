/* SPDX-License-Identifier: MIT */
/*
 * The test-and-test-and-set lock: a one-word spinlock whose unlock is one
 * release store, for the library's own short critical sections that no
 * caller waits on for long (the timer shards).  Not installed.
 *
 * Why a second lock beside the three-phase one (ao_spinlock): that lock's
 * unlock is a compare-and-swap, because an unlock must see the sleepers it
 * has to wake; this one never sleeps, so its unlock is a plain store, which
 * costs about half as much per lock/unlock pair; on a timer's arm and
 * cancel, each a few dozen instructions under the lock, that difference
 * is a good part of the whole.
 * The price is the waiter's: it spins, then yields (a holder that was
 * preempted gets the CPU back), and never sleeps, so it is only for
 * sections of a few dozen instructions, or a bounded batch of work.
 */
#ifndef AORTA_SYNC_TASLOCK_H
#define AORTA_SYNC_TASLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <aorta/compiler.h>

struct ao_taslock {
	uint32_t v; /* 1: held */
};

#define AO_TASLOCK_INIT \
	{               \
		0       \
	}

/* A waiter spins this many times before it starts to yield. */
#define AO_TASLOCK_SPINS 1024u

static inline void ao_tas_init(struct ao_taslock *l)
{
	__atomic_store_n(&l->v, 0, __ATOMIC_RELAXED);
}

/* The contended path of ao_tas_lock(). */
void ao__tas_lock_slow(struct ao_taslock *l);

/* Take the lock if it is free; true if so. */
static __ao_always_inline bool ao_tas_trylock(struct ao_taslock *l)
{
	uint32_t z = 0;

	/* ACQUIRE: the critical section stays after this; pairs with the
	 * RELEASE store in ao_tas_unlock(). */
	return __atomic_compare_exchange_n(&l->v, &z, 1, false,
					   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* Take the lock, spinning (then yielding) as long as it takes. */
static __ao_always_inline void ao_tas_lock(struct ao_taslock *l)
	__ao_acquires(l)
{
	if (likely(ao_tas_trylock(l)))
		return;
	ao__tas_lock_slow(l);
}

/* Release a lock this thread holds. */
static __ao_always_inline void ao_tas_unlock(struct ao_taslock *l)
	__ao_releases(l)
{
	/* RELEASE: everything done under the lock comes before the next
	 * holder's ACQUIRE (ao_tas_trylock(), ao__tas_lock_slow()). */
	__atomic_store_n(&l->v, 0, __ATOMIC_RELEASE);
}

/* True if some thread holds the lock (a snapshot, for assertions). */
static inline bool ao_tas_is_locked(const struct ao_taslock *l)
{
	return __atomic_load_n(&l->v, __ATOMIC_RELAXED) != 0;
}

#endif /* AORTA_SYNC_TASLOCK_H */
