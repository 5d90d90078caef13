// SPDX-License-Identifier: MIT
/*
 * The red-black tree of timers (see tm_rbtree.h): the textbook insertion
 * and deletion with their colour fix-ups, NULL leaves (black), and the
 * parent of a removed black node's replacement carried explicitly, since
 * the replacement may be a NULL leaf.
 */
#include <stdio.h>
#include "tm_rbtree.h"

static inline bool before(const struct tm_rb_node *a,
			  const struct tm_rb_node *b)
{
	return a->expires < b->expires ||
	       (a->expires == b->expires && a->seq < b->seq);
}

static inline bool is_red(const struct tm_rb_node *x)
{
	return x && x->red;
}

/* Make new take old's place under p (the root if p is NULL). */
static inline void replace_child(struct tm_rbtree *t, struct tm_rb_node *p,
				 struct tm_rb_node *old, struct tm_rb_node *new)
{
	if (!p)
		t->root = new;
	else if (p->left == old)
		p->left = new;
	else
		p->right = new;
}

static void rotate_left(struct tm_rbtree *t, struct tm_rb_node *x)
{
	struct tm_rb_node *y = x->right;

	x->right = y->left;
	if (y->left)
		y->left->parent = x;
	y->parent = x->parent;
	replace_child(t, x->parent, x, y);
	y->left = x;
	x->parent = y;
}

static void rotate_right(struct tm_rbtree *t, struct tm_rb_node *x)
{
	struct tm_rb_node *y = x->left;

	x->left = y->right;
	if (y->right)
		y->right->parent = x;
	y->parent = x->parent;
	replace_child(t, x->parent, x, y);
	y->right = x;
	x->parent = y;
}

static void insert_fixup(struct tm_rbtree *t, struct tm_rb_node *z)
{
	struct tm_rb_node *p, *g, *u;

	while ((p = z->parent) && p->red) {
		g = p->parent; /* p is red, so not the root */
		if (p == g->left) {
			u = g->right;
			if (is_red(u)) {
				p->red = false;
				u->red = false;
				g->red = true;
				z = g;
				continue;
			}
			if (z == p->right) {
				rotate_left(t, p);
				z = p;
				p = z->parent;
			}
			p->red = false;
			g->red = true;
			rotate_right(t, g);
		} else {
			u = g->left;
			if (is_red(u)) {
				p->red = false;
				u->red = false;
				g->red = true;
				z = g;
				continue;
			}
			if (z == p->left) {
				rotate_right(t, p);
				z = p;
				p = z->parent;
			}
			p->red = false;
			g->red = true;
			rotate_left(t, g);
		}
	}
	t->root->red = false;
}

static void insert(struct tm_rbtree *t, struct tm_rb_node *z)
{
	struct tm_rb_node **link = &t->root, *p = NULL;
	bool leftmost = true;

	while (*link) {
		p = *link;
		if (before(z, p)) {
			link = &p->left;
		} else {
			link = &p->right;
			leftmost = false;
		}
	}
	z->parent = p;
	z->left = z->right = NULL;
	z->red = true;
	z->linked = true;
	*link = z;
	if (leftmost)
		t->first = z;
	t->n++;
	insert_fixup(t, z);
}

/* Put v (maybe NULL) where u is. */
static inline void transplant(struct tm_rbtree *t, struct tm_rb_node *u,
			      struct tm_rb_node *v)
{
	replace_child(t, u->parent, u, v);
	if (v)
		v->parent = u->parent;
}

/* Restore the colours after a black node left; x (maybe NULL) is the node
 * that took its place, under xp, and counts one black too few. */
static void erase_fixup(struct tm_rbtree *t, struct tm_rb_node *x,
			struct tm_rb_node *xp)
{
	struct tm_rb_node *w;

