// SPDX-License-Identifier: MIT
/*
 * Calls: fn(arg) on an executor, a strand or a group, with the work item
 * taken from a per-thread cache instead of malloc().
 *
 * Why a cache, and why slabs
 * --------------------------
 * A caller that has only a function and an argument would malloc() a
 * wrapper per task and the worker would free() it: with glibc that free
 * lands in another thread's arena, and 1M empty tasks ran at 3.7 M/s that
 * way where recycled wrappers ran at 18 (execbench's ao-steal-malloc
 * measures it beside ao-steal-call).  So items are recycled here, as
 * mimalloc and TBB's scalable allocator recycle memory: each belongs for
 * life to the thread that allocated it and goes back to that thread once
 * run, wherever it ran.
 *
 * How they are recycled matters as much.  The executor's queues are lists
 * linked through the items, which workers walk (ao_inbox_take() in
 * core/inbox.h) while the producer writes the next ones: in address order
 * the prefetchers fetch the lines ahead, in any other order each step
 * waits for a miss: a queue walked in shuffled order ran an order of
 * magnitude slower, and items recycled LIFO through a linked list ran at
 * half the speed of intrusive ones (docs/PERFORMANCE.md).  So items are
 * 32 bytes, two to a cache line, carved from 2 KiB slabs
 * whose idle items are a bitmap, and a thread hands out the lowest idle
 * item of its current slab: successive calls get successive addresses.
 *
 * Slabs and heaps
 * ---------------
 * A slab (struct call_slab) is a 64-byte header and AO_CALL_SLAB_ITEMS
 * items, 2 KiB aligned, so an item's slab and bit are its address's high
 * and middle bits.  Slabs are carved from blocks of memory that a
 * thread maps for itself (see "Blocks" below), each unmapped with its
 * last slab.  Each thread has a heap (struct call_heap):
 * its hand (its current slab and that slab's idle bits, the mask), its
 * other slabs with some items idle (partial) and with all of them idle
 * (idle), the items back from its last other slab (own), the items it
 * holds for another thread's slab (hold), and what other threads touch:
 * the list of its slabs that have items sent back (rslabs), and a
 * reference count.
 *
 *	get	the lowest bit of the mask (and a prefetch 8 items ahead;
 *		core/call_priv.h, so that ao_exec_call() in core/exec.c
 *		takes it inline in its submit).  When the mask is empty:
 *		take back what was sent (rslabs with one exchange, then
 *		each slab's bits with one exchange), then move to an idle
 *		slab, else a partial one, else a new one.
 *	run	read fn and arg, put the item back, then call fn(arg) (a
 *		tail call): the item is idle before fn runs, so a call that
 *		fn makes may reuse it while its line is still in this CPU's
 *		cache.
 *	put	an item of the current slab: set its bit in mask.  Of
 *		another slab of ours: set its bit in own, the bits
 *		gathered for one such slab, which go to that slab's free
 *		bits (and the slab to its list) when an item of another
 *		of our slabs comes, or when the hand moves: calls come
 *		back in runs from one slab, and a slab's list is updated
 *		once per run, not per item.
 *		Another thread's: set its bit in the hold, which is sent
 *		(one CAS on the slab's returned bits) when an item of
 *		another slab comes, or when it holds AO_CALL_BATCH.  The
 *		sender that finds no bits pending on the slab pushes the
 *		slab onto its owner's rslabs (a lock-free push).
 *
 * So a producer and the workers that run its calls share a line per slab
 * and batch, not per item; nobody writes into an item to give it back;
 * and nobody calls malloc() or free() in a steady state.  There is no
 * lock anywhere.  A group call takes two items (the group is one word
 * too many for one) and counts itself in and out as ao_group_submit()
 * does.
 *
 * The returned word
 * -----------------
 * A slab's returned word holds the item bits sent back (bits 2 to 63, bit
 * i for the i-th 32 bytes), QUEUED (bit 0) and ORPHAN (bit 1), where the
 * header's bytes are.  QUEUED: the slab is on its owner's rslabs, or a
 * sender is pushing it there; the sender that sets it pushes, and the
 * owner clears it with the bits it takes, so a slab is on the list at
 * most once.  ORPHAN: the owner has exited (see below); bits then
 * accumulate until every item is home, and whoever completes them frees
 * the slab, unless QUEUED says a pusher still holds it, in which case
 * that pusher does.  Every change is one CAS or RMW, so exactly one
 * thread sees the slab complete.
 *
 * Memory bounds
 * -------------
 * Items exist while their calls are queued or running, and then as the
 * idle items of their slabs.  A thread holds at most one batch of
 * AO_CALL_BATCH items for others.  Wholly idle slabs are kept for reuse,
 * and every second a calling thread frees those beyond
 * AO_CALL_IDLE_SLABS that it did not use meanwhile (the low-water mark
 * of its idle list, as jemalloc trims its thread caches): a thread that
 * draws on its idle slabs again within a second keeps them, one that has
 * more than it uses gives the rest back within two seconds of calls (it
 * looks at the clock every IDLE_DECAY slab changes, some 4,000 calls).
 * A slab stays while any of its items is out, and its page while any
 * slab on it is in use: at most one page per call in flight in the worst
 * case (calls come home in roughly the order they were made, so slabs
 * drain whole).  A thread that stops
 * calling keeps what it has until its next call or its exit.
 *
 * Thread exit
 * -----------
 * The first call of a thread registers its heap with a pthread key whose
 * destructor (heap_exit()) sends the hold home, closes rslabs (exchanging
 * it for HEAP_DEAD), takes what was on it, and sets ORPHAN on every slab
 * it knows (the current one, the partial and the idle ones) together
 * with their idle bits: a slab whose items are all home is freed then.  A
 * slab that has every item out is on none of those lists; the first
 * sender that finds HEAP_DEAD sets ORPHAN on it.  The heap's reference
 * count is one for the thread and one per slab, and the last slab freed
 * frees the heap, so nothing leaks and nothing is touched after it is
 * freed.  A call from a later destructor starts a new heap, freed in the
 * next round (glibc runs PTHREAD_DESTRUCTOR_ITERATIONS rounds).
 *
 * Orderings are commented where they are used, each with its pair.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/mman.h>
#include <aorta/clock.h>
#include <aorta/compiler.h>
#include <aorta/core/call.h>
#include <aorta/core/exec.h>
#include <aorta/core/group.h>
#include <aorta/core/strand.h>
#include "asan_priv.h"
#include "call_priv.h"

#if AO_ASAN
#include <sanitizer/lsan_interface.h>
/* The leak checker does not scan mappings; a block's slab headers are
 * what point at its struct call_block (and the main thread, which runs no
 * destructor, keeps its blocks). */
