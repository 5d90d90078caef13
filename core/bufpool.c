// SPDX-License-Identifier: MIT
/*
 * The sharded buffer pool ("16 toilets instead of one").
 *
 * The seed's three-phase lock is fast only while critical sections are
 * short and threads do not pile up at one lock.  The pool keeps both true:
 * its critical sections are a pointer pop or push, and the free buffers are
 * spread over N shards (16 by default, a power of two), each with its own
 * lock, free stack and counters on cache lines of its own, so threads on
 * different CPUs take different locks.
 *
 * Layout.  One mmap'd arena, page-aligned and contiguous (huge pages on
 * request, falling back to 4K pages), holds count buffers of stride bytes
 * (buf_size, plus the headroom, rounded up to a cache line), so buffer i's
 * slot is at arena + i * stride, its data headroom bytes into it, and i is
 * its io_uring buffer id.  The headroom (none by default) is for a frame
 * header written before the payload once and sent with it by every
 * recipient (io/http.c); the pool only reserves it.  The descriptors
 * (struct ao_buf, one cache line each) live in a separate array: the arena
 * holds only data.
 * Shard s starts with a contiguous run of the arena: that is each buffer's
 * origin shard.
 *
 * Home shard.  A thread's home is sched_getcpu() & (N - 1): on glibc 2.35+
 * that is one load from the rseq area.  The CPU is only a hint (the thread
 * may migrate right after reading it); the lock makes that harmless.  When
 * sched_getcpu() fails, or with AO_BUFPOOL_THREAD_HOME (fixed worker
 * threads), the home is a per-thread slot number handed out round robin.
 * With more CPUs than shards, CPUs share shards (cpu % N).
 *
 * Get: pop from home.  Home empty: count a miss, then steal from the other
 * shards in order, skipping those that look empty without locking them;
 * a steal takes half the victim's buffers (at most STEAL_BATCH) in one
 * critical section and moves the rest to home, so a thread whose buffers
 * are freed elsewhere steals once per batch, not once per buffer.  Never
 * two locks at once, so there is no lock order.  Nothing anywhere: NULL,
 * errno = ENOBUFS, and the pool's exhausted counter.  (A get can miss a
 * batch that another thief is carrying between two shards; NULL means "no
 * buffer was free in any shard when it was looked at".)
 *
 * Put (the cross-thread free policy).  The last put pushes the buffer on
 * the freeing thread's home shard, where it is warm in this CPU's cache,
 * unless that shard already holds high_water free buffers (default: twice
 * its fair share, 2 * count / N): then it spills to the buffer's origin
 * shard.  So a shard can hold at most high_water + its origin run, and a
 * consumer thread that frees what producers get cannot hoard the pool.
 * AO_BUFPOOL_RETURN_ORIGIN instead sends every buffer straight back to its
 * origin shard: perfectly balanced, but every get then steals (the origin
 * is rarely the getter's home) and every put touches a remote shard.
 * tools/bench/poolbench shows both in its producer/consumer mix.
 *
 * Thread caches (as glibc's tcache in front of its arenas, DPDK's per-lcore
 * cache in front of its mempool ring).  A pool keeps one cache per thread
 * slot: AO_BUFPOOL_CACHES slots, numbered for the whole process (a thread
 * takes the lowest free one at its first cached get or put and gives it
 * back when it exits), each holding a free list of at most `cache`
 * buffers (params.cache, default min(32, count / 128); off below 8).  The
 * list is the owner thread's alone: a get pops and a put pushes with no
 * atomic and no lock.  A get on an empty list refills it with a batch of
 * cache / 2 from the shards (home first, then one victim, in one critical
 * section each); a put on a full list gives the cache / 2 coldest back in
 * one critical section (the put policy above, applied per batch: home
 * below high_water, else runs by origin).
 *
 * A buffer remembers the slot whose cache handed it out (its owner).  Its
 * last put on another thread sends it home: a push on the owner's remote
 * list (one CAS, as mimalloc's and TBB's cross-thread frees), and the
 * owner takes the whole list with one exchange when its own list runs dry,
 * before it refills from the shards.  So a ring thread that receives into
 * buffers the workers free gets them back a list at a time, without a
 * shard lock (with more threads than CPUs, the shard locks' lines and the
 * holders preempted inside them are what the producer/consumer path
 * lost time on).
 *
 * The bound: the pool's memory is its arena, as before; caches only hold
 * some of its buffers.  The local lists hold at most AO_BUFPOOL_CACHES *
 * cache buffers, and create refuses a cache size for which that is more
 * than count / 2, so at least half the pool is always in the shards or
 * the remote lists.  The remote lists have no bound of their own (a list
 * holds at most what its owner got), but any thread takes from them: a
 * get that finds every shard empty moves them into the shards before it
 * gives up.  A thread that exits gives its list and its remote list back
 * to the shards (a pthread key's destructor, as core/call.c's heaps);
 * its remote list is then closed (REMOTE_DEAD: a put of one of its
 * buffers goes to the putter's cache) until a new thread takes the slot.
 * The registry of live pools (reg_lock) is what the exiting thread walks;
 * destroy takes a pool out of it, so nothing touches a destroyed pool.
 * Buffers count as free wherever they are: ao_bufpool_in_use() sums the
 * gets and puts counted where they happen (shard, cache).
 *
 * Waiting: ao_buf_get_wait() parks on an event count; a put wakes a waiter
 * only when the pool's waiter count is non-zero (one relaxed load
 * otherwise).  Why no wake is lost: the waiter raises the count and
 * prepares before it scans every shard under its lock; the putter pushes
 * under the lock before it reads the count.  The two critical sections on
 * that shard are ordered: either the scan sees the buffer, or the waiter's
 * unlock happens before the putter's lock, and so before its read of the
 * count, which therefore sees the waiter.  A thief pushing the rest of a
 * batch home (buffers no scan could see while it carried them) wakes the
 * same way.  With thread caches: while a thread waits, puts skip the
 * local lists and go to the shards; a push on a remote list reads the
 * waiter count after its CAS (both SEQ_CST, against the waiter's raise
 * and its scan, which empties the remote lists into the shards), and
 * wakes.  Buffers already in another thread's local list stay there: a
 * waiter does not see them (at most `cache` per thread, as above).
 *
 * Debug builds (DEBUG=1): a put checks that the pointer is a descriptor of
 * a live pool (foreign pointer) and that it still has a reference (double
 * put); ao_buf_ref() checks the latter too (use after the last put).  A
 * freed buffer is filled with POISON_FREE and the pattern is checked when
 * it is handed out again, so a write after the last put aborts at the next
 * get of that buffer.  Under AddressSanitizer (any build) free buffers are
 * poisoned for ASan, which catches the access itself.
 *
 * Cost: without a thread cache, a get/put pair on one thread is two
 * uncontended lock/unlock pairs, two sched_getcpu() calls, a pop, a push
 * and an atomic decrement; with one (the default for pools of 1024
 * buffers and more), a pop and a push on the thread's own list and no
 * atomic at all.  The figures are in docs/PERFORMANCE.md.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/core/bufpool.h>
#include <aorta/sync/eventcount.h>
#include <aorta/sync/spinlock.h>
#include "asan_priv.h"

#if AO_ASAN
#include <sanitizer/asan_interface.h>
#define poison(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define poison(p, n) ((void)(p), (void)(n))
#define unpoison(p, n) ((void)(p), (void)(n))
#endif

#define STEAL_BATCH 8u /* most buffers one steal moves */
#define POISON_FREE 0x6b /* the kernel's slab poison */
#define MAGIC_LIVE 0x4c495645u /* "LIVE" */
#define MAGIC_FREE 0x46524545u /* "FREE" */
#define MAX_BUF_SIZE (1ul << 30)
#define HUGE_PAGE (2ul << 20)
#define FLAGS_ALL                                                              \
	(AO_BUFPOOL_HUGE | AO_BUFPOOL_RETURN_ORIGIN | AO_BUFPOOL_THREAD_HOME | \
	 AO_BUFPOOL_NO_CACHE)
