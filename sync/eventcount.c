// SPDX-License-Identifier: MIT
/*
 * Event count on a futex (the shape of Folly's EventCount): one 64-bit
 * word, waiters in the low half and an epoch in the high half, and the
 * futex sleeps on the epoch half.  A waiter's key is the epoch it saw in
 * prepare; a notify bumps the epoch, so a waiter that has not yet slept
 * finds the futex word changed and does not sleep.
 */
#include <errno.h>
#include <endian.h>
#include <aorta/clock.h>
#include <aorta/sync/eventcount.h>
#include <aorta/sync/futex.h>

static inline uint32_t *epoch_word(struct ao_eventcount *ec)
{
#if __BYTE_ORDER == __LITTLE_ENDIAN
	return (uint32_t *)&ec->word + 1;
#else
	return (uint32_t *)&ec->word;
#endif
}

void ao_ec_init(struct ao_eventcount *ec)
{
	__atomic_store_n(&ec->word, 0, __ATOMIC_RELAXED);
}

int ao_ec_wait(struct ao_eventcount *ec, uint32_t key, int64_t timeout_ns)
{
	uint64_t deadline = 0;
	int ret = 0;

	if (timeout_ns >= 0)
		deadline = ao_now_ns() + (uint64_t)timeout_ns;
	for (;;) {
		int64_t left = -1;

		/* ACQUIRE: what the notifier published before bumping the
		 * epoch is visible once we see the bump; pairs with the
		 * fetch_add in ao__ec_wake(). */
		if ((uint32_t)(__atomic_load_n(&ec->word, __ATOMIC_ACQUIRE) >>
			       32) != key)
			break;
		if (timeout_ns >= 0) {
			uint64_t now = ao_now_ns();

			if (now >= deadline) {
				ret = -ETIMEDOUT;
				break;
			}
			left = (int64_t)(deadline - now);
		}
		/* EAGAIN (epoch moved), EINTR, spurious: loop re-checks. */
		ao_futex_wait(epoch_word(ec), key, left);
	}
	__atomic_fetch_sub(&ec->word, 1, __ATOMIC_RELAXED);
	return ret;
}

void ao__ec_wake(struct ao_eventcount *ec, int n)
{
	/* RELEASE (in ACQ_REL): pairs with the ACQUIRE load in ao_ec_wait(). */
	__atomic_fetch_add(&ec->word, AO__EC_EPOCH, __ATOMIC_ACQ_REL);
	ao_futex_wake(epoch_word(ec), n);
}