#define block_mapped(p, n) __lsan_register_root_region((p), (n))
#define block_unmapped(p, n) __lsan_unregister_root_region((p), (n))
#else
#define block_mapped(p, n) ((void)(p), (void)(n))
#define block_unmapped(p, n) ((void)(p), (void)(n))
#endif

#define SLAB_SIZE 2048u
#define ITEM_SHIFT AO__CALL_SHIFT
/* Slabs are carved from blocks of BLOCK_MIN to BLOCK_MAX slabs (see
 * "Blocks" at block_new()). */
#define BLOCK_MIN 4u
#define BLOCK_MAX 128u
/* A thread frees the wholly idle slabs beyond AO_CALL_IDLE_SLABS that it
 * did not use for IDLE_DECAY_NS, looking every IDLE_DECAY slab changes. */
#define IDLE_DECAY 64u
#define IDLE_DECAY_NS 1000000000ull
/* The returned word's flags and items (see "The returned word"). */
#define QUEUED 1ull
#define ORPHAN 2ull
#define ITEMS (~(QUEUED | ORPHAN))

struct call_heap;

#define call_item ao__call_item /* core/call_priv.h */

/* A group call's second item: what its first one needs besides. */
struct call_gdata {
	void *arg;
	struct ao_group *group;
	void *unused[2];
};

/* Slabs carved from one mapping, unmapped with the last of them. */
struct call_block {
	char *mem;
	int64_t live; /* slabs carved and not freed, +1 while carving or
		       * trimming */
	size_t size; /* bytes mapped */
	unsigned int nslabs; /* slabs it holds */
	bool trimming; /* on the list of a heap_trim() */
	struct call_block *tnext; /* ...that list */
	uint64_t freed[BLOCK_MAX / 64]; /* slabs freed by the owner's trims */
	uint64_t gone; /* pages given back (block_give_back()) */
};

enum { ON_NONE, ON_PARTIAL, ON_IDLE };

struct call_slab {
	/* Written by the threads that send items back. */
	uint64_t returned; /* item bits, QUEUED, ORPHAN */
	struct call_slab *rnext; /* on the owner's rslabs */
	/* Set once. */
	struct call_heap *heap;
	struct call_block *block;
	/* The owner's. */
	uint64_t free; /* idle item bits here (the current slab's: mask) */
	struct call_slab *next, *prev; /* on the partial or the idle list */
	uint8_t on; /* ON_* */
} __ao_cacheline_aligned;