#define CACHE_MIN_DEFAULT 8u /* a default cache smaller than this: none */

struct shard {
	struct ao_spinlock lock;
	struct ao_buf *top; /* free stack; under lock */
	uint32_t nfree; /* under lock; read racily to skip empty shards */
	/* Written only by the lock holder, read racily by the stats. */
	uint64_t gets, puts, steals, stolen, misses;
	uint64_t cgets, cputs; /* of gets and puts: batches of the caches */
	uint64_t spills; /* atomic add, no lock */
} __ao_cacheline_aligned;

/* REMOTE_DEAD: the slot's thread has exited; no push. */
#define REMOTE_DEAD ((struct ao_buf *)1)

/* One thread slot's cache in one pool. */
struct tcache {
	/* The owner thread's alone. */
	struct ao_buf *top; /* local free list */
	uint32_t n; /* buffers on it */
	/* Written by the owner, read racily by the stats. */
	uint64_t gets, misses, puts, rfrees, refills, flushes;
	/* Other threads push here (CAS), the owner takes it all (XCHG). */
	struct ao_buf *remote __ao_cacheline_aligned;
} __ao_cacheline_aligned;

struct ao_bufpool {
	/* Read-mostly. */
	struct shard *shards;
	struct ao_buf *bufs;
	struct tcache *caches; /* ncaches of them, or NULL */
	char *arena;
	size_t arena_len, stride, buf_size;
	uint32_t count, nshards, mask, hwm;
	uint32_t ncaches, ccap, cbatch; /* 0, 0, 0 without caches */
	unsigned int flags;
	bool huge;
	struct ao_bufpool *reg_next; /* the registry; under reg_lock */
	/* Pool-wide, touched only on the slow paths. */
	uint32_t nwaiters __ao_cacheline_aligned; /* in ao_buf_get_wait() */
	struct ao_eventcount ec;
	uint64_t exhausted, waits, timeouts;
};

/* Only the holder of the lock that guards field writes it: a relaxed load
 * and store (no locked RMW), atomic so that racy readers are well defined. */
#define held_inc(field, n)                                                  \
	__atomic_store_n(&(field),                                          \
			 __atomic_load_n(&(field), __ATOMIC_RELAXED) + (n), \
			 __ATOMIC_RELAXED)
#define held_set(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)

/* ---- home shard ---- */

static uint32_t next_slot;
static __thread uint32_t my_slot; /* slot + 1; 0: not assigned yet */

static __ao_noinline uint32_t assign_slot(void)
{
	my_slot = __atomic_fetch_add(&next_slot, 1, __ATOMIC_RELAXED) + 1;
	if (unlikely(!my_slot))
		my_slot = 1;
	return my_slot;
}

static inline uint32_t home_shard(const struct ao_bufpool *pool)
{
	uint32_t slot;

	if (!pool->mask)
		return 0;
	if (likely(!(pool->flags & AO_BUFPOOL_THREAD_HOME))) {
		int cpu = sched_getcpu();

		if (likely(cpu >= 0))
			return (uint32_t)cpu & pool->mask;
	}
	slot = my_slot;
	if (unlikely(!slot))
		slot = assign_slot();
	return (slot - 1) & pool->mask;
}

/* ---- the registry of live pools and the thread slots ---- */

/* Live pools, for the debug checks and for a thread's exit; the slots in
 * use.  reg_lock is taken before a shard lock, never after. */
static struct ao_spinlock reg_lock = AO_SPINLOCK_INIT;
static struct ao_bufpool *reg_head;
static uint64_t slots_used; /* bit s: slot s has a thread */

#define NO_SLOT UINT32_MAX /* every slot was taken: no caches */

/* The calling thread's slot + 1; 0: none yet; NO_SLOT: none to be had. */
static __thread uint32_t tc_slot __attribute__((tls_model("initial-exec")));

static pthread_key_t tc_key;
static pthread_once_t tc_key_once = PTHREAD_ONCE_INIT;
static int tc_key_err;

static void tc_exit(void *arg);

static void tc_key_create(void)
{
	tc_key_err = pthread_key_create(&tc_key, tc_exit);
}

static void reg_add(struct ao_bufpool *pool)
{
	ao_spin_lock(&reg_lock);
	/* A slot without a thread has its remote list closed. */
	for (uint32_t i = 0; i < pool->ncaches; i++)
		pool->caches[i].remote = slots_used & (1ull << i) ? NULL :
								    REMOTE_DEAD;
	pool->reg_next = reg_head;
	reg_head = pool;
	ao_spin_unlock(&reg_lock);
}

