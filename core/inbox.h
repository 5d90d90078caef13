/* SPDX-License-Identifier: MIT */
/*
 * The executor's inbox queue: an intrusive FIFO of struct ao_work in two
 * parts.  Single items submitted from outside the pool (and, under
 * AO_EXEC_SHARED, by workers) are pushed onto inbox, a lock-free LIFO
 * list (the kernel's llist: one CAS, newest first), so a submitter never
 * takes the lock and never waits for a worker that holds it.  Workers
 * take items from head..tail under the sync/ lock; when that list is
 * empty, the taker detaches the whole inbox with one exchange and appends
 * it reversed, oldest first.  So the submitter and the workers share one
 * cache line per batch a worker detaches, not per item, and the order
 * stays FIFO: everything in head..tail was pushed before anything in
 * inbox.  Batches (a ring's overflow) go straight to head..tail under the
 * lock.
 *
 * Peeking reads head and inbox_set, never inbox: a worker looking for
 * work would otherwise pull the inbox's line from the submitter after
 * every push.  inbox_set is set by the push that finds the inbox empty
 * and cleared by the worker that detaches it, so the submitter writes it
 * once per batch; it is set whenever the inbox holds items, except
 * between a push onto an empty inbox and the caller's publishing (below),
 * and while a worker detaches what it holds.  What it is set to is the
 * cycle counter at that push (with the low bit set, so it is never 0):
 * how old the inbox's oldest item is (ao_inbox_take()).
 *
 * Publishing.  The queue wakes nobody: a push that finds the inbox empty
 * returns true, and a take that leaves items in head after moving the
 * inbox there sets *hidden; in both cases the caller must tell a worker
 * that may be parking (core/exec.c: exec_notify(), whose SEQ_CST fence
 * pairs with a parking worker's re-check of ao_inbox_peek()).
 *
 * Any thread may push; ao_inbox_push_list() and ao_inbox_take() take the
 * lock.  Tested directly by tests/test_inbox.c.
 */
#ifndef AORTA_CORE_INBOX_H
#define AORTA_CORE_INBOX_H

#include <stdbool.h>
#include <stdint.h>
#include <aorta/clock.h>
#include <aorta/compiler.h>
#include <aorta/core/work.h>
#include <aorta/sync/spinlock.h>

struct ao_inbox {
	struct ao_spinlock lock;
	struct ao_work *head;
	struct ao_work *tail;
	uint64_t len;
	struct ao_work *inbox __ao_cacheline_aligned;
	uint64_t inbox_set __ao_cacheline_aligned; /* 0, or ao_cycles() | 1 */
};

static inline void ao_inbox_init(struct ao_inbox *q)
{
	ao_spin_init(&q->lock);
	q->head = q->tail = NULL;
	q->len = 0;
	q->inbox = NULL;
	q->inbox_set = 0;
}

/* Append the list first..last (n items, last->next == NULL) to
 * head..tail, under the lock. */
static inline void ao_inbox_push_list(struct ao_inbox *q, struct ao_work *first,
				      struct ao_work *last, unsigned int n)
{
	ao_spin_lock(&q->lock);
	if (q->tail)
		q->tail->next = first;
	else
		WRITE_ONCE(q->head, first);
	q->tail = last;
	WRITE_ONCE(q->len, q->len + n);
	ao_spin_unlock(&q->lock);
}

/* Push one item onto the inbox; no lock.  True if the inbox was empty
 * (the caller then tells a worker: see "Publishing" above). */
static inline bool ao_inbox_push(struct ao_inbox *q, struct ao_work *work)
{
	struct ao_work *first = READ_ONCE(q->inbox);

	/* ACQ_REL on success.  RELEASE: the item (its fields, its next
	 * link) is written before it is visible; pairs with the exchange in
	 * ao__inbox_refill().  ACQUIRE: pairs with that exchange's release, so
	 * its clear of inbox_set comes before our set below.  No ABA: items
	 * only ever leave the inbox all at once, never one by one. */
	do {
		work->next = first;
	} while (!__atomic_compare_exchange_n(&q->inbox, &first, work, true,
					      __ATOMIC_ACQ_REL,
					      __ATOMIC_RELAXED));
	if (first)
		return false;
	/* RELEASE: pairs with the ACQUIRE load in ao__inbox_refill(), so a
	 * worker that sees the flag set has our CAS ordered before its
	 * exchange, which then takes our item (on x86 both are plain moves).
	 * The caller's fence (core/exec.c: exec_notify()) orders it before
	 * its loads of the wake state, as it does the push. */
	__atomic_store_n(&q->inbox_set, ao_cycles() | 1, __ATOMIC_RELEASE);
	return true;
}