AO_BUILD_BUG_ON(sizeof(struct call_item) != 1u << ITEM_SHIFT);
AO_BUILD_BUG_ON(sizeof(struct call_gdata) != 1u << ITEM_SHIFT);
AO_BUILD_BUG_ON(sizeof(struct call_slab) != 2u << ITEM_SHIFT);
AO_BUILD_BUG_ON(SLAB_SIZE >> ITEM_SHIFT != AO_CALL_SLAB_ITEMS + 2);

struct call_list {
	struct call_slab *head, *tail;
	unsigned int n;
};

struct call_heap {
	/* Written by other threads. */
	struct call_slab *rslabs; /* slabs with items sent back, HEAP_DEAD */
	int64_t refs; /* 1 for the thread while it lives, 1 per slab */

	/* The thread's.  hand.slab: the current slab, which hands out its
	 * idle items (hand.mask); core/exec.c takes them too. */
	struct ao__call_hand hand __ao_cacheline_aligned;
	struct call_slab *hold; /* another thread's slab... */
	uint64_t hold_bits; /* ...and the bits of its items we hold */
	unsigned int nhold; /* items in hold_bits */
	struct call_slab *own; /* one of our slabs, not the current... */
	uint64_t own_bits; /* ...and its items that came back since */
	uint32_t tick; /* slab changes so far */
	uint32_t trim_tick; /* the last look at the clock */
	uint64_t trim_ns; /* the last heap_trim() */
	unsigned int idle_low; /* fewest on the idle list since then */
	struct call_list partial; /* slabs with some items idle */
	struct call_list idle; /* wholly idle slabs, newest first */
	struct call_block *carve; /* the block new slabs come from */
	unsigned int carved; /* slabs carved from it */
	unsigned int nslabs; /* slabs alive (carved and not trimmed) */
};

/* The rslabs of a thread that has exited. */
#define HEAP_DEAD ((struct call_slab *)1)

/*
 * The calling thread's heap's hand.  Until its first call, that of a
 * shared heap that is never written (an empty mask, no current slab), so
 * that the fast paths need no NULL test.
 */
static struct call_heap heap_none;
__thread struct ao__call_hand *ao__call_hand
	__attribute__((tls_model("initial-exec"))) = &heap_none.hand;

/* The calling thread's heap. */
static __ao_always_inline struct call_heap *this_heap(void)
{
	return container_of(ao__call_hand, struct call_heap, hand);
}

static __ao_always_inline void set_heap(struct call_heap *c)
{
	ao__call_hand = &c->hand;
}

static __ao_always_inline struct call_slab *cur_of(const struct call_heap *c)
{
	return (struct call_slab *)(void *)c->hand.slab;
}

static pthread_key_t heap_key;
static pthread_once_t heap_key_once = PTHREAD_ONCE_INIT;
static int heap_key_err;

/* ao_call_stats(): relaxed counters, off the fast paths. */
static uint64_t stat_allocated, stat_released, stat_heaps, stat_bytes;
/* sysconf(_SC_PAGESIZE), read once by heap_key_create(). */
static size_t page_size;

static inline struct call_slab *slab_of(const struct call_item *x)
{
	return (struct call_slab *)((uintptr_t)x & ~(uintptr_t)(SLAB_SIZE - 1));
}

static inline uint64_t bit_of(const struct call_item *x)
{
	return 1ull << (((uintptr_t)x >> ITEM_SHIFT) & 63);
}

static inline struct call_item *slab_item(struct call_slab *s, uint64_t i)
{
	return (struct call_item *)((char *)s + (i << ITEM_SHIFT));
}

static void heap_exit(void *arg);

static void heap_key_create(void)
{
	long page = sysconf(_SC_PAGESIZE);

	page_size = page > 0 ? (size_t)page : 4096;
	heap_key_err = pthread_key_create(&heap_key, heap_exit);
}

/* Start the calling thread's heap; 0 or -errno. */
static __ao_noinline int heap_init(void)
{
	struct call_heap *h;
	void *mem;
	int err;

	pthread_once(&heap_key_once, heap_key_create);
	if (heap_key_err)
		return -heap_key_err;
	if (posix_memalign(&mem, AO_CACHELINE_SIZE, sizeof(*h)))
		return -ENOMEM;
	h = mem;
	*h = (struct call_heap){ .refs = 1, .trim_ns = ao_now_ns() };
	err = pthread_setspecific(heap_key, h);
	if (err) {
		free(h);
		return -err;
	}
	set_heap(h);
	__atomic_fetch_add(&stat_heaps, 1, __ATOMIC_RELAXED);
	return 0;
}