static void reg_del(struct ao_bufpool *pool)
{
	ao_spin_lock(&reg_lock);
	for (struct ao_bufpool **pp = &reg_head; *pp; pp = &(*pp)->reg_next) {
		if (*pp == pool) {
			*pp = pool->reg_next;
			break;
		}
	}
	ao_spin_unlock(&reg_lock);
}

#if AO_CONFIG_DEBUG
static bool is_live_buf(const struct ao_buf *b)
{
	uintptr_t p = (uintptr_t)b;
	bool ok = false;

	ao_spin_lock(&reg_lock);
	for (const struct ao_bufpool *pool = reg_head; pool && !ok;
	     pool = pool->reg_next) {
		uintptr_t lo = (uintptr_t)pool->bufs;

		if (p >= lo && p < lo + pool->count * sizeof(*b) &&
		    (p - lo) % sizeof(*b) == 0)
			ok = true;
	}
	ao_spin_unlock(&reg_lock);
	return ok;
}
#endif

static __ao_noreturn __ao_cold __ao_unused void
misuse(const char *fn, const struct ao_buf *b, const char *what)
{
	fprintf(stderr, "aorta: %s(%p): %s\n", fn, (const void *)b, what);
	abort();
}

static __ao_noreturn __ao_cold void
misuse_buf(const char *fn, const struct ao_buf *b, const char *what)
{
	fprintf(stderr, "aorta: %s(%p): buffer %u of pool %p: %s\n", fn,
		(const void *)b, b->index, (void *)b->pool, what);
	abort();
}

/* ---- handing out and taking back ---- */

static inline struct ao_buf *hand_out(struct ao_buf *b)
{
	unpoison((char *)b->data - b->headroom, b->headroom + b->cap);
	/* No header in the headroom yet (see io/ws.c).  Relaxed: the
	 * buffer is nobody else's until this get returns. */
	__atomic_store_n(&b->frame, 0, __ATOMIC_RELAXED);
	if (AO_CONFIG_DEBUG) {
		const unsigned char *d = b->data;

		if (READ_ONCE(b->magic) != MAGIC_FREE)
			misuse_buf("ao_buf_get", b,
				   "free stack holds a live buffer");
		for (uint32_t i = 0; i < b->cap; i++)
			if (d[i] != POISON_FREE)
				misuse_buf("ao_buf_get", b,
					   "written after its last put "
					   "(use after free)");
		WRITE_ONCE(b->magic, MAGIC_LIVE);
	}
	b->len = 0;
	/* Relaxed: the buffer came off a free stack under the shard lock,
	 * whose acquire orders it after the last holder's final put, or off
	 * a thread cache (the owner's own put, or a remote list taken with
	 * an acquire exchange). */
	__atomic_store_n(&b->refs, 1, __ATOMIC_RELAXED);
	return b;
}

static inline void push_locked(struct shard *s, struct ao_buf *b)
{
	b->next = s->top;
	s->top = b;
	held_set(s->nfree, s->nfree + 1);
	held_inc(s->puts, 1);
}

/* After a push: wake a waiter in ao_buf_get_wait(), if there is one.
 * Relaxed: the push's unlock and a waiter's scan of the same shard are
 * ordered by the lock (see the top of the file).  Not ao_ec_notify_one():
 * its SEQ_CST fence would cost every put a full barrier, and GCC's
 * -fsanitize=thread rejects the fence. */
static inline void wake_waiter(struct ao_bufpool *pool)
{
	if (unlikely(__atomic_load_n(&pool->nwaiters, __ATOMIC_RELAXED)))
		ao__ec_wake(&pool->ec, 1);
}

/* Steal from the shards other than home (and home itself when thorough,
 * which also locks shards that look empty).  Returns one buffer, and moves
 * the rest of the batch to home. */
static struct ao_buf *steal(struct ao_bufpool *pool, uint32_t home,
			    bool thorough)
{
	struct shard *hs = &pool->shards[home];

	for (uint32_t i = 1; i <= pool->nshards; i++) {
		uint32_t v = (home + i) & pool->mask;
		struct shard *s = &pool->shards[v];
		struct ao_buf *first, *last;
		uint32_t n, take;

		if (!thorough && (v == home || !READ_ONCE(s->nfree)))
			continue;
		ao_spin_lock(&s->lock);
		n = s->nfree;
		if (!n) {
			ao_spin_unlock(&s->lock);
			continue;
		}
		first = s->top;
		if (v == home) {
			s->top = first->next;
			held_set(s->nfree, n - 1);
			held_inc(s->gets, 1);
			ao_spin_unlock(&s->lock);
			return first;
		}
		take = (n + 1) / 2;
		if (take > STEAL_BATCH)
			take = STEAL_BATCH;
		last = first;
		for (uint32_t k = 1; k < take; k++)
			last = last->next;
		s->top = last->next;
		held_set(s->nfree, n - take);
		held_inc(s->stolen, take);
		ao_spin_unlock(&s->lock);

		/* Keep first; the rest go home.  Counted there. */
		ao_spin_lock(&hs->lock);
		if (take > 1) {
			last->next = hs->top;
			hs->top = first->next;
			held_set(hs->nfree, hs->nfree + take - 1);
		}
		held_inc(hs->gets, 1);
		ao_spin_unlock(&hs->lock);
		/* Not under hs's lock: a cache's refill counts here too. */
		__atomic_fetch_add(&hs->steals, 1, __ATOMIC_RELAXED);
		/* The batch was out of every stack while we carried it: a
		 * waiter may have scanned past it.  Wake as a put does. */
		if (take > 1)
			wake_waiter(pool);
		return first;
	}
	return NULL;
}

static struct ao_buf *get_slow(struct ao_bufpool *pool, uint32_t home)
{
	struct ao_buf *b = NULL;

	if (pool->nshards > 1)
		b = steal(pool, home, false);
	if (!b)
		b = steal(pool, home, true);
	return b;
}

/* A free buffer from the shards, not yet handed out; NULL when none was
 * found. */
