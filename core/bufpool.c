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
 * (buf_size rounded up to a cache line), so buffer i is at arena + i *
 * stride and i is its io_uring buffer id.  The descriptors (struct ao_buf,
 * one cache line each) live in a separate array: the arena holds only data.
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
 * Waiting: ao_buf_get_wait() parks on an event count; a put wakes a waiter
 * only when the pool's waiter count is non-zero (one relaxed load
 * otherwise).  Why no wake is lost: the waiter raises the count and
 * prepares before it scans every shard under its lock; the putter pushes
 * under the lock before it reads the count.  The two critical sections on
 * that shard are ordered: either the scan sees the buffer, or the waiter's
 * unlock happens before the putter's lock, and so before its read of the
 * count, which therefore sees the waiter.  A thief pushing the rest of a
 * batch home (buffers no scan could see while it carried them) wakes the
 * same way.
 *
 * Debug builds (DEBUG=1): a put checks that the pointer is a descriptor of
 * a live pool (foreign pointer) and that it still has a reference (double
 * put); ao_buf_ref() checks the latter too (use after the last put).  A
 * freed buffer is filled with POISON_FREE and the pattern is checked when
 * it is handed out again, so a write after the last put aborts at the next
 * get of that buffer.  Under AddressSanitizer (any build) free buffers are
 * poisoned for ASan, which catches the access itself.
 *
 * Cost: a get/put pair on one thread is two uncontended lock/unlock pairs,
 * two sched_getcpu() calls, a pop, a push and an atomic decrement.
 *
 * Figures (2-vCPU AMD EPYC VM, shared; 2048-byte buffers, 4096 per pool;
 * tools/bench/poolbench and poolbench-insns.sh):
 *   instructions per pair (callgrind): 16 shards 196, 1 shard 115; glibc
 *   malloc+free 139 at 64 and 512 bytes, 322 at 2048: 1.41x and 0.61x.
 *   Under valgrind sched_getcpu() takes its syscall path (30 instructions,
 *   the difference to 1 shard is two of them); natively it reads rseq.
 *   pairs/s: 1 thread 27-29M for both pools and malloc; 4 threads 16
 *   shards 50-55M vs 1 shard 6-12M (4.0-8.7x), 8 threads 48-55M vs 6-10M
 *   (5.4-8.4x), two runs.
 *   The 1-shard lock finishes 61-78% of acquisitions on the fast path at
 *   8 threads, 16 shards 87-99% and the rest in phase 1 (>99.99% fast or
 *   phase 1).  Most of those phase-1 acquisitions did not spin: while a
 *   phase-3 sleeper is registered on a lock, its inline fast path fails
 *   and a first-try success in the slow path counts as phase 1.  With
 *   the machine loaded by other processes (load 8-13)
 *   our threads rarely run at the same time and the ratio drops to
 *   1.1-1.8x: compare within one run, and read its load average.
 */
#include <errno.h>
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
#define FLAGS_ALL \
	(AO_BUFPOOL_HUGE | AO_BUFPOOL_RETURN_ORIGIN | AO_BUFPOOL_THREAD_HOME)

struct shard {
	struct ao_spinlock lock;
	struct ao_buf *top; /* free stack; under lock */
	uint32_t nfree; /* under lock; read racily to skip empty shards */
	/* Written only by the lock holder, read racily by the stats. */
	uint64_t gets, puts, steals, stolen, misses;
	uint64_t spills; /* atomic add, no lock */
} __ao_cacheline_aligned;

