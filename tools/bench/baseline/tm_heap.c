// SPDX-License-Identifier: MIT
/*
 * The binary min-heap of timers (see tm_heap.h).  Children of i are 2i+1
 * and 2i+2.  A sift carries the moving entry in a local and writes each
 * entry it passes once, so a sift over k levels is k entry moves and k
 * index updates, not k swaps.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "tm_heap.h"

int tm_heap_init(struct tm_heap *h, uint32_t cap)
{
	h->n = 0;
	h->seq = 0;
	h->cap = cap ? cap : 16;
	h->v = malloc((size_t)h->cap * sizeof(*h->v));
	return h->v ? 0 : -ENOMEM;
}

void tm_heap_destroy(struct tm_heap *h)
{
	for (uint32_t i = 0; i < h->n; i++)
		h->v[i].node->index = TM_HEAP_NONE;
	free(h->v);
	h->v = NULL;
	h->n = 0;
	h->cap = 0;
}

static inline bool ent_before(const struct tm_heap_ent *a,
			      const struct tm_heap_ent *b)
{
	return a->expires < b->expires ||
	       (a->expires == b->expires && a->seq < b->seq);
}

static inline void put(struct tm_heap *h, uint32_t i,
		       const struct tm_heap_ent *e)
{
	h->v[i] = *e;
	e->node->index = i;
}

/* Move e up from the hole at i to its place. */
static void sift_up(struct tm_heap *h, uint32_t i, struct tm_heap_ent e)
{
	while (i) {
		uint32_t p = (i - 1) / 2;

		if (!ent_before(&e, &h->v[p]))
			break;
		put(h, i, &h->v[p]);
		i = p;
	}
	put(h, i, &e);
}

/* Move e down from the hole at i to its place. */
static void sift_down(struct tm_heap *h, uint32_t i, struct tm_heap_ent e)
{
	uint32_t n = h->n;

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && ent_before(&h->v[c + 1], &h->v[c]))
			c++;
		if (!ent_before(&h->v[c], &e))
			break;
		put(h, i, &h->v[c]);
		i = c;
	}
	put(h, i, &e);
}

/* Put e in the hole at i, up or down as its key says. */
static void fix(struct tm_heap *h, uint32_t i, struct tm_heap_ent e)
{
	if (i && ent_before(&e, &h->v[(i - 1) / 2]))
		sift_up(h, i, e);
	else
		sift_down(h, i, e);
}

static __attribute__((noinline)) int grow(struct tm_heap *h)
{
	uint32_t cap = h->cap * 2;
	struct tm_heap_ent *v;

	if (cap <= h->cap)
		return -ENOMEM;
	v = realloc(h->v, (size_t)cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	h->v = v;
	h->cap = cap;
	return 0;
}

int tm_heap_arm(struct tm_heap *h, struct tm_heap_node *x, uint64_t expires)
{
	struct tm_heap_ent e = { expires, h->seq++, x };

	x->expires = expires;
	if (x->index != TM_HEAP_NONE) {
		fix(h, x->index, e);
		return 0;
	}
	if (h->n == h->cap && grow(h))
		return -ENOMEM;
	sift_up(h, h->n++, e);
	return 0;
}

bool tm_heap_cancel(struct tm_heap *h, struct tm_heap_node *x)
{
	uint32_t i = x->index;

	if (i == TM_HEAP_NONE)
		return false;
	x->index = TM_HEAP_NONE;
	if (i != --h->n)
		fix(h, i, h->v[h->n]);
	return true;
}

struct tm_heap_node *tm_heap_pop_due(struct tm_heap *h, uint64_t now)
{
	struct tm_heap_node *x;

	if (!h->n || h->v[0].expires > now)
		return NULL;
	x = h->v[0].node;
	x->index = TM_HEAP_NONE;
	if (--h->n)
		sift_down(h, 0, h->v[h->n]);
	return x;
}

int tm_heap_check(const struct tm_heap *h)
{
	for (uint32_t i = 0; i < h->n; i++) {
		const struct tm_heap_ent *e = &h->v[i];

		if (e->node->index != i || e->node->expires != e->expires) {
			fprintf(stderr, "tm_heap: entry %u: bad node\n", i);
			return -1;
		}
		if (i && ent_before(e, &h->v[(i - 1) / 2])) {
			fprintf(stderr, "tm_heap: entry %u before parent\n", i);
			return -1;
		}
	}
	return 0;
}