static inline struct ao_buf *get_raw(struct ao_bufpool *pool)
{
	uint32_t home = home_shard(pool);
	struct shard *s = &pool->shards[home];
	struct ao_buf *b;

	ao_spin_lock(&s->lock);
	b = s->top;
	if (likely(b)) {
		s->top = b->next;
		held_set(s->nfree, s->nfree - 1);
		held_inc(s->gets, 1);
		ao_spin_unlock(&s->lock);
		return b;
	}
	held_inc(s->misses, 1);
	ao_spin_unlock(&s->lock);
	return get_slow(pool, home);
}

/* Push b on the shard it belongs to by the put policy (a last put without
 * a thread cache). */
static void release_shard(struct ao_bufpool *pool, struct ao_buf *b)
{
	uint32_t h = b->origin;
	struct shard *s;

	if (!(pool->flags & AO_BUFPOOL_RETURN_ORIGIN)) {
		uint32_t home = home_shard(pool);

		/* A racy look at home's level: overshooting the mark by a
		 * few concurrent puts is harmless, and a spill then costs
		 * one lock, not two.  The spill is counted at home, without
		 * its lock: an atomic add on the slow path. */
		if (likely(READ_ONCE(pool->shards[home].nfree) < pool->hwm))
			h = home;
		else if (home != h)
			__atomic_fetch_add(&pool->shards[home].spills, 1,
					   __ATOMIC_RELAXED);
	}
	s = &pool->shards[h];
	ao_spin_lock(&s->lock);
	push_locked(s, b);
	ao_spin_unlock(&s->lock);
	wake_waiter(pool);
}

/* ---- thread caches ---- */

/* Give a NULL-terminated chain of n free buffers from a cache back to the
 * shards: all to home while that stays within high_water, else each run
 * of one origin to its origin (the put policy, per batch). */
static void give_back(struct ao_bufpool *pool, struct ao_buf *b, uint32_t n)
{
	uint32_t home = 0;

	if (!b)
		return;
	if (!(pool->flags & AO_BUFPOOL_RETURN_ORIGIN)) {
		struct shard *hs;
		struct ao_buf *last = b;

		home = home_shard(pool);
		hs = &pool->shards[home];
		if (READ_ONCE(hs->nfree) + n <= pool->hwm) {
			while (last->next)
				last = last->next;
			ao_spin_lock(&hs->lock);
			last->next = hs->top;
			hs->top = b;
			held_set(hs->nfree, hs->nfree + n);
			held_inc(hs->puts, n);
			held_inc(hs->cputs, n);
			ao_spin_unlock(&hs->lock);
			wake_waiter(pool);
			return;
		}
	}
	while (b) {
		uint32_t o = b->origin, k = 1;
		struct shard *s = &pool->shards[o];
		struct ao_buf *last = b, *rest;

		while (last->next && last->next->origin == o) {
			last = last->next;
			k++;
		}
		rest = last->next;
		ao_spin_lock(&s->lock);
		last->next = s->top;
		s->top = b;
		held_set(s->nfree, s->nfree + k);
		held_inc(s->puts, k);
		held_inc(s->cputs, k);
		ao_spin_unlock(&s->lock);
		if (!(pool->flags & AO_BUFPOOL_RETURN_ORIGIN) && o != home)
			__atomic_fetch_add(&pool->shards[home].spills, k,
					   __ATOMIC_RELAXED);
		b = rest;
	}
	wake_waiter(pool);
}

/* Put a chain of free buffers (a remote list) on c's empty local list,
 * at most ccap of them (the rest go to the shards); returns the first,
 * for the get that asked. */
static struct ao_buf *cache_take(struct ao_bufpool *pool, struct tcache *c,
				 struct ao_buf *b)
{
	struct ao_buf *last = b, *rest;
	uint32_t k = 1, m = 0;

	while (last->next && k < pool->ccap) {
		last = last->next;
		k++;
	}
	rest = last->next;
	if (rest) {
		last->next = NULL;
		for (struct ao_buf *x = rest; x; x = x->next)
			m++;
		give_back(pool, rest, m);
	}
	c->top = b->next;
	c->n = k - 1;
	return b;
}

/* Refill c's empty local list with a batch from the shards: home first,
 * then the others (half of a victim's buffers at most), each in one
 * critical section; thorough also locks shards that look empty.  Returns
 * one of the batch, or NULL. */
static struct ao_buf *cache_refill(struct ao_bufpool *pool, struct tcache *c,
				   bool thorough)
{
	uint32_t home = home_shard(pool);

	for (uint32_t i = 0; i < pool->nshards; i++) {
		uint32_t v = (home + i) & pool->mask;
		struct shard *s = &pool->shards[v];
		struct ao_buf *first, *last;
		uint32_t n, take;

		if (!thorough && i && !READ_ONCE(s->nfree))
			continue;
		ao_spin_lock(&s->lock);
		n = s->nfree;
		if (!n) {
			if (!i && !thorough)
				held_inc(s->misses, 1);
			ao_spin_unlock(&s->lock);
			continue;
		}
		take = n < pool->cbatch ? n : pool->cbatch;
		if (i && take > (n + 1) / 2)
			take = (n + 1) / 2;
		first = last = s->top;
		for (uint32_t k = 1; k < take; k++)
			last = last->next;
		s->top = last->next;
		last->next = NULL;
		held_set(s->nfree, n - take);
		held_inc(s->gets, take);
		held_inc(s->cgets, take);
		if (i)
			held_inc(s->stolen, take);
		ao_spin_unlock(&s->lock);
		if (i)
			__atomic_fetch_add(&pool->shards[home].steals, 1,
					   __ATOMIC_RELAXED);
		held_inc(c->refills, 1);
		c->top = first->next;
		c->n = take - 1;
		return first;
	}
	return NULL;
}

/* Move every open remote list into the shards: what threads sent home to
 * an owner that has not come for it, when the shards ran dry.  True if
 * there was any.  SEQ_CST: in a waiter's scan, this read follows its raise
 * of nwaiters; pairs with the pushers' CAS then read (remote_push()). */