struct ao_bufpool {
	/* Read-mostly. */
	struct shard *shards;
	struct ao_buf *bufs;
	char *arena;
	size_t arena_len, stride, buf_size;
	uint32_t count, nshards, mask, hwm;
	unsigned int flags;
	bool huge;
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

/* ---- debug checks ---- */

#if AO_CONFIG_DEBUG
#define MAX_LIVE_POOLS 64
static struct ao_spinlock live_lock = AO_SPINLOCK_INIT;
static struct ao_bufpool *live_pools[MAX_LIVE_POOLS];
static uint32_t live_overflow; /* pools not registered: check skipped */

static void live_add(struct ao_bufpool *pool, bool add)
{
	ao_spin_lock(&live_lock);
	for (int i = 0; i < MAX_LIVE_POOLS; i++) {
		if (live_pools[i] == (add ? NULL : pool)) {
			live_pools[i] = add ? pool : NULL;
			ao_spin_unlock(&live_lock);
			return;
		}
	}
	if (add)
		live_overflow++;
	else
		live_overflow--;
	ao_spin_unlock(&live_lock);
}

static bool is_live_buf(const struct ao_buf *b)
{
	uintptr_t p = (uintptr_t)b;
	bool ok = false;

	ao_spin_lock(&live_lock);
	ok = live_overflow != 0;
	for (int i = 0; i < MAX_LIVE_POOLS && !ok; i++) {
		const struct ao_bufpool *pool = live_pools[i];
		uintptr_t lo;

		if (!pool)
			continue;
		lo = (uintptr_t)pool->bufs;
		if (p >= lo && p < lo + pool->count * sizeof(*b) &&
		    (p - lo) % sizeof(*b) == 0)
			ok = true;
	}
	ao_spin_unlock(&live_lock);
	return ok;
}
#else
static inline void live_add(struct ao_bufpool *pool, bool add)
{
	(void)pool;
	(void)add;
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
	unpoison(b->data, b->cap);
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
	 * whose acquire orders it after the last holder's final put. */
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
		held_inc(hs->steals, 1);
		held_inc(hs->gets, 1);
		ao_spin_unlock(&hs->lock);
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

/* A free buffer, not yet handed out; NULL when none was found. */
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

struct ao_buf *ao_buf_get(struct ao_bufpool *pool)
{
	struct ao_buf *b = get_raw(pool);

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
	b = get_raw(pool);
	if (b)
		return hand_out(b);
	deadline = ao_now_ns() + (uint64_t)timeout_ns;
	for (;;) {
		uint64_t now;
		uint32_t key;

		/* SEQ_CST RMW, then the prepare (another SEQ_CST RMW), both
		 * before the locked scan: the scan's unlock of a shard pairs
		 * with the next lock of that shard by a putter, which then
		 * sees nwaiters != 0 (see the top of this file). */
		__atomic_fetch_add(&pool->nwaiters, 1, __ATOMIC_SEQ_CST);
		key = ao_ec_prepare(&pool->ec);
		b = steal(pool, home_shard(pool), true);
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
		b = get_raw(pool);
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

static void release(struct ao_bufpool *pool, struct ao_buf *b)
{
	uint32_t h;
	struct shard *s;

	if (AO_CONFIG_DEBUG) {
		WRITE_ONCE(b->magic, MAGIC_FREE);
		memset(b->data, POISON_FREE, b->cap);
	}
	poison(b->data, pool->stride);
	h = b->origin;
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
	size_t stride, len;
	uint32_t nshards, per;
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
	stride = (prm->buf_size + AO_CACHELINE_SIZE - 1) &
		 ~(size_t)(AO_CACHELINE_SIZE - 1);
	if (__builtin_mul_overflow(stride, (size_t)prm->count, &len) ||
	    len > SIZE_MAX - page)
		return -EINVAL;
	len = (len + page - 1) & ~(page - 1);

	if (posix_memalign(&mem, AO_CACHELINE_SIZE,
			   sizeof(*pool) + nshards * sizeof(struct shard)))
		return -ENOMEM;
	pool = mem;
	memset(pool, 0, sizeof(*pool));
	pool->shards = (struct shard *)(pool + 1);
	if (posix_memalign(&mem, AO_CACHELINE_SIZE,
			   prm->count * sizeof(struct ao_buf))) {
		free(pool);
		return -ENOMEM;
	}
	pool->bufs = mem;
	pool->arena =
		map_arena(&len, prm->flags & AO_BUFPOOL_HUGE, &pool->huge);
	if (!pool->arena) {
		free(pool->bufs);
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
		b->data = pool->arena + (size_t)i * stride;
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
	live_add(pool, true);
	*poolp = pool;
	return 0;
}

static uint32_t free_count(const struct ao_bufpool *pool)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < pool->nshards; s++)
		n += READ_ONCE(pool->shards[s].nfree);
	return n;
}

uint32_t ao_bufpool_in_use(const struct ao_bufpool *pool)
{
	uint32_t n = free_count(pool);

	/* A racy sum while buffers move: never report more than count. */
	return n >= pool->count ? 0 : pool->count - n;
}

int ao_bufpool_destroy(struct ao_bufpool *pool)
{
	if (!pool)
		return 0;
	if (ao_bufpool_in_use(pool)) {
		ao_bufpool_report(pool, stderr);
		return -EBUSY;
	}
	live_add(pool, false);
	unpoison(pool->arena, pool->arena_len);
	munmap(pool->arena, pool->arena_len);
	free(pool->bufs);
	free(pool);
	return 0;
}

/* ---- introspection ---- */

void ao_bufpool_info(const struct ao_bufpool *pool, struct ao_bufpool_info *i)
{
	i->arena = pool->arena;
	i->arena_len = pool->arena_len;
	i->stride = pool->stride;
	i->buf_size = pool->buf_size;
	i->count = pool->count;
	i->shards = pool->nshards;
	i->high_water = pool->hwm;
	i->huge = pool->huge;
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
	st->in_use = ao_bufpool_in_use(pool);
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