/* Drop n references to h; the last frees it. */
static void heap_put(struct call_heap *h, int64_t n)
{
	/* ACQ_REL: our uses of h come before the count falls (release),
	 * and the thread that sees it reach zero sees everyone's before it
	 * frees (acquire): the refcount pattern. */
	if (__atomic_sub_fetch(&h->refs, n, __ATOMIC_ACQ_REL))
		return;
	free(h);
	__atomic_fetch_sub(&stat_heaps, 1, __ATOMIC_RELAXED);
}

/* Drop a reference to b; the last unmaps it. */
static void block_put(struct call_block *b)
{
	size_t gone;

	/* ACQ_REL: as in heap_put(). */
	if (__atomic_sub_fetch(&b->live, 1, __ATOMIC_ACQ_REL))
		return;
	gone = (size_t)__builtin_popcountll(b->gone) * page_size;
	block_unmapped(b->mem, b->size);
	munmap(b->mem, b->size);
	__atomic_fetch_sub(&stat_bytes, b->size - gone, __ATOMIC_RELAXED);
	free(b);
}

/* Free a slab that no thread can reach any more. */
static void slab_free(struct call_slab *s)
{
	struct call_heap *h = s->heap;

	block_put(s->block);
	__atomic_fetch_add(&stat_released, 1, __ATOMIC_RELAXED);
	heap_put(h, 1);
}

/* ---- sending items home ---- */

/* The owner has exited: mark s ORPHAN and give up QUEUED (which we hold);
 * free it if every item is home. */