static bool reclaim_remote(struct ao_bufpool *pool)
{
	bool any = false;

	for (uint32_t i = 0; i < pool->ncaches; i++) {
		struct ao_buf **r = &pool->caches[i].remote;
		struct ao_buf *h = __atomic_load_n(r, __ATOMIC_SEQ_CST);
		uint32_t n = 0;

		while (h && h != REMOTE_DEAD &&
		       !__atomic_compare_exchange_n(r, &h, NULL, false,
						    __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST))
			;
		if (!h || h == REMOTE_DEAD)
			continue;
		for (struct ao_buf *x = h; x; x = x->next)
			n++;
		give_back(pool, h, n);
		any = true;
	}
	return any;
}

/* c's local list is empty: what others sent home, else a batch from the
 * shards, else (every shard empty) the remote lists moved to the shards
 * and a last, thorough pass.  Not yet handed out; NULL: none found. */
static __ao_noinline struct ao_buf *cache_fill(struct ao_bufpool *pool,
					       struct tcache *c)
{
	struct ao_buf *b;

	if (__atomic_load_n(&c->remote, __ATOMIC_RELAXED)) {
		/* ACQUIRE: pairs with the pushers' CAS (remote_push()):
		 * their writes to the buffers happen before our use. */
		b = __atomic_exchange_n(&c->remote, NULL, __ATOMIC_ACQUIRE);
		if (b)
			return cache_take(pool, c, b);
	}
	b = cache_refill(pool, c, false);
	if (!b && reclaim_remote(pool))
		b = cache_refill(pool, c, false);
	if (!b)
		b = cache_refill(pool, c, true);
	return b;
}

/* c's local list is over its capacity: keep the newest (warm in this
 * CPU's cache), give the cbatch oldest back to the shards at once. */
static __ao_noinline void cache_flush(struct ao_bufpool *pool, struct tcache *c)
{
	uint32_t keep = c->n - pool->cbatch;
	struct ao_buf *last = c->top, *rest;

	for (uint32_t k = 1; k < keep; k++)
		last = last->next;
	rest = last->next;
	last->next = NULL;
	c->n = keep;
	held_inc(c->flushes, 1);
	give_back(pool, rest, pool->cbatch);
}

/* Send b to the cache of slot o - 1, which handed it out; false if that
 * slot's thread has exited. */
static bool remote_push(struct ao_bufpool *pool, struct ao_buf *b, uint32_t o)
{
	struct ao_buf **r = &pool->caches[o - 1].remote;
	struct ao_buf *h = __atomic_load_n(r, __ATOMIC_RELAXED);

	do {
		if (h == REMOTE_DEAD)
			return false;
		b->next = h;
		/* SEQ_CST (a release at least): pairs with the owner's
		 * acquire exchange, and, followed by the SEQ_CST read of
		 * nwaiters, with a waiter's raise then scan. */
	} while (!__atomic_compare_exchange_n(r, &h, b, true, __ATOMIC_SEQ_CST,
					      __ATOMIC_RELAXED));
	if (unlikely(__atomic_load_n(&pool->nwaiters, __ATOMIC_SEQ_CST)))
		ao__ec_wake(&pool->ec, 1);
	return true;
}

/* Give slot s's cache in pool back to the shards and close its remote
 * list (its thread is exiting; under reg_lock). */
static void cache_drop(struct ao_bufpool *pool, struct tcache *c)
{
	/* ACQUIRE: as in cache_fill(). */
	struct ao_buf *r =
		__atomic_exchange_n(&c->remote, REMOTE_DEAD, __ATOMIC_ACQUIRE);
	uint32_t n = 0;

	if (r != REMOTE_DEAD) {
		for (struct ao_buf *x = r; x; x = x->next)
			n++;
		give_back(pool, r, n);
	}
	give_back(pool, c->top, c->n);
	c->top = NULL;
	c->n = 0;
}

/* The pthread key's destructor: the calling thread is exiting. */
static void tc_exit(void *arg)
{
	uint32_t s = (uint32_t)(uintptr_t)arg - 1;

	ao_spin_lock(&reg_lock);
	for (struct ao_bufpool *p = reg_head; p; p = p->reg_next)
		if (s < p->ncaches)
			cache_drop(p, &p->caches[s]);
	slots_used &= ~(1ull << s);
	ao_spin_unlock(&reg_lock);
	/* A put from a later destructor takes a slot again; glibc then
	 * runs this one once more. */
	tc_slot = 0;
}

/* Give the calling thread a slot; its cache in pool, or NULL. */
static __ao_noinline struct tcache *claim_slot(struct ao_bufpool *pool)
{
	uint32_t s;

	pthread_once(&tc_key_once, tc_key_create);
	if (tc_key_err) {
		tc_slot = NO_SLOT;
		return NULL;
	}
	ao_spin_lock(&reg_lock);
	if (!~slots_used) {
		ao_spin_unlock(&reg_lock);
		tc_slot = NO_SLOT;
		return NULL;
	}
	s = (uint32_t)__builtin_ctzll(~slots_used);
	slots_used |= 1ull << s;
	/* Open the slot's remote lists.  Relaxed: under reg_lock, and no
	 * one pushes on REMOTE_DEAD or takes it. */
	for (struct ao_bufpool *p = reg_head; p; p = p->reg_next)
		if (s < p->ncaches)
			__atomic_store_n(&p->caches[s].remote, NULL,
					 __ATOMIC_RELAXED);
	ao_spin_unlock(&reg_lock);
	if (pthread_setspecific(tc_key, (void *)(uintptr_t)(s + 1))) {
		tc_exit((void *)(uintptr_t)(s + 1));
		tc_slot = NO_SLOT;
		return NULL;
	}
	tc_slot = s + 1;
	return s < pool->ncaches ? &pool->caches[s] : NULL;
}

/* The calling thread's cache in pool, or NULL (no caches, no slot). */
static __ao_always_inline struct tcache *my_cache(struct ao_bufpool *pool)
{
	uint32_t s = tc_slot - 1;

	if (likely(s < pool->ncaches))
		return &pool->caches[s];
	if (!tc_slot && pool->ncaches)
		return claim_slot(pool);
	return NULL;
}

/* ---- get and put ---- */

/* A free buffer, from the calling thread's cache or the shards, owned
 * and counted but not yet handed out; NULL when none was found. */
