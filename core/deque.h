/* SPDX-License-Identifier: MIT */
/*
 * A fixed-size Chase-Lev work-stealing deque of struct ao_work pointers,
 * with the C11 orderings of Lê, Pop, Cohen and Zappa Nardelli, "Correct
 * and Efficient Work-Stealing for Weak Memory Models" (PPoPP 2013), minus
 * the resize: the ring never grows, so no old array needs reclaiming; a
 * full push fails and the caller moves half the ring elsewhere with
 * ao_deque_take_half() (what Go and Tokio do).
 *
 * One owner thread calls push, pop and take_half; any thread may steal.
 * top and bottom are signed 64-bit and only grow (pop moves bottom back by
 * one at most), so "bottom - 1" on an empty deque is -1 < top and never
 * wraps into a huge unsigned size (BRIEF §1.3 pitfall 2); they cannot
 * overflow in the life of any program.  Every slot access is atomic,
 * because a thief may read a slot the owner is rewriting after a wrap; the
 * thief's CAS on top then fails and the value read is discarded (pitfall
 * 3).
 */
#ifndef AORTA_CORE_DEQUE_H
#define AORTA_CORE_DEQUE_H

#include <stdbool.h>
#include <stdint.h>
#include <aorta/compiler.h>
#include <aorta/core/exec.h>
#include <aorta/core/work.h>

#define AO_DEQUE_SIZE ((int64_t)AO_EXEC_DEQUE_SIZE)
#define AO_DEQUE_MASK (AO_DEQUE_SIZE - 1)
AO_BUILD_BUG_ON(AO_EXEC_DEQUE_SIZE &(AO_EXEC_DEQUE_SIZE - 1));

struct ao_deque {
	int64_t top __ao_cacheline_aligned; /* thieves' end; CAS only */
	int64_t bottom __ao_cacheline_aligned; /* owner's end */
	struct ao_work *slot[AO_EXEC_DEQUE_SIZE] __ao_cacheline_aligned;
};

/* What ao_deque_steal() found. */
enum ao_steal {
	AO_STEAL_EMPTY = 0, /* nothing to take */
	AO_STEAL_OK = 1, /* *out is ours */
	AO_STEAL_RETRY = 2, /* lost a race with the owner or a thief */
};

void ao_deque_init(struct ao_deque *d);
/* Owner: move the oldest half into a NULL-terminated list first..*last
 * (oldest first); returns how many, 0 if the deque is nearly empty. */
unsigned int ao_deque_take_half(struct ao_deque *d, struct ao_work **first,
				struct ao_work **last);

/* Items in the deque (a snapshot; exact for the owner with no thieves). */
static inline int64_t ao_deque_size(struct ao_deque *d)
{
	/* ACQUIRE: pairs with the RELEASE stores of bottom and the SEQ_CST
	 * CAS on top, so a non-zero size means the items are visible. */
	int64_t t = __atomic_load_n(&d->top, __ATOMIC_ACQUIRE);
	int64_t b = __atomic_load_n(&d->bottom, __ATOMIC_ACQUIRE);

	return b > t ? b - t : 0;
}

/* Owner: push at the bottom; false if the ring is full. */
/* Owner: push w; the size before the push (as the owner saw it), or -1 if
 * the ring is full. */
static inline int64_t ao_deque_push_size(struct ao_deque *d, struct ao_work *w)
{
	int64_t b = __atomic_load_n(&d->bottom, __ATOMIC_RELAXED);
	/* ACQUIRE: pairs with the SEQ_CST CAS of a thief that advanced top,
	 * so its read of the slot we may now overwrite came first. */
	int64_t t = __atomic_load_n(&d->top, __ATOMIC_ACQUIRE);

	if (unlikely(b - t >= AO_DEQUE_SIZE))
		return -1;
	__atomic_store_n(&d->slot[b & AO_DEQUE_MASK], w, __ATOMIC_RELAXED);
	/* RELEASE: publishes the slot and the item's contents; pairs with
	 * the ACQUIRE load of bottom in ao_deque_steal().  The paper has a
	 * release fence and a relaxed store: the same on every target, and
	 * visible to ThreadSanitizer, which does not model fences. */
	__atomic_store_n(&d->bottom, b + 1, __ATOMIC_RELEASE);
	return b - t;
}

static inline bool ao_deque_push(struct ao_deque *d, struct ao_work *w)
{
	return ao_deque_push_size(d, w) >= 0;
}

/* Owner: pop the newest item (LIFO), or NULL. */
static inline struct ao_work *ao_deque_pop(struct ao_deque *d)
{
	int64_t b = __atomic_load_n(&d->bottom, __ATOMIC_RELAXED) - 1;
	struct ao_work *w;
	int64_t t;

	/* Claim slot b before looking at top.  RELEASE rather than the
	 * paper's relaxed so that a thief that reads this value of bottom
	 * still synchronises with the pushes before it (for TSan). */
	__atomic_store_n(&d->bottom, b, __ATOMIC_RELEASE);
	/* SEQ_CST fence: the store of bottom is ordered before the load of
	 * top (StoreLoad); pairs with the SEQ_CST fence in ao_deque_steal()
	 * between its loads of top and bottom, so owner and thief cannot
	 * both miss each other's claim on the last item. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	t = __atomic_load_n(&d->top, __ATOMIC_RELAXED);
	if (t > b) {
		/* Empty: undo the claim. */
		__atomic_store_n(&d->bottom, b + 1, __ATOMIC_RELEASE);
		return NULL;
	}
	w = __atomic_load_n(&d->slot[b & AO_DEQUE_MASK], __ATOMIC_RELAXED);
	if (t == b) {
		/* The last item: race the thieves for it on top.  SEQ_CST
		 * pairs with the thieves' SEQ_CST CAS on the same word. */
		if (!__atomic_compare_exchange_n(&d->top, &t, t + 1, false,
						 __ATOMIC_SEQ_CST,
						 __ATOMIC_RELAXED))
			w = NULL;
		__atomic_store_n(&d->bottom, b + 1, __ATOMIC_RELEASE);
	}
	return w;
}

/* Any thread: take the oldest item into *out. */
static inline enum ao_steal ao_deque_steal(struct ao_deque *d,
					   struct ao_work **out)
{
	/* ACQUIRE: pairs with the SEQ_CST CAS that set this top. */
	int64_t t = __atomic_load_n(&d->top, __ATOMIC_ACQUIRE);
	struct ao_work *w;
	int64_t b;

	/* SEQ_CST fence: top is read before bottom; pairs with the fence in
	 * ao_deque_pop() (see there). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	/* ACQUIRE: pairs with the RELEASE stores of bottom: the slot and the
	 * item it points to are visible. */
	b = __atomic_load_n(&d->bottom, __ATOMIC_ACQUIRE);
	if (t >= b)
		return AO_STEAL_EMPTY;
	/* Relaxed and atomic: the owner may be rewriting this slot after a
	 * wrap; then our CAS below fails and w is dropped unused. */
	w = __atomic_load_n(&d->slot[t & AO_DEQUE_MASK], __ATOMIC_RELAXED);
	/* SEQ_CST: pairs with the owner's CAS in ao_deque_pop() and
	 * ao_deque_take_half() and with the other thieves'. */
	if (!__atomic_compare_exchange_n(&d->top, &t, t + 1, false,
					 __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		return AO_STEAL_RETRY;
	*out = w;
	return AO_STEAL_OK;
}

#endif /* AORTA_CORE_DEQUE_H */
