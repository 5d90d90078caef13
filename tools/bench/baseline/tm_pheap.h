/* SPDX-License-Identifier: MIT */
/*
 * A binary min-heap of timers linked with pointers, the shape libuv's
 * timer heap has (each node holds its parent and children; the n-th node's
 * place is found from the bits of n): the anchor of timerbench's rearm
 * target ("libuv's heap measured 887 ns here" to move one of 1M).  Unlike
 * tm_heap.h, whose array keeps the deadlines together, every sift step here
 * touches the nodes themselves, scattered in memory.
 *
 * No lock: one thread owns a heap.  Not for use outside the benchmarks.
 */
#ifndef AORTA_BENCH_TM_PHEAP_H
#define AORTA_BENCH_TM_PHEAP_H

#include <stdbool.h>
#include <stdint.h>

struct tm_pnode {
	struct tm_pnode *left, *right, *parent;
	uint64_t expires; /* deadline, while queued */
	uint64_t seq; /* arming order, for ties */
	bool queued;
};

struct tm_pheap {
	struct tm_pnode *min; /* the root */
	uint32_t n; /* queued nodes */
	uint64_t seq; /* arms so far */
};

static inline void tm_pheap_init(struct tm_pheap *h)
{
	h->min = 0;
	h->n = 0;
	h->seq = 0;
}

static inline void tm_pnode_init(struct tm_pnode *x)
{
	x->left = x->right = x->parent = 0;
	x->expires = 0;
	x->seq = 0;
	x->queued = false;
}

/* Queue x for expires, or move it there if it is queued. */
void tm_pheap_arm(struct tm_pheap *h, struct tm_pnode *x, uint64_t expires);
/* Take x out; true if it was queued. */
bool tm_pheap_cancel(struct tm_pheap *h, struct tm_pnode *x);
/* Check the heap's invariants: 0, or -1 with a message on stderr. */
int tm_pheap_check(const struct tm_pheap *h);

#endif /* AORTA_BENCH_TM_PHEAP_H */