/* Is there anything to take?  Loads only, of head and inbox_set, never of
 * inbox itself (see above). */
static inline bool ao_inbox_peek(const struct ao_inbox *q)
{
	return READ_ONCE(q->head) || READ_ONCE(q->inbox_set);
}

/* Under the lock, head..tail empty: move the inbox there, oldest first. */
static inline void ao__inbox_refill(struct ao_inbox *q)
{
	struct ao_work *x, *rev = NULL, *last;
	uint64_t n = 0;

	/* ACQUIRE: pairs with the RELEASE store in ao_inbox_push().  Were
	 * it relaxed, our exchange could precede that push's CAS, find the
	 * inbox empty, and our clear below would hide the item that CAS
	 * then adds (every later push would find the inbox non-empty and
	 * leave the flag clear). */
	if (!__atomic_load_n(&q->inbox_set, __ATOMIC_ACQUIRE))
		return;
	/* Cleared before the exchange (whose release orders it first), so
	 * a push that finds the inbox empty after it sets it again. */
	__atomic_store_n(&q->inbox_set, 0, __ATOMIC_RELAXED);
	/* ACQ_REL: the acquire pairs with the RELEASE of the CAS in
	 * ao_inbox_push(), the release with its ACQUIRE. */
	x = __atomic_exchange_n(&q->inbox, NULL, __ATOMIC_ACQ_REL);
	last = x;
	while (x) {
		struct ao_work *next = x->next;

		x->next = rev;
		rev = x;
		x = next;
		n++;
	}
	if (!rev)
		return;
	WRITE_ONCE(q->head, rev);
	q->tail = last;
	WRITE_ONCE(q->len, n);
}

/*
 * Take len / div + 1 items, at most max: return the first, and the others
 * as a NULL-terminated list in *rest (with their count in *nrest).
 * *hidden is set if the take moved the inbox to head and left items there:
 * the caller must then publish them (see "Publishing" above).  With
 * patience (cycles), an inbox younger than that is left alone when head is
 * empty: the caller lets a batch grow (core/exec.c, "Batches").
 */
static inline struct ao_work *ao_inbox_take(struct ao_inbox *q, uint64_t div,
					    uint64_t max, struct ao_work **rest,
					    unsigned int *nrest, bool *hidden,
					    uint64_t patience)
{
	struct ao_work *first, *last;
	bool refilled = false;
	uint64_t k, set;

	*hidden = false;
	if (!READ_ONCE(q->head)) {
		/* Racy reads, a hint only: the locked code below decides. */
		set = READ_ONCE(q->inbox_set);
		if (!set || (patience && ao_cycles() - set < patience))
			return NULL;
	}
	ao_spin_lock(&q->lock);
	if (!q->head) {
		ao__inbox_refill(q);
		refilled = true;
	}
	first = q->head;
	if (!first) {
		ao_spin_unlock(&q->lock);
		return NULL;
	}
	k = q->len / div + 1;
	if (k > q->len)
		k = q->len;
	if (k > max)
		k = max;
	last = first;
	for (uint64_t i = 1; i < k; i++)
		last = last->next;
	WRITE_ONCE(q->head, last->next);
	if (!last->next)
		q->tail = NULL;
	/*
	 * From ao__inbox_refill()'s clear of inbox_set to its store of
	 * head, the items were in neither place a peeker looks, so a
	 * worker whose last re-check before sleeping fell in between saw
	 * nothing, and the submitters, who saw the inbox already non-empty
	 * or that worker not yet asleep, woke nobody.  Those we leave in
	 * head must be published as a submit would (found by the model
	 * checker, tests/model/exec.pml: with one gate item per worker, the
	 * rest waited for ever behind a refiller blocked in its own gate).
	 */
	*hidden = refilled && last->next;
	WRITE_ONCE(q->len, q->len - k);
	ao_spin_unlock(&q->lock);
	/* The items are ours now; their links were written under the lock
	 * or before the push that published them. */
	*rest = first == last ? NULL : first->next;
	*nrest = (unsigned int)(k - 1);
	last->next = NULL;
	return first;
}

#endif /* AORTA_CORE_INBOX_H */