	while (x != t->root && !is_red(x)) {
		if (x == xp->left) {
			w = xp->right; /* not NULL: it has x's missing black */
			if (w->red) {
				w->red = false;
				xp->red = true;
				rotate_left(t, xp);
				w = xp->right;
			}
			if (!is_red(w->left) && !is_red(w->right)) {
				w->red = true;
				x = xp;
				xp = x->parent;
				continue;
			}
			if (!is_red(w->right)) {
				w->left->red = false;
				w->red = true;
				rotate_right(t, w);
				w = xp->right;
			}
			w->red = xp->red;
			xp->red = false;
			w->right->red = false;
			rotate_left(t, xp);
		} else {
			w = xp->left;
			if (w->red) {
				w->red = false;
				xp->red = true;
				rotate_right(t, xp);
				w = xp->left;
			}
			if (!is_red(w->left) && !is_red(w->right)) {
				w->red = true;
				x = xp;
				xp = x->parent;
				continue;
			}
			if (!is_red(w->left)) {
				w->right->red = false;
				w->red = true;
				rotate_left(t, w);
				w = xp->left;
			}
			w->red = xp->red;
			xp->red = false;
			w->left->red = false;
			rotate_right(t, xp);
		}
		x = t->root;
		break;
	}
	if (x)
		x->red = false;
}

static inline struct tm_rb_node *leftmost_of(struct tm_rb_node *x)
{
	while (x->left)
		x = x->left;
	return x;
}

static void erase(struct tm_rbtree *t, struct tm_rb_node *z)
{
	struct tm_rb_node *y = z, *x, *xp;
	bool y_red = z->red;

	if (t->first == z) /* z has no left child: its successor is next */
		t->first = z->right ? leftmost_of(z->right) : z->parent;
	if (!z->left) {
		x = z->right;
		xp = z->parent;
		transplant(t, z, x);
	} else if (!z->right) {
		x = z->left;
		xp = z->parent;
		transplant(t, z, x);
	} else {
		y = leftmost_of(z->right);
		y_red = y->red;
		x = y->right;
		if (y->parent == z) {
			xp = y;
		} else {
			xp = y->parent;
			transplant(t, y, x);
			y->right = z->right;
			y->right->parent = y;
		}
		transplant(t, z, y);
		y->left = z->left;
		y->left->parent = y;
		y->red = z->red;
	}
	z->linked = false;
	t->n--;
	if (!y_red)
		erase_fixup(t, x, xp);
}

void tm_rbtree_arm(struct tm_rbtree *t, struct tm_rb_node *x, uint64_t expires)
{
	if (x->linked)
		erase(t, x);
	x->expires = expires;
	x->seq = t->seq++;
	insert(t, x);
}

bool tm_rbtree_cancel(struct tm_rbtree *t, struct tm_rb_node *x)
{
	if (!x->linked)
		return false;
	erase(t, x);
	return true;
}

struct tm_rb_node *tm_rbtree_pop_due(struct tm_rbtree *t, uint64_t now)
{
	struct tm_rb_node *x = t->first;

	if (!x || x->expires > now)
		return NULL;
	erase(t, x);
	return x;
}

/* Black height of the subtree at x, or -1 if it breaks an invariant; *prev
 * is the node before x in order (the walk is in order). */
static int check_node(const struct tm_rb_node *x, const struct tm_rb_node *p,
		      const struct tm_rb_node **prev, size_t *count)
{
	int l, r;

	if (!x)
		return 1;
	if (x->parent != p || !x->linked)
		return -1;
	if (x->red && (is_red(x->left) || is_red(x->right)))
		return -1;
	l = check_node(x->left, x, prev, count);
	if (*prev && !before(*prev, x))
		return -1;
	*prev = x;
	(*count)++;
	r = check_node(x->right, x, prev, count);
	if (l < 0 || l != r)
		return -1;
	return l + !x->red;
}

int tm_rbtree_check(const struct tm_rbtree *t)
{
	const struct tm_rb_node *prev = NULL;
	size_t count = 0;

	if (is_red(t->root) || check_node(t->root, NULL, &prev, &count) < 0 ||
	    count != t->n ||
	    t->first != (t->root ? leftmost_of(t->root) : NULL)) {
		fprintf(stderr, "tm_rbtree: broken tree\n");
		return -1;
	}
	return 0;
}
