// SPDX-License-Identifier: MIT
/*
 * The pointer-linked binary heap of timers (see tm_pheap.h).  The n-th
 * node of a complete binary tree (1-based) is reached from the root by the
 * bits of n below its top bit, 0 = left; insertion hangs the new node
 * there and sifts it up, removal moves the last node into the hole and
 * sifts it down, then up.  A sift swaps a node with its parent by
 * relinking both, never by copying payloads.
 */
#include <stdio.h>
#include "tm_pheap.h"

static bool less(const struct tm_pnode *a, const struct tm_pnode *b)
{
	return a->expires < b->expires ||
	       (a->expires == b->expires && a->seq < b->seq);
}

/* Point whatever pointed at old (its parent's link, or the root) at x. */
static void replace_link(struct tm_pheap *h, struct tm_pnode *parent,
			 struct tm_pnode *old, struct tm_pnode *x)
{
	if (!parent)
		h->min = x;
	else if (parent->left == old)
		parent->left = x;
	else
		parent->right = x;
}

/* Swap child c with its parent p in the tree. */
static void swap_up(struct tm_pheap *h, struct tm_pnode *p, struct tm_pnode *c)
{
	struct tm_pnode *pp = p->parent, *pl = p->left, *pr = p->right;
	struct tm_pnode *cl = c->left, *cr = c->right;

	c->parent = pp;
	if (pl == c) {
		c->left = p;
		c->right = pr;
		if (pr)
			pr->parent = c;
	} else {
		c->right = p;
		c->left = pl;
		if (pl)
			pl->parent = c;
	}
	p->parent = c;
	p->left = cl;
	if (cl)
		cl->parent = p;
	p->right = cr;
	if (cr)
		cr->parent = p;
	replace_link(h, pp, p, c);
}

/* The node at 1-based position k, or the parent of that place when
 * parent_only (k > 1). */
static struct tm_pnode *walk(const struct tm_pheap *h, uint32_t k,
			     bool parent_only)
{
	struct tm_pnode *x = h->min;
	int top = 31 - __builtin_clz(k);

	for (int i = top - 1; i >= (parent_only ? 1 : 0); i--)
		x = (k >> i) & 1 ? x->right : x->left;
	return x;
}

static void sift_up(struct tm_pheap *h, struct tm_pnode *x)
{
	while (x->parent && less(x, x->parent))
		swap_up(h, x->parent, x);
}

static void sift_down(struct tm_pheap *h, struct tm_pnode *x)
{
	for (;;) {
		struct tm_pnode *m = x;

		if (x->left && less(x->left, m))
			m = x->left;
		if (x->right && less(x->right, m))
			m = x->right;
		if (m == x)
			return;
		swap_up(h, x, m);
	}
}

static void insert(struct tm_pheap *h, struct tm_pnode *x)
{
	uint32_t k = ++h->n;

	x->left = x->right = x->parent = 0;
	x->queued = true;
	if (k == 1) {
		h->min = x;
		return;
	}
	x->parent = walk(h, k, true);
	if (k & 1)
		x->parent->right = x;
	else
		x->parent->left = x;
	sift_up(h, x);
}

bool tm_pheap_cancel(struct tm_pheap *h, struct tm_pnode *x)
{
	struct tm_pnode *last;

	if (!x->queued)
		return false;
	x->queued = false;
	last = walk(h, h->n, false);
	h->n--;
	replace_link(h, last->parent, last, 0);
	if (last == x)
		return true;
	/* The last node fills x's place (x's links read after the detach:
	 * last may have been x's child). */
	last->left = x->left;
	last->right = x->right;
	last->parent = x->parent;
	if (last->left)
		last->left->parent = last;
	if (last->right)
		last->right->parent = last;
	replace_link(h, x->parent, x, last);
	sift_down(h, last);
	sift_up(h, last);
	return true;
}

void tm_pheap_arm(struct tm_pheap *h, struct tm_pnode *x, uint64_t expires)
{
	tm_pheap_cancel(h, x);
	x->expires = expires;
	x->seq = h->seq++;
	insert(h, x);
}

static int check_node(const struct tm_pnode *x, uint32_t *count)
{
	for (int i = 0; i < 2; i++) {
		const struct tm_pnode *c = i ? x->right : x->left;

		if (!c)
			continue;
		if (c->parent != x || less(c, x)) {
			fprintf(stderr, "tm_pheap: bad link or order\n");
			return -1;
		}
		if (check_node(c, count))
			return -1;
	}
	(*count)++;
	return 0;
}

int tm_pheap_check(const struct tm_pheap *h)
{
	uint32_t count = 0;

	if (h->min && (h->min->parent || check_node(h->min, &count)))
		return -1;
	if (count != h->n) {
		fprintf(stderr, "tm_pheap: %u nodes, n says %u\n", count, h->n);
		return -1;
	}
	return 0;
}