static void slab_orphan(struct call_slab *s)
{
	uint64_t v = __atomic_load_n(&s->returned, __ATOMIC_RELAXED);

	/* ACQ_REL, as every RMW on returned after the owner's exit: the
	 * one that completes the bits sees every sender's use of the items
	 * before it frees them. */
	while (!__atomic_compare_exchange_n(&s->returned, &v,
					    (v | ORPHAN) & ~QUEUED, true,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		;
	if (((v | ORPHAN) & ITEMS) == ITEMS)
		slab_free(s);
}

/* Push s, whose QUEUED we set, onto its owner's rslabs. */
static void slab_push(struct call_slab *s)
{
	/* The heap lives: QUEUED keeps s from being freed (by an orphan's
	 * last sender), and s holds a reference to it. */
	struct call_heap *h = s->heap;
	struct call_slab *head = __atomic_load_n(&h->rslabs, __ATOMIC_RELAXED);

	do {
		if (head == HEAP_DEAD) {
			slab_orphan(s);
			return;
		}
		s->rnext = head;
		/* RELEASE: s->rnext (and our bits, released by their own
		 * CAS) before the owner takes the list; pairs with the
		 * ACQUIRE exchange in heap_collect().  Once it succeeds s
		 * is the owner's: we touch neither s nor h again. */
	} while (!__atomic_compare_exchange_n(&h->rslabs, &head, s, true,
					      __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
}

/* Send bits (items of s, another thread's slab) home. */
static void slab_send(struct call_slab *s, uint64_t bits)
{
	uint64_t v = __atomic_load_n(&s->returned, __ATOMIC_RELAXED), n;

	do {
		n = v | bits;
		if (!(v & (QUEUED | ORPHAN)))
			n |= QUEUED; /* and we push it */
		/* ACQ_REL.  Release: our reads of the items, when we ran
		 * them, come before the owner's reuse (pairs with the
		 * ACQUIRE exchange in heap_collect()) or before an orphan's
		 * free.  Acquire: for the free (see slab_orphan()). */
	} while (!__atomic_compare_exchange_n(
		&s->returned, &v, n, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
	if (v & ORPHAN) {
		/* A pusher that still holds QUEUED frees it instead. */
		if (!(n & QUEUED) && (n & ITEMS) == ITEMS)
			slab_free(s);
		return;
	}
	if (!(v & QUEUED))
		slab_push(s);
}

/* Send the hold home, if it holds anything. */
static void hold_flush(struct call_heap *c)
{
	if (!c->nhold)
		return;
	slab_send(c->hold, c->hold_bits);
	c->hold = NULL;
	c->hold_bits = 0;
	c->nhold = 0;
}

/* ---- the owner's slabs ---- */

static void list_add(struct call_list *l, struct call_slab *s)
{
	s->prev = NULL;
	s->next = l->head;
	if (l->head)
		l->head->prev = s;
	else
		l->tail = s;
	l->head = s;
	l->n++;
}

static void list_del(struct call_list *l, struct call_slab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		l->head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	else
		l->tail = s->prev;
	l->n--;
}

/* Items of s (ours, not the current slab) are idle again. */
static void slab_idle(struct call_heap *c, struct call_slab *s, uint64_t bits)
{
	s->free |= bits;
	if (s->free != ITEMS) {
		if (s->on == ON_NONE) {
			list_add(&c->partial, s);
			s->on = ON_PARTIAL;
		}
		return;
	}
	/* Wholly idle: nobody else can reach it (no item out, and no bits
	 * pending: those were taken with QUEUED). */
	if (s->on == ON_PARTIAL)
		list_del(&c->partial, s);
	list_add(&c->idle, s);
	s->on = ON_IDLE;
}

/* Put the items gathered in own back on their slab. */
static void own_flush(struct call_heap *c)
{
	if (!c->own)
		return;
	slab_idle(c, c->own, c->own_bits);
	c->own = NULL;
	c->own_bits = 0;
}

/* Give back the pages of b whose slabs a trim has all freed (b lives:
 * the trim holds a reference). */
static void block_give_back(struct call_block *b)
{
	size_t spp = page_size / SLAB_SIZE; /* slabs per page */
	size_t npages = b->nslabs / spp, first = 0, run = 0;
	uint64_t all = spp >= 64 ? ~0ull : (1ull << spp) - 1;

	if (spp > 64 || npages > 64)
		return; /* pages this large: the block goes whole */
	for (size_t p = 0; p <= npages; p++) {
		size_t i = p * spp;
		bool done = p < npages && !(b->gone & (1ull << p)) &&
			    ((b->freed[i / 64] >> (i % 64)) & all) == all;

		if (done) {
			if (!run++)
				first = p;
			continue;
		}
		if (run && !madvise(b->mem + first * page_size, run * page_size,
				    MADV_DONTNEED)) {
			b->gone |= (run == 64 ? ~0ull : (1ull << run) - 1)
				   << first;
			__atomic_fetch_sub(&stat_bytes, run * page_size,
					   __ATOMIC_RELAXED);
		}
		run = 0;
	}
}

/* Put b on the trim's list, once, with a reference that keeps it while
 * the trim looks at it. */
static void trim_note(struct call_block **trimmed, struct call_block *b)
{
	if (b->trimming)
		return;
	b->trimming = true;
	b->tnext = *trimmed;
	*trimmed = b;
	__atomic_fetch_add(&b->live, 1, __ATOMIC_RELAXED);
}

/*
 * Once IDLE_DECAY_NS have passed, free the wholly idle slabs that stayed
 * on the idle list all that time, beyond AO_CALL_IDLE_SLABS: its
 * low-water mark (as jemalloc trims its thread caches).  The oldest go
 * first (the tail).  A thread that draws on its idle slabs again within
 * the period keeps what it draws on; one that has more than it uses
 * gives the rest back.  The period is time, not slab changes: a burst
 * of calls that comes back every tick, or a call tree run again, finds
 * its slabs still there (counted in slab changes, a call tree run again
 * freed its idle slabs early in its ramp and allocated them again).  The
 * clock
 * is read every IDLE_DECAY slab changes (62 calls each), not per call.
 */
static void heap_trim(struct call_heap *c)
{
	struct call_block *trimmed = NULL;
	unsigned int surplus;
	uint64_t now;

	if (c->tick - c->trim_tick < IDLE_DECAY)
		return;
	c->trim_tick = c->tick;
	now = ao_now_ns();
	if (now - c->trim_ns < IDLE_DECAY_NS)
		return;
	surplus = c->idle_low > AO_CALL_IDLE_SLABS ?
			  c->idle_low - AO_CALL_IDLE_SLABS :
			  0;
	/* A thread with idle slabs to spare will not carve the rest of its
	 * block soon: that rest goes back with the slabs trimmed (a burst
	 * may leave up to 127 slabs of a 256 KiB block uncarved). */
	if (surplus && c->carve) {
		struct call_block *b = c->carve;

		trim_note(&trimmed, b);
		for (size_t i = c->carved; i < b->nslabs; i++)
			b->freed[i / 64] |= 1ull << (i % 64);
		c->carve = NULL;
		block_put(b); /* the carver's reference; the trim's keeps it */
	}
	while (surplus--) {
		struct call_slab *s = c->idle.tail;
		struct call_block *b = s->block;
		size_t i = (size_t)((char *)s - b->mem) / SLAB_SIZE;

		list_del(&c->idle, s);
		trim_note(&trimmed, b);
		b->freed[i / 64] |= 1ull << (i % 64);
		c->nslabs--;
		slab_free(s);
	}
	while (trimmed) {
		struct call_block *b = trimmed;

		trimmed = b->tnext;
		b->trimming = false;
		/* Relaxed: a hint; only our reference left means the put
		 * below unmaps it anyway. */
		if (__atomic_load_n(&b->live, __ATOMIC_RELAXED) > 1)
			block_give_back(b);
		block_put(b);
	}
	c->trim_ns = now;
	c->idle_low = c->idle.n;
}

/* Take back what other threads sent home. */
static void heap_collect(struct call_heap *c)
{
	struct call_slab *s;

	/* A load first: nothing sent costs no exchange. */
	if (!__atomic_load_n(&c->rslabs, __ATOMIC_RELAXED))
		return;
	/* ACQUIRE: pairs with the RELEASE CAS in slab_push(). */
	s = __atomic_exchange_n(&c->rslabs, NULL, __ATOMIC_ACQUIRE);
	while (s) {
		/* Read before QUEUED is cleared: a sender may then push s
		 * again, and write rnext. */
		struct call_slab *next = s->rnext;
		/* ACQ_REL.  Acquire: pairs with the senders' RELEASE CAS
		 * in slab_send(), so their uses of the items come before
		 * ours.  Release: our read of rnext comes before the next
		 * sender's write (its CAS acquires). */
		uint64_t bits =
			__atomic_exchange_n(&s->returned, 0, __ATOMIC_ACQ_REL);

		if (s == cur_of(c))
			c->hand.mask |= bits & ITEMS;
		else
			slab_idle(c, s, bits & ITEMS);
		s = next;
	}
}

/*
 * Blocks
 * ------
 * A block is an anonymous mapping of BLOCK_MIN slabs while the thread
 * has fewer slabs than that, else of as many slabs as it has (rounded
 * down to a power of two), up to BLOCK_MAX (256 KiB): what a thread
 * maps at once is at most what it already holds, and a burst of calls
 * maps its memory in a few steps.  The pages are populated with the
 * mapping (MAP_POPULATE): a call tree of thousands of slabs ran faster
 * with big populated mappings than with small blocks or pages faulted one
 * by one (docs/PERFORMANCE.md).
 *
 * A trim frees slabs one by one, and a block lives while any of its
 * slabs does; so that a thread that keeps a few slabs of a large block
 * does not keep all of it, the trim gives back (MADV_DONTNEED) every page
 * of a block whose slabs it has all freed (block_give_back()), and the
 * part of the block being carved that is not carved yet.  Only the
 * owner frees a slab while it lives, so freed and gone are the owner's
 * alone; after its exit, blocks go whole with their last slab.
 */
static struct call_block *block_new(struct call_heap *c)
{
	unsigned int want = BLOCK_MIN;
	struct call_block *b;
	size_t size;
	void *mem;

	while (want < BLOCK_MAX && 2 * want <= c->nslabs)
		want *= 2;
	size = ((size_t)want * SLAB_SIZE + page_size - 1) & ~(page_size - 1);
	b = malloc(sizeof(*b));
	if (!b)
		return NULL;
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (mem == MAP_FAILED) {
		free(b);
		return NULL;
	}
	*b = (struct call_block){
		.mem = mem,
		.live = 1, /* ours, while we carve */
		.size = size,
		.nslabs = (unsigned int)(size / SLAB_SIZE),
	};
	if (b->nslabs > BLOCK_MAX)
		b->nslabs = BLOCK_MAX; /* pages over 256 KiB: never seen */
	block_mapped(mem, size);
	__atomic_fetch_add(&stat_bytes, size, __ATOMIC_RELAXED);
	return b;
}

/* A new slab, carved from the current block or a new one; NULL if out of
 * memory. */
static struct call_slab *slab_new(struct call_heap *c)
{
	struct call_block *b = c->carve;
	struct call_slab *s;

	if (!b) {
		b = block_new(c);
		if (!b)
			return NULL;
		c->carve = b;
		c->carved = 0;
	}
	s = (struct call_slab *)(b->mem + (size_t)c->carved++ * SLAB_SIZE);
	*s = (struct call_slab){ .heap = c, .block = b };
	c->nslabs++;
	/* Relaxed: taken by the holders of a reference (the carver's, and
	 * the thread's). */
	__atomic_fetch_add(&b->live, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&stat_allocated, 1, __ATOMIC_RELAXED);
	if (c->carved == b->nslabs) {
		c->carve = NULL;
		block_put(b);
	}
	return s;
}

/* The lowest idle item of the current slab (mask not empty). */
static __ao_always_inline struct call_item *mask_take(struct call_heap *c)
{
	uint64_t m = c->hand.mask;
	struct call_item *x =
		slab_item(cur_of(c), (uint64_t)__builtin_ctzll(m));

	c->hand.mask = m & (m - 1);
	return x;
}

/* ao__call_item() with the hand empty: the next slab with idle items. */
struct call_item *ao__call_get_slow(void)
{
	struct call_heap *c = this_heap();
	struct call_slab *s;

	if (c == &heap_none) {
		if (heap_init())
			return NULL;
		c = this_heap();
	}
	/* The current slab has every item out: it comes back by rslabs. */
	c->hand.slab = NULL;
	c->tick++;
	/* The gathered items first: their slab may be the next current
	 * one, which own must never be. */
	own_flush(c);
	heap_collect(c);
	heap_trim(c);
	/* Wholly idle slabs first: 62 items in address order, and the
	 * partly idle ones fill up meanwhile. */
	if ((s = c->idle.head)) {
		list_del(&c->idle, s);
		if (c->idle.n < c->idle_low)
			c->idle_low = c->idle.n;
	} else if ((s = c->partial.head)) {
		list_del(&c->partial, s);
	} else {
		s = slab_new(c);
		if (!s)
			return NULL;
		s->free = ITEMS;
	}
	s->on = ON_NONE;
	c->hand.mask = s->free;
	s->free = 0;
	c->hand.slab = (char *)s;
	return mask_take(c);
}

/* An idle item of the calling thread's, or NULL (out of memory). */
static __ao_always_inline struct call_item *item_get(void)
{
	struct call_heap *c = this_heap();

	if (likely(c->hand.mask))
		return mask_take(c);
	return ao__call_get_slow();
}

/* item_put() past the current slab and the hold. */
static __ao_noinline void item_put_slow(struct call_item *x)
{
	struct call_heap *c = this_heap();
	struct call_slab *s = slab_of(x);
	uint64_t bit = bit_of(x);

	if (s->heap == c) {
		/* Items of one slab come back in runs (calls run in about
		 * the order they were made): gather them, and update the
		 * slab and its list once per run, not per item. */
		own_flush(c);
		c->own = s;
		c->own_bits = bit;
		return;
	}
	if (c == &heap_none && heap_init()) {
		/* No heap to hold it in (out of memory): send it now. */
		slab_send(s, bit);
		return;
	}
	c = this_heap();
	hold_flush(c);
	c->hold = s;
	c->hold_bits = bit;
	c->nhold = 1;
}

/* item_put() without its slow path: the current slab, own, or the hold;
 * false if x belongs to none of them. */
static __ao_always_inline bool item_put_fast(struct call_heap *c,
					     struct call_item *x)
{
	struct call_slab *s = slab_of(x);

	if (likely(s == cur_of(c))) {
		c->hand.mask |= bit_of(x);
		return true;
	}
	if (s == c->own) {
		c->own_bits |= bit_of(x);
		return true;
	}
	if (s == c->hold && c->nhold < AO_CALL_BATCH) {
		c->hold_bits |= bit_of(x);
		c->nhold++;
		return true;
	}
	return false;
}

/* An item that has run goes back where it belongs. */
static __ao_always_inline void item_put(struct call_item *x)
{
	if (!item_put_fast(this_heap(), x))
		item_put_slow(x);
}

/* A refused call's item: out of line, as refusals are. */
void ao__call_refused(struct call_item *x)
{
	item_put(x);
}

/* What every call's item runs: give the item back, then call fn. */
static __ao_noinline void call_run_slow(struct call_item *x, ao_call_fn fn,
					void *arg)
{
	item_put_slow(x);
	fn(arg);
}

void ao__call_run(struct ao_work *w)
{
	struct call_item *x = container_of(w, struct call_item, work);
	ao_call_fn fn = x->fn;
	void *arg = x->arg;

	/* item_put(), with fn(arg) a tail call on every path. */
	if (likely(item_put_fast(this_heap(), x))) {
		fn(arg);
		return;
	}
	call_run_slow(x, fn, arg);
}

/* Orphan a slab of ours that holds idle bits (at exit); free it if every
 * item is home. */
static void slab_abandon(struct call_slab *s, uint64_t bits)
{
	/* ACQ_REL: see slab_orphan(). */
	uint64_t v = __atomic_fetch_or(&s->returned, bits | ORPHAN,
				       __ATOMIC_ACQ_REL);

	/* QUEUED: a sender that found HEAP_DEAD frees it (slab_orphan()). */
	if (!(v & QUEUED) && ((v | bits) & ITEMS) == ITEMS)
		slab_free(s);
}

/* The pthread key's destructor: the calling thread is exiting. */
static void heap_exit(void *arg)
{
	struct call_heap *c = arg;
	struct call_slab *s, *next;
	uint64_t bits;

	hold_flush(c);
	own_flush(c);
	set_heap(&heap_none);
	/* Close rslabs: senders now orphan their slabs themselves.  Then
	 * take what was sent before.  ACQUIRE: as in heap_collect(). */
	s = __atomic_exchange_n(&c->rslabs, HEAP_DEAD, __ATOMIC_ACQUIRE);
	while (s) {
		next = s->rnext;
		bits = __atomic_exchange_n(&s->returned, 0, __ATOMIC_ACQ_REL);
		if (s == cur_of(c))
			c->hand.mask |= bits & ITEMS;
		else
			slab_idle(c, s, bits & ITEMS);
		s = next;
	}
	/* A current slab with an empty mask has every item out: it is on
	 * no list, as any other such slab, and its senders orphan it. */
	if (c->hand.slab && c->hand.mask)
		slab_abandon(cur_of(c), c->hand.mask);
	for (int k = 0; k < 2; k++) {
		for (s = k ? c->idle.head : c->partial.head; s; s = next) {
			next = s->next;
			slab_abandon(s, s->free);
		}
	}
	if (c->carve)
		block_put(c->carve);
	heap_put(c, 1);
}

/* ---- the calls ---- */

static int strand_call(struct ao_strand *s, ao_call_fn fn, void *arg, bool try)
{
	struct call_item *x;
	int r;

	if (!s || !fn)
		return -EINVAL;
	x = ao__call_item(fn, arg);
	if (!x)
		return -ENOMEM;
	r = try ? ao_strand_try_submit(s, &x->work) :
		  ao_strand_submit(s, &x->work);
	if (r)
		item_put(x);
	return r;
}

int ao_strand_call(struct ao_strand *s, ao_call_fn fn, void *arg)
{
	return strand_call(s, fn, arg, false);
}

int ao_strand_try_call(struct ao_strand *s, ao_call_fn fn, void *arg)
{
	return strand_call(s, fn, arg, true);
}

/* A group call's item: fn, and its second item, then done. */
static void call_run_group(struct ao_work *w)
{
	struct call_item *x = container_of(w, struct call_item, work);
	struct call_gdata *d = (struct call_gdata *)x->arg;
	ao_call_fn fn = x->fn;
	void *arg = d->arg;
	struct ao_group *g = d->group;

	item_put(x);
	item_put((struct call_item *)d);
	fn(arg);
	ao_group_done(g);
}

/* As ao_group_submit() does for its items (core/group.c): counted in
 * before the submit, out again if it is refused. */
static int group_call(struct ao_group *g, ao_call_fn fn, void *arg, bool try)
{
	struct call_item *x, *y;
	struct call_gdata *d;
	int r;

	if (!g || !fn || !g->exec)
		return -EINVAL;
	x = ao__call_item(fn, arg);
	if (!x)
		return -ENOMEM;
	y = item_get();
	if (!y) {
		item_put(x);
		return -ENOMEM;
	}
	d = (struct call_gdata *)y;
	d->arg = arg;
	d->group = g;
	x->work.fn = call_run_group;
	x->arg = d;
	ao_group_add(g, 1);
	r = try ? ao_exec_try_submit(g->exec, &x->work) :
		  ao_exec_submit(g->exec, &x->work);
	if (r) {
		ao_group_done(g);
		item_put(y);
		item_put(x);
	}
	return r;
}

int ao_group_call(struct ao_group *g, ao_call_fn fn, void *arg)
{
	return group_call(g, fn, arg, false);
}

int ao_group_try_call(struct ao_group *g, ao_call_fn fn, void *arg)
{
	return group_call(g, fn, arg, true);
}

/* ---- statistics ---- */

void ao_call_stats(struct ao_call_stats *st)
{
	struct call_heap *c = this_heap();
	uint64_t n;

	if (!st)
		return;
	st->slabs_allocated =
		__atomic_load_n(&stat_allocated, __ATOMIC_RELAXED);
	st->slabs_released = __atomic_load_n(&stat_released, __ATOMIC_RELAXED);
	st->threads = __atomic_load_n(&stat_heaps, __ATOMIC_RELAXED);
	st->bytes = __atomic_load_n(&stat_bytes, __ATOMIC_RELAXED) +
		    st->threads * sizeof(struct call_heap);
	n = (uint64_t)__builtin_popcountll(c->hand.mask);
	for (struct call_slab *s = c->partial.head; s; s = s->next)
		n += (uint64_t)__builtin_popcountll(s->free);
	n += (uint64_t)c->idle.n * AO_CALL_SLAB_ITEMS;
	n += (uint64_t)__builtin_popcountll(c->own_bits);
	if (c != &heap_none) {
		/* ACQUIRE: pairs with the RELEASE CAS in slab_push(); the
		 * slabs on the list stay there until we take them. */
		struct call_slab *s =
			__atomic_load_n(&c->rslabs, __ATOMIC_ACQUIRE);

		for (; s; s = s->rnext)
			n += (uint64_t)__builtin_popcountll(
				__atomic_load_n(&s->returned,
						__ATOMIC_RELAXED) &
				ITEMS);
	}
	st->cached = n;
	st->held = c->nhold;
}
