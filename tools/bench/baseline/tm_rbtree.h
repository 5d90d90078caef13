/* SPDX-License-Identifier: MIT */
/*
 * A red-black tree of timers, a baseline for tools/bench/timerbench.
 *
 * Intrusive (the caller embeds a struct tm_rb_node), ordered by deadline
 * then by arming order, with the leftmost node cached so that the earliest
 * deadline is one load away: the shape of the kernel's hrtimer queue
 * (timerqueue over an rb_root_cached) and of nginx's timer tree.  Arm and
 * cancel are O(log n); nothing is allocated.  Written from the textbook
 * algorithm (parent pointers, NULL leaves).
 *
 * No lock: one thread owns a tree.  Not for use outside the benchmarks.
 */
#ifndef AORTA_BENCH_TM_RBTREE_H
#define AORTA_BENCH_TM_RBTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tm_rb_node {
	struct tm_rb_node *parent, *left, *right;
	uint64_t expires; /* deadline, while queued */
	uint64_t seq; /* arming order, for ties */
	bool red;
	bool linked; /* queued */
};

struct tm_rbtree {
	struct tm_rb_node *root;
	struct tm_rb_node *first; /* the earliest, or NULL */
	uint64_t seq; /* arms so far */
	size_t n; /* queued nodes */
};

static inline void tm_rbtree_init(struct tm_rbtree *t)
{
	t->root = NULL;
	t->first = NULL;
	t->seq = 0;
	t->n = 0;
}

static inline void tm_rb_node_init(struct tm_rb_node *x)
{
	x->parent = x->left = x->right = NULL;
	x->expires = 0;
	x->seq = 0;
	x->red = false;
	x->linked = false;
}

static inline bool tm_rb_pending(const struct tm_rb_node *x)
{
	return x->linked;
}

/* Queue x for expires, or move it there if it is queued. */
void tm_rbtree_arm(struct tm_rbtree *t, struct tm_rb_node *x, uint64_t expires);
/* Take x out; true if it was queued. */
bool tm_rbtree_cancel(struct tm_rbtree *t, struct tm_rb_node *x);

/* The earliest node, or NULL if the tree is empty. */
static inline struct tm_rb_node *tm_rbtree_min(const struct tm_rbtree *t)
{
	return t->first;
}

/* Take out and return the earliest node if it is due at now, else NULL. */
struct tm_rb_node *tm_rbtree_pop_due(struct tm_rbtree *t, uint64_t now);

/* Check the tree's invariants: 0, or -1 with a message on stderr. */
int tm_rbtree_check(const struct tm_rbtree *t);

#endif /* AORTA_BENCH_TM_RBTREE_H */
