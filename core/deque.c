// SPDX-License-Identifier: MIT
/*
 * The cold half of the work-stealing deque (the hot half is inline in
 * deque.h): initialisation, and the owner's overflow path.
 */
#include <string.h>
#include "deque.h"

void ao_deque_init(struct ao_deque *d)
{
	memset(d, 0, sizeof(*d));
}

unsigned int ao_deque_take_half(struct ao_deque *d, struct ao_work **first,
				struct ao_work **last)
{
	struct ao_work *buf[AO_EXEC_DEQUE_SIZE / 2];

	for (;;) {
		/* ACQUIRE: pairs with the thieves' SEQ_CST CAS on top. */
		int64_t t = __atomic_load_n(&d->top, __ATOMIC_ACQUIRE);
		int64_t b = __atomic_load_n(&d->bottom, __ATOMIC_RELAXED);
		int64_t n = (b - t) / 2;

		if (n > (int64_t)ARRAY_SIZE(buf))
			n = ARRAY_SIZE(buf);
		if (n <= 0)
			return 0;
		/* Read the slots before claiming them: only the owner (us)
		 * writes slots, so they cannot change under us, but once top
		 * moves past them a thief must not find them half-linked. */
		for (int64_t i = 0; i < n; i++)
			buf[i] = __atomic_load_n(
				&d->slot[(t + i) & AO_DEQUE_MASK],
				__ATOMIC_RELAXED);
		/* Claim [t, t+n) as a thief would claim [t, t+1).  SEQ_CST:
		 * pairs with the thieves' CAS on top; losing means a thief
		 * took slot t, so start again. */
		if (!__atomic_compare_exchange_n(&d->top, &t, t + n, false,
						 __ATOMIC_SEQ_CST,
						 __ATOMIC_RELAXED))
			continue;
		/* The items are ours alone now: link them. */
		for (int64_t i = 0; i < n - 1; i++)
			buf[i]->next = buf[i + 1];
		buf[n - 1]->next = NULL;
		*first = buf[0];
		*last = buf[n - 1];
		return (unsigned int)n;
	}
}
