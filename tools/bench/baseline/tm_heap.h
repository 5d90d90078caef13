/* SPDX-License-Identifier: MIT */
/*
 * A binary min-heap of timers, a baseline for tools/bench/timerbench.
 *
 * The usual event-loop timer queue, intrusive: the caller embeds a struct
 * tm_heap_node, and the node records its position in the heap's array, so
 * that a cancel or a move finds it at once and costs O(log n) sifts, not a
 * search (Go's runtime timers and Java's ScheduledThreadPoolExecutor keep
 * an index the same way; libuv links the same binary heap with pointers).
 * The array holds each entry's deadline beside the node pointer, so that
 * the sifts compare without touching the nodes; a node is written only
 * when its entry moves.  Equal deadlines fire in arming order (a sequence
 * number breaks ties, as libuv's start_id does).
 *
 * No lock: one thread owns a heap (timerbench puts one behind a lock to
 * show what sharing it costs).  Not for use outside the benchmarks.
 */
#ifndef AORTA_BENCH_TM_HEAP_H
#define AORTA_BENCH_TM_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#define TM_HEAP_NONE UINT32_MAX /* index of a node that is not queued */

struct tm_heap_node {
	uint64_t expires; /* deadline, while queued */
	uint32_t index; /* position in the heap, or TM_HEAP_NONE */
};

struct tm_heap_ent {
	uint64_t expires;
	uint64_t seq; /* arming order, for ties */
	struct tm_heap_node *node;
};

struct tm_heap {
	struct tm_heap_ent *v; /* v[0] is the earliest */
	uint32_t n; /* queued nodes */
	uint32_t cap; /* room in v */
	uint64_t seq; /* arms so far */
};

/* An empty heap with room for cap nodes (it grows as needed); -ENOMEM. */
int tm_heap_init(struct tm_heap *h, uint32_t cap);
void tm_heap_destroy(struct tm_heap *h);

static inline void tm_heap_node_init(struct tm_heap_node *x)
{
	x->expires = 0;
	x->index = TM_HEAP_NONE;
}

static inline bool tm_heap_pending(const struct tm_heap_node *x)
{
	return x->index != TM_HEAP_NONE;
}

/* Queue x for expires, or move it there if it is queued; -ENOMEM. */
int tm_heap_arm(struct tm_heap *h, struct tm_heap_node *x, uint64_t expires);
/* Take x out; true if it was queued. */
bool tm_heap_cancel(struct tm_heap *h, struct tm_heap_node *x);

/* The earliest node, or NULL if the heap is empty. */
static inline struct tm_heap_node *tm_heap_min(const struct tm_heap *h)
{
	return h->n ? h->v[0].node : NULL;
}

/* Take out and return the earliest node if it is due at now, else NULL. */
struct tm_heap_node *tm_heap_pop_due(struct tm_heap *h, uint64_t now);

/* Check the heap's invariants: 0, or -1 with a message on stderr. */
int tm_heap_check(const struct tm_heap *h);

#endif /* AORTA_BENCH_TM_HEAP_H */
