/* SPDX-License-Identifier: MIT */
/*
 * What the executor needs of core/call.c to take a call's item inline in
 * its submit (ao_exec_call(), core/exec.c): the item, the calling
 * thread's hand (its current slab and that slab's idle items), and the
 * out-of-line halves.  Inlined there, a call costs about a tenth fewer
 * instructions than through ao_exec_submit() (docs/PERFORMANCE.md).
 */
#ifndef AORTA_CORE_CALL_PRIV_H
#define AORTA_CORE_CALL_PRIV_H

#include <stdint.h>
#include <aorta/compiler.h>
#include <aorta/core/call.h>
#include <aorta/core/work.h>

/* Items are 32 bytes (1 << AO__CALL_SHIFT). */
#define AO__CALL_SHIFT 5
/* A call prefetches the item this many bytes ahead (8 items). */
#define AO__CALL_AHEAD 256

struct ao__call_item {
	struct ao_work work; /* what gets queued */
	ao_call_fn fn;
	void *arg;
};

/* The calling thread's current slab and its idle items: bit i is the
 * item at byte i << AO__CALL_SHIFT of the slab. */
struct ao__call_hand {
	char *slab;
	uint64_t mask;
};

/* The calling thread's hand; never NULL (core/call.c). */
extern __thread struct ao__call_hand *ao__call_hand
	__attribute__((tls_model("initial-exec")));

/* What a call's item runs. */
void ao__call_run(struct ao_work *w);
/* An item when the hand is empty: the next slab; NULL if out of memory. */
struct ao__call_item *ao__call_get_slow(void);
/* A refused call's item goes back to the calling thread's cache. */
void ao__call_refused(struct ao__call_item *x);

/* An item that runs fn(arg), or NULL (out of memory).  Its link is the
 * executor's or the strand's to write. */
static __ao_always_inline struct ao__call_item *ao__call_item(ao_call_fn fn,
							      void *arg)
{
	struct ao__call_hand *h = ao__call_hand;
	uint64_t m = h->mask;
	struct ao__call_item *x;

	if (likely(m)) {
		/* The lowest idle item: successive calls, successive
		 * addresses (see core/call.c). */
		h->mask = m & (m - 1);
		x = (struct ao__call_item *)(h->slab +
					     ((uint64_t)__builtin_ctzll(m)
					      << AO__CALL_SHIFT));
		__builtin_prefetch((char *)x + AO__CALL_AHEAD, 1);
	} else {
		x = ao__call_get_slow();
		if (unlikely(!x))
			return NULL;
	}
	x->work.fn = ao__call_run;
	x->fn = fn;
	x->arg = arg;
	return x;
}

#endif /* AORTA_CORE_CALL_PRIV_H */