static __ao_always_inline struct ao_buf *get_any(struct ao_bufpool *pool)
{
	struct tcache *c = my_cache(pool);
	struct ao_buf *b;

	if (likely(c)) {
		b = c->top;
		if (likely(b)) {
			c->top = b->next;
			c->n--;
		} else {
			b = cache_fill(pool, c);
			if (!b)
				return NULL;
			held_inc(c->misses, 1);
		}
		held_inc(c->gets, 1);
		b->owner = tc_slot;
		return b;
	}
	b = get_raw(pool);
	if (b)
		b->owner = 0;
	return b;
}

struct ao_buf *ao_buf_get(struct ao_bufpool *pool)
{
	struct ao_buf *b = get_any(pool);

	if (likely(b))
		return hand_out(b);
	__atomic_fetch_add(&pool->exhausted, 1, __ATOMIC_RELAXED);
	errno = ENOBUFS;
	return NULL;
}

struct ao_buf *ao_buf_get_wait(struct ao_bufpool *pool, int64_t timeout_ns)
{
	struct ao_buf *b;
	uint64_t deadline;
	bool slept = false;

	if (timeout_ns < 0) {
		errno = EINVAL;
		return NULL;
	}
	b = get_any(pool);
	if (b)
		return hand_out(b);
	deadline = ao_now_ns() + (uint64_t)timeout_ns;
	for (;;) {
		uint64_t now;
		uint32_t key;

		/* SEQ_CST RMW, then the prepare (another SEQ_CST RMW), both
		 * before the locked scan: the scan's unlock of a shard pairs
		 * with the next lock of that shard by a putter, which then
		 * sees nwaiters != 0 (see the top of this file).  The remote
		 * lists go to the shards first (reclaim_remote()). */
		__atomic_fetch_add(&pool->nwaiters, 1, __ATOMIC_SEQ_CST);
		key = ao_ec_prepare(&pool->ec);
		reclaim_remote(pool);
		b = steal(pool, home_shard(pool), true);
		if (b)
			b->owner = 0;
		now = ao_now_ns();
		if (b || now >= deadline) {
			ao_ec_cancel(&pool->ec);
			__atomic_fetch_sub(&pool->nwaiters, 1,
					   __ATOMIC_RELAXED);
			break;
		}
		slept = true;
		ao_ec_wait(&pool->ec, key, (int64_t)(deadline - now));
		__atomic_fetch_sub(&pool->nwaiters, 1, __ATOMIC_RELAXED);
		b = get_any(pool);
		if (b)
			break;
	}
	if (slept)
		__atomic_fetch_add(&pool->waits, 1, __ATOMIC_RELAXED);
	if (!b) {
		__atomic_fetch_add(&pool->timeouts, 1, __ATOMIC_RELAXED);
		errno = ETIMEDOUT;
		return NULL;
	}
	return hand_out(b);
}

struct ao_buf *ao_buf_ref(struct ao_buf *b)
{
	/* Relaxed: the caller already holds a reference, so the buffer
	 * cannot be freed under us; nothing else is ordered (as kref_get). */
	uint32_t old = __atomic_fetch_add(&b->refs, 1, __ATOMIC_RELAXED);

	if (AO_CONFIG_DEBUG && unlikely(!old))
		misuse_buf("ao_buf_ref", b,
			   "no reference left (use after the last put)");
	return b;
}

/* A last put onto c, the calling thread's cache (slot + 1 == slot1). */
static __ao_always_inline void put_cached(struct ao_bufpool *pool,
					  struct tcache *c, struct ao_buf *b,
					  uint32_t slot1)
{
	uint32_t o = b->owner;

	held_inc(c->puts, 1);
	if (unlikely(o != slot1) && o && remote_push(pool, b, o)) {
		held_inc(c->rfrees, 1);
		return;
	}
	b->next = c->top;
	c->top = b;
	if (unlikely(++c->n > pool->ccap))
		cache_flush(pool, c);
}

/* The thread has no slot yet, or no cache here, or a thread waits. */
static __ao_noinline void release_slow(struct ao_bufpool *pool,
				       struct ao_buf *b)
{
	struct tcache *c = my_cache(pool);

	/* While a thread waits, puts go to the shards, which it scans. */
	if (c && !__atomic_load_n(&pool->nwaiters, __ATOMIC_RELAXED))
		put_cached(pool, c, b, tc_slot);
	else
		release_shard(pool, b);
}

static __ao_always_inline void release(struct ao_bufpool *pool,
				       struct ao_buf *b)
{
	uint32_t slot1 = tc_slot, s = slot1 - 1;

	if (AO_CONFIG_DEBUG) {
		WRITE_ONCE(b->magic, MAGIC_FREE);
		memset(b->data, POISON_FREE, b->cap);
	}
	poison((char *)b->data - b->headroom, pool->stride);
	if (likely(s < pool->ncaches) &&
	    likely(!__atomic_load_n(&pool->nwaiters, __ATOMIC_RELAXED)))
		put_cached(pool, &pool->caches[s], b, slot1);
	else
		release_slow(pool, b);
}

void ao_buf_put(struct ao_buf *b)
{
	uint32_t old;

	if (unlikely(!b))
		return; /* like free(NULL) */
#if AO_CONFIG_DEBUG
	if (!is_live_buf(b))
		misuse("ao_buf_put", b,
		       "not a buffer of any live pool (foreign pointer)");
#endif
	/* The sole holder: no one else can take or drop a reference, so no
	 * RMW is needed (as the kernel's skb_unref()).  ACQUIRE: pairs with
	 * the release in the other holders' puts that brought refs to 1. */
	if (likely(__atomic_load_n(&b->refs, __ATOMIC_ACQUIRE) == 1)) {
		__atomic_store_n(&b->refs, 0, __ATOMIC_RELAXED);
		release(b->pool, b);
		return;
	}
	/* ACQ_REL: the release orders this holder's use of the buffer before
	 * the drop; the acquire, in the last put, orders every other
	 * holder's use before the buffer is recycled.  Pairs with the other
	 * holders' puts.  (No separate fence: TSan does not model them.) */
	old = __atomic_fetch_sub(&b->refs, 1, __ATOMIC_ACQ_REL);
	if (likely(old == 1)) {
		release(b->pool, b);
		return;
	}
	if (AO_CONFIG_DEBUG && unlikely(!old))
		misuse_buf("ao_buf_put", b,
			   "already free (double put, or put after the last "
			   "put)");
}

