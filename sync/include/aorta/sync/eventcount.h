/* SPDX-License-Identifier: MIT */
/*
 * Event count: park a thread until some condition may have changed, with no
 * lost wake-up between checking the condition and going to sleep.
 *
 * Waiter:				Notifier:
 *	key = ao_ec_prepare(ec);		publish the condition;
 *	if (condition) {			ao_ec_notify_one(ec);
 *		ao_ec_cancel(ec);
 *		return;
 *	}
 *	ao_ec_wait(ec, key, -1);
 *	(re-check the condition)
 *
 * A notify that comes after ao_ec_prepare() makes ao_ec_wait() return at
 * once; a notify with no prepared waiter costs one load and no system call.
 */
#ifndef AORTA_SYNC_EVENTCOUNT_H
#define AORTA_SYNC_EVENTCOUNT_H

#include <stdint.h>
#include <aorta/compiler.h>

/* High 32 bits: the epoch, bumped by a notify with waiters.  Low 32 bits:
 * how many threads are between prepare and the end of wait/cancel. */
struct ao_eventcount {
	uint64_t word;
};

#define AO_EVENTCOUNT_INIT \
	{                  \
		0          \
	}
#define AO__EC_WAITERS 0xffffffffull
#define AO__EC_EPOCH (1ull << 32)

/* Initialise at run time (same as AO_EVENTCOUNT_INIT). */
AO_API void ao_ec_init(struct ao_eventcount *ec);
/* Sleep until a notify after the prepare that returned key, or timeout_ns
 * (< 0: none).  Returns 0, or -ETIMEDOUT.  Ends the prepare either way. */
AO_API int ao_ec_wait(struct ao_eventcount *ec, uint32_t key,
		      int64_t timeout_ns);
/* Wake sleepers (slow half of the notifies); not for direct use. */
AO_API void ao__ec_wake(struct ao_eventcount *ec, int n);

/* Announce that this thread is about to check the condition and sleep. */
static inline uint32_t ao_ec_prepare(struct ao_eventcount *ec)
{
	/* SEQ_CST RMW: the registration is ordered before the caller's
	 * condition check (StoreLoad); pairs with the SEQ_CST fence in
	 * ao_ec_notify_*(). */
	return (uint32_t)(__atomic_fetch_add(&ec->word, 1, __ATOMIC_SEQ_CST) >>
			  32);
}

/* The condition held after all: leave without sleeping. */
static inline void ao_ec_cancel(struct ao_eventcount *ec)
{
	__atomic_fetch_sub(&ec->word, 1, __ATOMIC_RELAXED);
}

/* True if some thread is between prepare and wait/cancel. */
static inline int ao_ec_has_waiters(struct ao_eventcount *ec)
{
	/* SEQ_CST fence: the caller's publication of the condition is ordered
	 * before this load of the waiter count (StoreLoad); pairs with the
	 * SEQ_CST RMW in ao_ec_prepare(). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return (__atomic_load_n(&ec->word, __ATOMIC_RELAXED) &
		AO__EC_WAITERS) != 0;
}

/* Wake one prepared waiter, if any. */
static inline void ao_ec_notify_one(struct ao_eventcount *ec)
{
	if (ao_ec_has_waiters(ec))
		ao__ec_wake(ec, 1);
}

/* Wake every prepared waiter. */
static inline void ao_ec_notify_all(struct ao_eventcount *ec)
{
	if (ao_ec_has_waiters(ec))
		ao__ec_wake(ec, 0x7fffffff);
}

#endif /* AORTA_SYNC_EVENTCOUNT_H */