/* ---- creation and destruction ---- */

static void *map_arena(size_t *len, bool want_huge, bool *huge)
{
	void *p;

	*huge = false;
	if (want_huge) {
		size_t hlen = (*len + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);

		p = mmap(NULL, hlen, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p != MAP_FAILED) {
			*len = hlen;
			*huge = true;
			return p;
		}
	}
	p = mmap(NULL, *len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (want_huge)
		madvise(p, *len, MADV_HUGEPAGE); /* best effort */
	return p;
}

static bool is_pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

int ao_bufpool_create(struct ao_bufpool **poolp,
		      const struct ao_bufpool_params *prm)
{
	struct ao_bufpool *pool;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t stride, len, head;
	uint32_t nshards, per, ccap = 0;
	void *mem;

	if (!poolp)
		return -EINVAL;
	*poolp = NULL;
	if (!prm || !prm->buf_size || prm->buf_size > MAX_BUF_SIZE ||
	    !prm->count || prm->count > AO_BUFPOOL_MAX_COUNT ||
	    (prm->flags & ~FLAGS_ALL))
		return -EINVAL;
	nshards = prm->shards ? prm->shards : AO_BUFPOOL_DEFAULT_SHARDS;
	if (!is_pow2(nshards) || nshards > AO_BUFPOOL_MAX_SHARDS)
		return -EINVAL;
	if (prm->headroom > AO_BUFPOOL_MAX_HEADROOM)
		return -EINVAL;
	/* Headroom in 16s keeps data 16-byte aligned. */
	head = (prm->headroom + 15u) & ~(size_t)15u;
	stride = (head + prm->buf_size + AO_CACHELINE_SIZE - 1) &
		 ~(size_t)(AO_CACHELINE_SIZE - 1);
	if (__builtin_mul_overflow(stride, (size_t)prm->count, &len) ||
	    len > SIZE_MAX - page)
		return -EINVAL;
	len = (len + page - 1) & ~(page - 1);
	/* The caches' local lists together: at most half the pool. */
	if (prm->cache &&
	    (prm->cache < 2 || prm->cache > AO_BUFPOOL_CACHE_MAX ||
	     (uint64_t)prm->cache * AO_BUFPOOL_CACHES > prm->count / 2))
		return -EINVAL;
	if (!(prm->flags & AO_BUFPOOL_NO_CACHE)) {
		ccap = prm->cache;
		if (!ccap) {
			ccap = prm->count / (2 * AO_BUFPOOL_CACHES);
			if (ccap > AO_BUFPOOL_CACHE_DEFAULT)
				ccap = AO_BUFPOOL_CACHE_DEFAULT;
			if (ccap < CACHE_MIN_DEFAULT)
				ccap = 0;
		}
	}

	if (posix_memalign(&mem, AO_CACHELINE_SIZE,
			   sizeof(*pool) + nshards * sizeof(struct shard)))
		return -ENOMEM;
	pool = mem;
	memset(pool, 0, sizeof(*pool));
	pool->shards = (struct shard *)(pool + 1);
	if (ccap) {
		if (posix_memalign(&mem, AO_CACHELINE_SIZE,
				   AO_BUFPOOL_CACHES * sizeof(struct tcache))) {
			free(pool);
			return -ENOMEM;
		}
		memset(mem, 0, AO_BUFPOOL_CACHES * sizeof(struct tcache));
		pool->caches = mem;
		pool->ncaches = AO_BUFPOOL_CACHES;
		pool->ccap = ccap;
		pool->cbatch = ccap / 2;
	}
	if (posix_memalign(&mem, AO_CACHELINE_SIZE,
			   prm->count * sizeof(struct ao_buf))) {
		free(pool->caches);
		free(pool);
		return -ENOMEM;
	}
	pool->bufs = mem;
	pool->arena =
		map_arena(&len, prm->flags & AO_BUFPOOL_HUGE, &pool->huge);
	if (!pool->arena) {
		free(pool->bufs);
		free(pool->caches);
		free(pool);
		return -ENOMEM;
	}
	pool->arena_len = len;
	pool->stride = stride;
	pool->buf_size = prm->buf_size;
	pool->count = prm->count;
	pool->nshards = nshards;
	pool->mask = nshards - 1;
	pool->flags = prm->flags;
	per = (prm->count + nshards - 1) / nshards;
	pool->hwm = prm->high_water ? prm->high_water : 2 * per;
	ao_ec_init(&pool->ec);

	for (uint32_t s = 0; s < nshards; s++) {
		memset(&pool->shards[s], 0, sizeof(struct shard));
		ao_spin_init(&pool->shards[s].lock);
	}
	/* Shard s gets the contiguous run [s*count/N, (s+1)*count/N); push
	 * from the top so that the lowest index is handed out first. */
	for (uint32_t i = prm->count; i-- > 0;) {
		struct ao_buf *b = &pool->bufs[i];
		uint32_t s = (uint32_t)((uint64_t)i * nshards / prm->count);

		memset(b, 0, sizeof(*b));
		b->data = pool->arena + (size_t)i * stride + head;
		b->headroom = (uint32_t)head;
		b->cap = (uint32_t)prm->buf_size;
		b->index = i;
		b->pool = pool;
		b->origin = s;
		b->magic = MAGIC_FREE;
		b->next = pool->shards[s].top;
		pool->shards[s].top = b;
		pool->shards[s].nfree++;
		if (AO_CONFIG_DEBUG)
			memset(b->data, POISON_FREE, b->cap);
	}
	poison(pool->arena, pool->arena_len);
	reg_add(pool);
	*poolp = pool;
	return 0;
}

/* Gets minus last puts, counted where they happened: a shard's own (not
 * its batches to and from the caches) and the caches'. */
uint32_t ao_bufpool_in_use(const struct ao_bufpool *pool)
{
	int64_t n = 0;

	for (uint32_t i = 0; i < pool->nshards; i++) {
		const struct shard *s = &pool->shards[i];

		n += (int64_t)(READ_ONCE(s->gets) - READ_ONCE(s->cgets));
		n -= (int64_t)(READ_ONCE(s->puts) - READ_ONCE(s->cputs));
	}
	for (uint32_t i = 0; i < pool->ncaches; i++) {
		const struct tcache *c = &pool->caches[i];

		n += (int64_t)(READ_ONCE(c->gets) - READ_ONCE(c->puts));
	}
	/* A racy sum while buffers move (a put counted before its get):
	 * keep it within 0 .. count. */
	if (n < 0)
		return 0;
	return n > pool->count ? pool->count : (uint32_t)n;
}

int ao_bufpool_destroy(struct ao_bufpool *pool)
{
	if (!pool)
		return 0;
	if (ao_bufpool_in_use(pool)) {
		ao_bufpool_report(pool, stderr);
		return -EBUSY;
	}
	reg_del(pool);
	unpoison(pool->arena, pool->arena_len);
	munmap(pool->arena, pool->arena_len);
	free(pool->bufs);
	free(pool->caches);
	free(pool);
	return 0;
}

/* ---- introspection ---- */

void ao_bufpool_info(const struct ao_bufpool *pool, struct ao_bufpool_info *i)
{
	i->arena = pool->arena;
	i->arena_len = pool->arena_len;
	i->stride = pool->stride;
	i->headroom = pool->count ? pool->bufs[0].headroom : 0;
	i->buf_size = pool->buf_size;
	i->count = pool->count;
	i->shards = pool->nshards;
	i->high_water = pool->hwm;
	i->huge = pool->huge;
	i->cache = pool->ccap;
	i->cache_batch = pool->cbatch;
}

struct ao_buf *ao_bufpool_buf(struct ao_bufpool *pool, uint32_t index)
{
	return index < pool->count ? &pool->bufs[index] : NULL;
}

int ao_bufpool_shard_stats(const struct ao_bufpool *pool, uint32_t shard,
			   struct ao_bufpool_shard_stats *st)
{
	const struct shard *s;

	if (shard >= pool->nshards)
		return -EINVAL;
	s = &pool->shards[shard];
	st->gets = READ_ONCE(s->gets);
	st->puts = READ_ONCE(s->puts);
	st->steals = READ_ONCE(s->steals);
	st->stolen = READ_ONCE(s->stolen);
	st->misses = READ_ONCE(s->misses);
	st->spills = READ_ONCE(s->spills);
	st->nfree = READ_ONCE(s->nfree);
	ao_spin_stats(&s->lock, &st->lock);
	return 0;
}

void ao_bufpool_stats(const struct ao_bufpool *pool,
		      struct ao_bufpool_stats *st)
{
	struct ao_bufpool_shard_stats *t = &st->sum;

	memset(st, 0, sizeof(*st));
	for (uint32_t i = 0; i < pool->nshards; i++) {
		struct ao_bufpool_shard_stats s;

		ao_bufpool_shard_stats(pool, i, &s);
		t->gets += s.gets;
		t->puts += s.puts;
		t->steals += s.steals;
		t->stolen += s.stolen;
		t->misses += s.misses;
		t->spills += s.spills;
		t->nfree += s.nfree;
		ao_spin_stats_add(&t->lock, &s.lock);
	}
	st->exhausted = __atomic_load_n(&pool->exhausted, __ATOMIC_RELAXED);
	st->waits = __atomic_load_n(&pool->waits, __ATOMIC_RELAXED);
	st->timeouts = __atomic_load_n(&pool->timeouts, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < pool->ncaches; i++) {
		const struct tcache *c = &pool->caches[i];
		uint64_t gets = READ_ONCE(c->gets);

		st->cache_gets += gets;
		st->cache_hits += gets - READ_ONCE(c->misses);
		st->cache_puts += READ_ONCE(c->puts);
		st->remote_frees += READ_ONCE(c->rfrees);
		st->cache_refills += READ_ONCE(c->refills);
		st->cache_flushes += READ_ONCE(c->flushes);
	}
	st->in_use = ao_bufpool_in_use(pool);
	if (pool->ncaches && st->in_use + t->nfree < pool->count)
		st->cached = pool->count - st->in_use - t->nfree;
}

#define REPORT_MAX_LEAKS 16

uint32_t ao_bufpool_report(const struct ao_bufpool *pool, FILE *f)
{
	struct ao_bufpool_stats st;
	uint32_t listed = 0;

	ao_bufpool_stats(pool, &st);
	fprintf(f,
		"aorta: bufpool %p: %u buffers of %zu bytes in %u shards, "
		"%u in use\n",
		(const void *)pool, pool->count, pool->buf_size, pool->nshards,
		st.in_use);
	fprintf(f,
		"  gets %llu puts %llu steals %llu misses %llu spills %llu "
		"exhausted %llu waits %llu timeouts %llu\n",
		(unsigned long long)st.sum.gets,
		(unsigned long long)st.sum.puts,
		(unsigned long long)st.sum.steals,
		(unsigned long long)st.sum.misses,
		(unsigned long long)st.sum.spills,
		(unsigned long long)st.exhausted, (unsigned long long)st.waits,
		(unsigned long long)st.timeouts);
	if (pool->ncaches)
		fprintf(f,
			"  thread caches of %u: %u free in them, gets %llu "
			"(hits %llu) puts %llu (remote %llu) refills %llu "
			"flushes %llu\n",
			pool->ccap, st.cached,
			(unsigned long long)st.cache_gets,
			(unsigned long long)st.cache_hits,
			(unsigned long long)st.cache_puts,
			(unsigned long long)st.remote_frees,
			(unsigned long long)st.cache_refills,
			(unsigned long long)st.cache_flushes);
	if (!st.in_use)
		return 0;
	fprintf(f, "  leak: %u buffers still out:\n", st.in_use);
	for (uint32_t i = 0; i < pool->count; i++) {
		const struct ao_buf *b = &pool->bufs[i];
		uint32_t refs = __atomic_load_n(&b->refs, __ATOMIC_RELAXED);

		if (!refs)
			continue;
		if (listed++ == REPORT_MAX_LEAKS) {
			fprintf(f, "    ...\n");
			break;
		}
		fprintf(f, "    buffer %u (%p): refs %u len %u\n", b->index,
			b->data, refs, READ_ONCE(b->len));
	}
	return st.in_use;
}
