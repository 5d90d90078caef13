// SPDX-License-Identifier: MIT
/*
 * The sharded buffer pool: parameters and the arena, get/put/ref, steals
 * and the put policy, exhaustion and recovery, the timed wait, the thread
 * caches (hits, batches, cross-thread puts going home, thread exit, the
 * bound, the remote lists reclaimed, waiters), reference
 * counting across threads, exactly-once ownership under stress, statistics,
 * the leak report, and misuse detection in debug builds (death tests in a
 * forked child).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/core/bufpool.h>
#include "helpers.h"

static struct ao_bufpool *mkpool(size_t size, uint32_t count, uint32_t shards,
				 uint32_t hwm, unsigned int flags)
{
	struct ao_bufpool_params p = { .buf_size = size,
				       .count = count,
				       .shards = shards,
				       .high_water = hwm,
				       .flags = flags };
	struct ao_bufpool *pool = NULL;

	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	assert_non_null(pool);
	return pool;
}

/* Every test ends with this: no buffer may be left out. */
static void destroy_clean(struct ao_bufpool *pool)
{
	assert_int_equal(ao_bufpool_in_use(pool), 0);
	assert_int_equal(ao_bufpool_destroy(pool), 0);
}

/* Pin to the CPU we are on, so that the home shard stays put. */
static cpu_set_t saved_mask;

static int pin_here(void)
{
	cpu_set_t one;
	int cpu = sched_getcpu();

	assert_true(cpu >= 0);
	assert_int_equal(sched_getaffinity(0, sizeof(saved_mask), &saved_mask),
			 0);
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	return sched_getcpu();
}

static void unpin(void)
{
	assert_int_equal(sched_setaffinity(0, sizeof(saved_mask), &saved_mask),
			 0);
}

/* ---- parameters, arena, descriptors ---- */

static void test_create_params(void **state)
{
	struct ao_bufpool_params p = { .buf_size = 100, .count = 10 };
	struct ao_bufpool *pool = (void *)1;
	struct ao_bufpool_info info;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	const uint32_t bad_shards[] = { 3, 6, 12, AO_BUFPOOL_MAX_SHARDS * 2 };

	(void)state;
	assert_int_equal(ao_bufpool_create(NULL, &p), -EINVAL);
	assert_int_equal(ao_bufpool_create(&pool, NULL), -EINVAL);
	assert_null(pool);
	p.buf_size = 0;
	assert_int_equal(ao_bufpool_create(&pool, &p), -EINVAL);
	p.buf_size = 100;
	p.count = 0;
	assert_int_equal(ao_bufpool_create(&pool, &p), -EINVAL);
	p.count = AO_BUFPOOL_MAX_COUNT + 1;
	assert_int_equal(ao_bufpool_create(&pool, &p), -EINVAL);
	p.count = 10;
	p.flags = 0x80;
	assert_int_equal(ao_bufpool_create(&pool, &p), -EINVAL);
	p.flags = 0;
	for (size_t i = 0; i < ARRAY_SIZE(bad_shards); i++) {
		p.shards = bad_shards[i];
		assert_int_equal(ao_bufpool_create(&pool, &p), -EINVAL);
		assert_null(pool);
	}
	assert_int_equal(ao_bufpool_destroy(NULL), 0);

	/* Defaults: 16 shards, high water twice the fair share. */
	p.shards = 0;
	p.count = 100;
	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.shards, AO_BUFPOOL_DEFAULT_SHARDS);
	assert_int_equal(info.count, 100);
	assert_int_equal(info.buf_size, 100);
	assert_int_equal(info.stride, 128);
	assert_int_equal(info.high_water, 2 * 7);
	assert_int_equal((uintptr_t)info.arena % page, 0);
	assert_int_equal(info.arena_len % page, 0);
	assert_true(info.arena_len >= info.stride * info.count);
	assert_int_equal(ao_bufpool_in_use(pool), 0);
	/* Every descriptor maps to its own slot of the arena. */
	for (uint32_t i = 0; i < info.count; i++) {
		struct ao_buf *b = ao_bufpool_buf(pool, i);

		assert_non_null(b);
		assert_int_equal(ao_buf_index(b), i);
		assert_ptr_equal(b->data, (char *)info.arena + i * info.stride);
		assert_int_equal(b->cap, 100);
		assert_ptr_equal(b->pool, pool);
	}
	assert_null(ao_bufpool_buf(pool, info.count));
	assert_null(ao_bufpool_buf(pool, UINT32_MAX));
	assert_int_equal(ao_bufpool_destroy(pool), 0);

	/* 1 shard, and shards > count (some start empty). */
	pool = mkpool(64, 3, 1, 0, 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.shards, 1);
	destroy_clean(pool);
	pool = mkpool(64, 3, 64, 5, 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.shards, 64);
	assert_int_equal(info.high_water, 5);
	destroy_clean(pool);
}

static void test_huge_pages(void **state)
{
	struct ao_bufpool *pool = mkpool(2048, 1024, 16, 0, AO_BUFPOOL_HUGE);
	struct ao_bufpool_info info;
	struct ao_buf *bufs[1024];

	(void)state;
	ao_bufpool_info(pool, &info);
	/* Huge pages or not (the fallback), the arena works the same. */
	if (info.huge)
		assert_int_equal(info.arena_len % (2u << 20), 0);
	print_message("      (arena on %s pages)\n", info.huge ? "huge" : "4K");
	for (int i = 0; i < 1024; i++) {
		bufs[i] = ao_buf_get(pool);
		assert_non_null(bufs[i]);
		memset(bufs[i]->data, i, bufs[i]->cap);
	}
	for (int i = 0; i < 1024; i++) {
		assert_int_equal(((unsigned char *)bufs[i]->data)[2047],
				 (unsigned char)i);
		ao_buf_put(bufs[i]);
	}
	destroy_clean(pool);
}

/* ---- get, put, ref on one thread ---- */

static int put_on_scope_exit(struct ao_bufpool *pool)
{
	struct ao_buf *b __ao_buf_auto = ao_buf_get(pool);

	assert_non_null(b);
	return (int)ao_bufpool_in_use(pool);
}

static void test_get_put_ref(void **state)
{
	struct ao_bufpool *pool = mkpool(1000, 32, 4, 0, 0);
	struct ao_bufpool_stats st;
	struct ao_bufpool_info info;
	struct ao_buf *b;

	(void)state;
	ao_bufpool_info(pool, &info);
	b = ao_buf_get(pool);
	assert_non_null(b);
	assert_int_equal(b->refs, 1);
	assert_int_equal(b->len, 0);
	assert_int_equal(b->cap, 1000);
	assert_ptr_equal(b->pool, pool);
	assert_ptr_equal(b->data,
			 (char *)info.arena + ao_buf_index(b) * info.stride);
	memset(b->data, 0xa5, b->cap);
	b->len = 1000;
	assert_int_equal(ao_bufpool_in_use(pool), 1);

	assert_ptr_equal(ao_buf_ref(b), b);
	assert_int_equal(b->refs, 2);
	ao_buf_put(b);
	assert_int_equal(b->refs, 1);
	assert_int_equal(ao_bufpool_in_use(pool), 1);
	ao_buf_put(b);
	assert_int_equal(ao_bufpool_in_use(pool), 0);

	/* A fresh get resets len and refs. */
	b = ao_buf_get(pool);
	assert_int_equal(b->len, 0);
	assert_int_equal(b->refs, 1);
	ao_buf_put(b);

	ao_buf_put(NULL); /* a no-op, like free(NULL) */
	assert_int_equal(put_on_scope_exit(pool), 1);
	assert_int_equal(ao_bufpool_in_use(pool), 0);

	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.sum.gets, 3);
	assert_int_equal(st.sum.puts, 3);
	assert_int_equal(st.sum.nfree, 32);
	assert_int_equal(st.in_use, 0);
	assert_int_equal(st.exhausted, 0);
	destroy_clean(pool);
}

/* ---- exhaustion and recovery ---- */

static void test_exhaustion_recovery(void **state)
{
	struct ao_bufpool *pool = mkpool(256, 8, 4, 0, 0);
	struct ao_buf *b[8], *x;
	struct ao_bufpool_stats st;
	bool seen[8] = { 0 };

	(void)state;
	for (int i = 0; i < 8; i++) {
		b[i] = ao_buf_get(pool);
		assert_non_null(b[i]);
		assert_false(seen[ao_buf_index(b[i])]);
		seen[ao_buf_index(b[i])] = true;
	}
	assert_int_equal(ao_bufpool_in_use(pool), 8);
	for (int k = 0; k < 3; k++) {
		errno = 0;
		assert_null(ao_buf_get(pool));
		assert_int_equal(errno, ENOBUFS);
	}
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.exhausted, 3);
	assert_int_equal(st.sum.nfree, 0);

	/* One back: the next get finds it, wherever it went. */
	ao_buf_put(b[5]);
	x = ao_buf_get(pool);
	assert_ptr_equal(x, b[5]);
	assert_null(ao_buf_get(pool));
	for (int i = 0; i < 8; i++)
		ao_buf_put(b[i]);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.exhausted, 4);
	assert_int_equal(st.sum.gets, 9);
	assert_int_equal(st.sum.puts, 9);
	destroy_clean(pool);
}

/* ---- steals and the put policy ---- */

static void test_steal_when_home_empty(void **state)
{
	struct ao_bufpool *pool = mkpool(64, 32, 16, 0, 0);
	struct ao_bufpool_shard_stats hs, ss;
	struct ao_bufpool_stats st;
	struct ao_buf *b[32];
	uint32_t home;
	uint64_t stolen = 0;

	(void)state;
	home = (uint32_t)pin_here() & 15;
	/* Home has 2; all 32 can only come from stealing. */
	for (int i = 0; i < 32; i++) {
		b[i] = ao_buf_get(pool);
		assert_non_null(b[i]);
	}
	assert_null(ao_buf_get(pool));
	assert_int_equal(ao_bufpool_shard_stats(pool, home, &hs), 0);
	assert_true(hs.misses >= 1);
	assert_true(hs.steals >= 15);
	assert_int_equal(hs.gets, 32);
	assert_int_equal(hs.stolen, 0);
	for (uint32_t s = 0; s < 16; s++) {
		assert_int_equal(ao_bufpool_shard_stats(pool, s, &ss), 0);
		if (s != home)
			assert_int_equal(ss.stolen, 2);
		stolen += ss.stolen;
		assert_int_equal(ss.nfree, 0);
	}
	assert_int_equal(stolen, 30);
	assert_int_equal(ao_bufpool_shard_stats(pool, 16, &ss), -EINVAL);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.sum.steals, hs.steals);
	assert_int_equal(st.in_use, 32);
	for (int i = 0; i < 32; i++)
		ao_buf_put(b[i]);
	unpin();
	destroy_clean(pool);
}

/* Local policy: a freed buffer goes to the freeing thread's home shard until
 * that shard holds high_water, then to its origin. */
static void test_put_policy_local(void **state)
{
	struct ao_bufpool *pool = mkpool(64, 64, 16, 4, 0);
	struct ao_bufpool_shard_stats hs, os;
	struct ao_buf *b[7];
	uint32_t home, o;

	(void)state;
	home = (uint32_t)pin_here() & 15;
	o = (home + 1) & 15;
	/* Home's own 4, then a steal from the next shard: it takes half of
	 * that shard's 4, keeps one and moves one home. */
	for (int i = 0; i < 5; i++)
		b[i] = ao_buf_get(pool);
	for (int i = 0; i < 4; i++)
		assert_int_equal(b[i]->origin, home);
	assert_int_equal(b[4]->origin, o);
	ao_bufpool_shard_stats(pool, home, &hs);
	assert_int_equal(hs.nfree, 1);
	assert_int_equal(hs.steals, 1);
	assert_int_equal(hs.misses, 1);
	ao_bufpool_shard_stats(pool, o, &os);
	assert_int_equal(os.nfree, 2);
	assert_int_equal(os.stolen, 2);
	b[5] = ao_buf_get(pool); /* the one moved home */
	assert_int_equal(b[5]->origin, o);
	b[6] = ao_buf_get(pool); /* steals 1 of o's 2 */
	assert_int_equal(b[6]->origin, o);
	ao_bufpool_shard_stats(pool, o, &os);
	assert_int_equal(os.nfree, 1);

	/* Below the high water mark a stolen buffer stays home. */
	ao_buf_put(b[5]);
	ao_buf_put(b[0]);
	ao_buf_put(b[1]);
	ao_buf_put(b[2]);
	ao_bufpool_shard_stats(pool, home, &hs);
	assert_int_equal(hs.nfree, 4);
	assert_int_equal(hs.spills, 0);
	/* At it, the next one spills to its origin... */
	ao_buf_put(b[4]);
	ao_bufpool_shard_stats(pool, home, &hs);
	assert_int_equal(hs.nfree, 4);
	assert_int_equal(hs.spills, 1);
	ao_bufpool_shard_stats(pool, o, &os);
	assert_int_equal(os.nfree, 2);
	/* ...unless home is its origin. */
	ao_buf_put(b[3]);
	ao_bufpool_shard_stats(pool, home, &hs);
	assert_int_equal(hs.nfree, 5);
	assert_int_equal(hs.spills, 1);
	ao_buf_put(b[6]);
	ao_bufpool_shard_stats(pool, home, &hs);
	assert_int_equal(hs.spills, 2);
	ao_bufpool_shard_stats(pool, o, &os);
	assert_int_equal(os.nfree, 3);
	assert_int_equal(hs.puts + os.puts, 7);
	unpin();
	destroy_clean(pool);
}

/* Origin policy: every buffer goes back to the shard it started in. */
static void test_put_policy_origin(void **state)
{
	struct ao_bufpool *pool =
		mkpool(64, 64, 16, 0, AO_BUFPOOL_RETURN_ORIGIN);
	struct ao_bufpool_shard_stats ss;
	struct ao_buf *b[64];

	(void)state;
	pin_here();
	for (int i = 0; i < 64; i++)
		b[i] = ao_buf_get(pool);
	for (int i = 0; i < 64; i++)
		ao_buf_put(b[i]);
	for (uint32_t s = 0; s < 16; s++) {
		ao_bufpool_shard_stats(pool, s, &ss);
		assert_int_equal(ss.nfree, 4);
		assert_int_equal(ss.spills, 0);
	}
	for (int i = 0; i < 64; i++)
		assert_int_equal(b[i]->origin, ao_buf_index(b[i]) / 4);
	unpin();
	destroy_clean(pool);
}

/* AO_BUFPOOL_THREAD_HOME (also the fallback when sched_getcpu fails): each
 * thread gets its own slot, so two threads have different homes. */
struct home_arg {
	struct ao_bufpool *pool;
	int shard;
};

static void *home_probe(void *arg)
{
	struct home_arg *a = arg;
	struct ao_buf *b = ao_buf_get(a->pool);

	/* With 2 buffers per shard and no steal, the first get comes from
	 * home: its origin is the home shard. */
	a->shard = b ? (int)b->origin : -1;
	ao_buf_put(b);
	return NULL;
}

static void test_thread_home(void **state)
{
	struct ao_bufpool *pool = mkpool(64, 32, 16, 0, AO_BUFPOOL_THREAD_HOME);
	struct home_arg a[2] = { { pool, -1 }, { pool, -1 } };
	struct ao_bufpool_stats st;

	(void)state;
	t_run_threads(2, home_probe, a, sizeof(a[0]));
	assert_true(a[0].shard >= 0 && a[1].shard >= 0);
	assert_int_not_equal(a[0].shard, a[1].shard);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.sum.steals, 0);
	destroy_clean(pool);
}

/* ---- the timed wait ---- */

static void test_wait_timeout(void **state)
{
	struct ao_bufpool *pool = mkpool(64, 2, 2, 0, 0);
	struct ao_buf *b0, *b1, *b2;
	struct ao_bufpool_stats st;
	uint64_t t0, dt;

	(void)state;
	errno = 0;
	assert_null(ao_buf_get_wait(pool, -1));
	assert_int_equal(errno, EINVAL);
	/* Free buffers: no wait at all. */
	b0 = ao_buf_get_wait(pool, 0);
	b1 = ao_buf_get_wait(pool, 1000000000);
	assert_non_null(b0);
	assert_non_null(b1);
	errno = 0;
	assert_null(ao_buf_get_wait(pool, 0));
	assert_int_equal(errno, ETIMEDOUT);
	t0 = t_now_ns();
	errno = 0;
	b2 = ao_buf_get_wait(pool, 20000000);
	dt = t_now_ns() - t0;
	assert_null(b2);
	assert_int_equal(errno, ETIMEDOUT);
	assert_true(dt >= 20000000);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.timeouts, 2);
	assert_int_equal(st.waits, 1);
	assert_int_equal(st.exhausted, 0);
	ao_buf_put(b0);
	ao_buf_put(b1);
	destroy_clean(pool);
}

struct waiter_arg {
	struct ao_bufpool *pool;
	struct ao_buf *got;
	uint64_t waited_ns;
	pid_t tid;
	int started;
};

static void *waiter(void *arg)
{
	struct waiter_arg *w = arg;
	uint64_t t0 = t_now_ns();

	w->tid = gettid();
	/* Pairs with the acquire in wait_asleep(). */
	__atomic_store_n(&w->started, 1, __ATOMIC_RELEASE);
	w->got = ao_buf_get_wait(w->pool, 10000000000ll);
	w->waited_ns = t_now_ns() - t0;
	return NULL;
}

/* Is thread tid of this process asleep (state S)?  Preempted, it is R. */
static bool task_asleep(pid_t tid)
{
	char path[64], buf[512];
	const char *p;
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (f) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'S';
}

/*
 * Wait until the waiter sleeps in ao_buf_get_wait() (10 s at most): a
 * put made before that would find no one waiting, and a fixed sleep is
 * not enough when this machine is loaded and the waiter is held up.
 */
static void wait_asleep(struct waiter_arg *w)
{
	while (!__atomic_load_n(&w->started, __ATOMIC_ACQUIRE))
		sched_yield();
	WAIT_UNTIL(task_asleep(w->tid), 10000);
}

/* A waiter is woken by a put on another thread, long before its timeout. */
static void test_wait_woken_by_put(void **state)
{
	struct ao_bufpool *pool = mkpool(64, 1, 16, 0, 0);
	struct waiter_arg w = { .pool = pool };
	struct ao_bufpool_stats st;
	struct ao_buf *b;
	pthread_t t;

	(void)state;
	t_watchdog_arm(30, "waiter never woken by a put");
	b = ao_buf_get(pool);
	assert_non_null(b);
	assert_int_equal(pthread_create(&t, NULL, waiter, &w), 0);
	wait_asleep(&w);
	ao_buf_put(b);
	pthread_join(t, NULL);
	t_watchdog_disarm();
	assert_ptr_equal(w.got, b);
	assert_true(w.waited_ns < 5000000000ull);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.waits, 1);
	assert_int_equal(st.timeouts, 0);
	ao_buf_put(w.got);
	destroy_clean(pool);
}

/* Many waiters, few buffers: a lost wake-up shows as a timeout. */
struct wstress_arg {
	struct ao_bufpool *pool;
	long iters;
	long timeouts;
};

static void *wait_stress_worker(void *arg)
{
	struct wstress_arg *a = arg;

	for (long i = 0; i < a->iters; i++) {
		struct ao_buf *b = ao_buf_get_wait(a->pool, 10000000000ll);

		if (!b) {
			a->timeouts++;
			continue;
		}
		if (i % 4 == 0)
			sched_yield();
		ao_buf_put(b);
	}
	return NULL;
}

static void run_wait_stress(uint32_t shards)
{
	struct ao_bufpool *pool = mkpool(64, 3, shards, 0, 0);
	struct wstress_arg a[6];
	struct ao_bufpool_stats st;
	long iters = t_scaled(20000, 500);

	for (int i = 0; i < 6; i++)
		a[i] = (struct wstress_arg){ pool, iters, 0 };
	t_watchdog_arm(120, "wait stress");
	t_run_threads(6, wait_stress_worker, a, sizeof(a[0]));
	t_watchdog_disarm();
	for (int i = 0; i < 6; i++)
		assert_int_equal(a[i].timeouts, 0);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.timeouts, 0);
	assert_int_equal(st.sum.gets, 6 * iters);
	assert_int_equal(st.sum.puts, 6 * iters);
	print_message("      (%u shards: %llu of %ld gets waited)\n", shards,
		      (unsigned long long)st.waits, 6 * iters);
	destroy_clean(pool);
}

static void test_wait_stress(void **state)
{
	(void)state;
	run_wait_stress(1);
	run_wait_stress(16);
}

/* ---- thread caches ---- */

static struct ao_bufpool *mkpool_cached(uint32_t count, uint32_t cache)
{
	struct ao_bufpool_params p = { .buf_size = 256,
				       .count = count,
				       .cache = cache };
	struct ao_bufpool *pool = NULL;
	struct ao_bufpool_info info;

	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.cache, cache);
	assert_int_equal(info.cache_batch, cache / 2);
	return pool;
}

static void test_cache_params(void **state)
{
	struct ao_bufpool_params p = { .buf_size = 64, .count = 1024 };
	struct ao_bufpool_info info;
	struct ao_bufpool *pool;

	(void)state;
	/* The caches' lists may hold at most half the pool. */
	p.cache = 1;
	assert_int_equal(ao_bufpool_create(&pool, &p), -EINVAL);
	p.cache = 1024 / 2 / AO_BUFPOOL_CACHES + 1;
	assert_int_equal(ao_bufpool_create(&pool, &p), -EINVAL);
	p.count = 1u << 22;
	p.cache = AO_BUFPOOL_CACHE_MAX + 1;
	assert_int_equal(ao_bufpool_create(&pool, &p), -EINVAL);
	p.count = 1024;
	p.cache = 1024 / 2 / AO_BUFPOOL_CACHES;
	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.cache, 8);
	assert_int_equal(info.cache_batch, 4);
	destroy_clean(pool);
	/* Defaults: min(32, count / 128), none below 8. */
	p.cache = 0;
	p.count = 4096;
	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.cache, AO_BUFPOOL_CACHE_DEFAULT);
	destroy_clean(pool);
	p.count = 1024;
	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.cache, 8);
	destroy_clean(pool);
	p.count = 1023;
	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.cache, 0);
	destroy_clean(pool);
	p.count = 4096;
	p.flags = AO_BUFPOOL_NO_CACHE;
	assert_int_equal(ao_bufpool_create(&pool, &p), 0);
	ao_bufpool_info(pool, &info);
	assert_int_equal(info.cache, 0);
	assert_int_equal(info.cache_batch, 0);
	destroy_clean(pool);
}

/* Same-thread pairs: one refill, then every get is a hit and the same
 * buffer comes back (last in, first out). */
static void test_cache_hit(void **state)
{
	struct ao_bufpool *pool = mkpool_cached(1024, 8);
	struct ao_bufpool_stats st;
	struct ao_buf *b, *first;

	(void)state;
	first = ao_buf_get(pool);
	assert_non_null(first);
	ao_buf_put(first);
	for (int i = 0; i < 99; i++) {
		b = ao_buf_get(pool);
		assert_ptr_equal(b, first);
		assert_int_equal(b->refs, 1);
		assert_int_equal(b->len, 0);
		assert_int_equal(ao_bufpool_in_use(pool), 1);
		ao_buf_put(b);
	}
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.cache_gets, 100);
	assert_int_equal(st.cache_hits, 99);
	assert_int_equal(st.cache_puts, 100);
	assert_int_equal(st.cache_refills, 1);
	assert_int_equal(st.cache_flushes, 0);
	assert_int_equal(st.remote_frees, 0);
	/* The refill's batch of 4 sits in this thread's cache. */
	assert_int_equal(st.cached, 4);
	assert_int_equal(st.sum.nfree, 1020);
	assert_int_equal(st.in_use, 0);
	destroy_clean(pool);
}

/* Refills and flushes move half a cache at a time. */
static void test_cache_batches(void **state)
{
	struct ao_bufpool *pool = mkpool_cached(1024, 8);
	struct ao_bufpool_stats st;
	struct ao_buf *b[20];

	(void)state;
	for (int i = 0; i < 20; i++) {
		b[i] = ao_buf_get(pool);
		assert_non_null(b[i]);
	}
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.cache_refills, 5);
	assert_int_equal(st.cache_hits, 15);
	assert_int_equal(st.sum.gets, 20); /* 5 batches of 4 */
	assert_int_equal(st.in_use, 20);
	assert_int_equal(st.cached, 0);
	/* The list gives its 4 oldest back when a put takes it past 8 (to
	 * 9, keeping 5): at the 9th put, the 13th and the 17th. */
	for (int i = 0; i < 20; i++)
		ao_buf_put(b[i]);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.cache_flushes, 3);
	assert_int_equal(st.sum.puts, 12);
	assert_int_equal(st.cached, 8);
	assert_int_equal(st.sum.nfree, 1024 - 8);
	assert_int_equal(st.in_use, 0);
	destroy_clean(pool);
}

/* A buffer put on another thread goes back to the cache that handed it
 * out, and that thread's next gets take it without a refill. */
struct xput_arg {
	struct ao_buf **b;
	int n;
};

static void *put_all(void *arg)
{
	struct xput_arg *a = arg;

	for (int i = 0; i < a->n; i++)
		ao_buf_put(a->b[i]);
	return NULL;
}

static void test_cache_remote_home(void **state)
{
	struct ao_bufpool *pool = mkpool_cached(1024, 8);
	struct ao_bufpool_stats st, st2;
	struct ao_buf *b[6], *x, *rest[2], *again[6];
	struct xput_arg a = { b, 6 };
	pthread_t t;

	(void)state;
	for (int i = 0; i < 6; i++)
		b[i] = ao_buf_get(pool);
	/* Empty this thread's list: the refills left 2. */
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.cached, 2);
	rest[0] = ao_buf_get(pool);
	rest[1] = ao_buf_get(pool);

	assert_int_equal(pthread_create(&t, NULL, put_all, &a), 0);
	pthread_join(t, NULL);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.remote_frees, 6);
	assert_int_equal(st.in_use, 2);
	assert_int_equal(st.cached, 6);
	/* The six come home in one exchange: no refill. */
	for (int i = 0; i < 6; i++) {
		bool mine = false;

		x = ao_buf_get(pool);
		for (int k = 0; k < 6; k++)
			mine |= x == b[k];
		assert_true(mine);
		again[i] = x;
	}
	ao_bufpool_stats(pool, &st2);
	assert_int_equal(st2.cache_refills, st.cache_refills);
	assert_int_equal(st2.cache_hits, st.cache_hits + 5);
	for (int i = 0; i < 6; i++)
		ao_buf_put(again[i]);
	ao_buf_put(rest[0]);
	ao_buf_put(rest[1]);
	destroy_clean(pool);
}

/* A thread's exit gives its cache and its remote list back to the shards,
 * and closes the remote list: puts of its buffers then stay with the
 * putter. */
struct exit_arg {
	struct ao_bufpool *pool;
	struct ao_buf *b[5];
	int phase; /* 1: got them; 2: may exit */
};

static void *get_then_exit(void *arg)
{
	struct exit_arg *a = arg;

	/* Use its cache first: refills and flushes. */
	for (int k = 0; k < 3; k++) {
		struct ao_buf *t[16];

		for (int i = 0; i < 16; i++)
			t[i] = ao_buf_get(a->pool);
		for (int i = 0; i < 16; i++)
			ao_buf_put(t[i]);
	}
	for (int i = 0; i < 5; i++)
		a->b[i] = ao_buf_get(a->pool);
	__atomic_store_n(&a->phase, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&a->phase, __ATOMIC_ACQUIRE) != 2)
		sched_yield();
	return NULL;
}

static void test_cache_thread_exit(void **state)
{
	struct ao_bufpool *pool = mkpool_cached(1024, 8);
	struct ao_bufpool_stats st;
	struct exit_arg a = { .pool = pool };
	pthread_t t;

	(void)state;
	t_watchdog_arm(60, "cache thread exit");
	/* Its remote list holds buffers when it exits. */
	assert_int_equal(pthread_create(&t, NULL, get_then_exit, &a), 0);
	while (__atomic_load_n(&a.phase, __ATOMIC_ACQUIRE) != 1)
		sched_yield();
	for (int i = 0; i < 5; i++)
		ao_buf_put(a.b[i]);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.remote_frees, 5);
	assert_true(st.cached >= 5);
	__atomic_store_n(&a.phase, 2, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	ao_bufpool_stats(pool, &st);
	/* This thread's list is empty (its puts went remote). */
	assert_int_equal(st.cached, 0);
	assert_int_equal(st.sum.nfree, 1024);
	assert_int_equal(st.in_use, 0);

	/* Its buffers put after it exited: closed, so they stay here. */
	a.phase = 0;
	assert_int_equal(pthread_create(&t, NULL, get_then_exit, &a), 0);
	while (__atomic_load_n(&a.phase, __ATOMIC_ACQUIRE) != 1)
		sched_yield();
	__atomic_store_n(&a.phase, 2, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.in_use, 5);
	assert_int_equal(st.cached, 0);
	for (int i = 0; i < 5; i++)
		ao_buf_put(a.b[i]);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.remote_frees, 5); /* none more */
	assert_int_equal(st.cached, 5);
	assert_int_equal(st.in_use, 0);
	t_watchdog_disarm();
	destroy_clean(pool);
}

/* Every slot's cache full: they hold at most half the pool, and the rest
 * can all be got by one thread. */
#define BOUND_THREADS (int)(AO_BUFPOOL_CACHES - 1)

struct bound_arg {
	struct ao_bufpool *pool;
	int *ready;
	int *go;
};

static void *fill_cache(void *arg)
{
	struct bound_arg *a = arg;
	struct ao_buf *t[16];

	for (int i = 0; i < 16; i++)
		t[i] = ao_buf_get(a->pool);
	for (int i = 0; i < 16; i++)
		ao_buf_put(t[i]);
	__atomic_fetch_add(a->ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(a->go, __ATOMIC_ACQUIRE))
		sched_yield();
	return NULL;
}

static void test_cache_bound(void **state)
{
	struct ao_bufpool *pool = mkpool_cached(1024, 8);
	struct bound_arg a[BOUND_THREADS];
	struct ao_bufpool_stats st;
	pthread_t t[BOUND_THREADS];
	struct ao_buf **got = calloc(1024, sizeof(*got));
	int ready = 0, go = 0;
	uint32_t n = 0;

	(void)state;
	assert_non_null(got);
	t_watchdog_arm(120, "cache bound");
	for (int i = 0; i < BOUND_THREADS; i++) {
		a[i] = (struct bound_arg){ pool, &ready, &go };
		assert_int_equal(pthread_create(&t[i], NULL, fill_cache, &a[i]),
				 0);
	}
	while (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) < BOUND_THREADS)
		sched_yield();
	ao_bufpool_stats(pool, &st);
	/* Each list ends at 8 (16 puts: flushes at the 9th and 13th). */
	assert_true(st.cached <= AO_BUFPOOL_CACHES * 8);
	assert_true(st.cached <= 1024 / 2);
	assert_int_equal(st.in_use, 0);
	print_message("      (%d threads' caches hold %u of 1024)\n",
		      BOUND_THREADS, st.cached);
	/* Everything else, here. */
	while (n < 1024 && (got[n] = ao_buf_get(pool)) != NULL)
		n++;
	assert_int_equal(errno, ENOBUFS);
	assert_int_equal(n + st.cached, 1024);
	assert_true(n >= 1024 / 2);
	__atomic_store_n(&go, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < BOUND_THREADS; i++)
		pthread_join(t[i], NULL);
	/* Their exits gave their caches back. */
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.cached, 0);
	for (uint32_t i = 0; i < n; i++)
		ao_buf_put(got[i]);
	t_watchdog_disarm();
	free(got);
	destroy_clean(pool);
}

/* The remote lists are anyone's when the shards run dry. */
static void test_cache_reclaim_remote(void **state)
{
	struct ao_bufpool *pool = mkpool_cached(256, 2);
	struct ao_buf *b[256], *x;
	struct xput_arg a = { b, 0 };
	struct exit_arg e = { .pool = pool };
	pthread_t t;
	int n = 0;

	(void)state;
	while (n < 256 && (b[n] = ao_buf_get(pool)) != NULL)
		n++;
	assert_int_equal(n, 256);
	/* All of them put on another thread: home to this thread's remote
	 * list; the shards are empty. */
	a.n = n;
	assert_int_equal(pthread_create(&t, NULL, put_all, &a), 0);
	pthread_join(t, NULL);
	assert_int_equal(ao_bufpool_in_use(pool), 0);
	/* A third thread finds them. */
	e.phase = 0;
	assert_int_equal(pthread_create(&t, NULL, get_then_exit, &e), 0);
	while (__atomic_load_n(&e.phase, __ATOMIC_ACQUIRE) != 1)
		sched_yield();
	for (int i = 0; i < 5; i++)
		assert_non_null(e.b[i]);
	__atomic_store_n(&e.phase, 2, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	for (int i = 0; i < 5; i++)
		ao_buf_put(e.b[i]);
	x = ao_buf_get(pool);
	assert_non_null(x);
	ao_buf_put(x);
	destroy_clean(pool);
}

/* A waiter is woken by a put from a thread with a cache. */
static void test_cache_wait_woken(void **state)
{
	struct ao_bufpool *pool = mkpool_cached(1024, 8);
	struct waiter_arg w = { .pool = pool };
	struct ao_buf **all = calloc(1024, sizeof(*all));
	uint32_t n = 0;
	pthread_t t;

	(void)state;
	assert_non_null(all);
	t_watchdog_arm(30, "waiter never woken by a cached put");
	while (n < 1024 && (all[n] = ao_buf_get(pool)) != NULL)
		n++;
	assert_int_equal(n, 1024);
	assert_int_equal(pthread_create(&t, NULL, waiter, &w), 0);
	wait_asleep(&w);
	ao_buf_put(all[--n]);
	pthread_join(t, NULL);
	t_watchdog_disarm();
	assert_ptr_equal(w.got, all[n]);
	ao_buf_put(w.got);
	while (n)
		ao_buf_put(all[--n]);
	free(all);
	destroy_clean(pool);
}

/* Many threads get, hand buffers to each other through shared slots and
 * put what they are handed: cross-thread puts going home, refills,
 * flushes and reclaims all at once (run under TSan and ASan too).  Each
 * buffer is held by one thread at a time: the holder marks it. */
#define XS_SLOTS 16

struct xs_shared {
	struct ao_bufpool *pool;
	uint32_t *held; /* per buffer index: 0 free, else the holder */
	struct ao_buf *slots[XS_SLOTS];
	long iters;
	int fail;
};

struct xs_arg {
	struct xs_shared *sh;
	uint32_t id;
};

static void xs_take(struct xs_arg *a, struct ao_buf *b, uint32_t from)
{
	uint32_t exp = from;

	if (!__atomic_compare_exchange_n(&a->sh->held[ao_buf_index(b)], &exp,
					 a->id, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED) ||
	    (from && *(uint32_t *)b->data != from))
		__atomic_store_n(&a->sh->fail, 1, __ATOMIC_RELAXED);
	*(uint32_t *)b->data = a->id;
}

static void xs_drop(struct xs_arg *a, struct ao_buf *b, uint32_t to)
{
	uint32_t exp = a->id;

	if (*(uint32_t *)b->data != a->id ||
	    !__atomic_compare_exchange_n(&a->sh->held[ao_buf_index(b)], &exp,
					 to, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		__atomic_store_n(&a->sh->fail, 1, __ATOMIC_RELAXED);
	*(uint32_t *)b->data = to;
}

static void *xs_worker(void *arg)
{
	struct xs_arg *a = arg;
	struct xs_shared *sh = a->sh;
	unsigned int seed = a->id * 40503u;

	for (long i = 0; i < sh->iters; i++) {
		unsigned int r = (unsigned int)rand_r(&seed);
		int n = 1 + (int)(r & 3);

		for (int k = 0; k < n; k++) {
			struct ao_buf *b = ao_buf_get(sh->pool), *o;
			struct ao_buf **slot =
				&sh->slots[(r >> (4 + k * 4)) % XS_SLOTS];

			if (!b)
				continue;
			xs_take(a, b, 0);
			if (r & (0x10000u << k)) { /* a same-thread pair */
				xs_drop(a, b, 0);
				ao_buf_put(b);
				continue;
			}
			/* Hand it over; put what was there. */
			xs_drop(a, b, 0x80000000u);
			o = __atomic_exchange_n(slot, b, __ATOMIC_ACQ_REL);
			if (o) {
				xs_take(a, o, 0x80000000u);
				xs_drop(a, o, 0);
				ao_buf_put(o);
			}
		}
		if ((i & 31) == 0)
			sched_yield();
	}
	return NULL;
}

static void run_cache_stress(uint32_t count, uint32_t cache, int threads)
{
	struct xs_shared sh = { 0 };
	struct xs_arg a[16];
	struct ao_bufpool_stats st;

	sh.pool = mkpool_cached(count, cache);
	sh.held = calloc(count, sizeof(*sh.held));
	assert_non_null(sh.held);
	sh.iters = t_scaled(40000, 1000);
	for (int i = 0; i < threads; i++)
		a[i] = (struct xs_arg){ &sh, (uint32_t)i + 1 };
	t_watchdog_arm(120, "cache stress");
	t_run_threads(threads, xs_worker, a, sizeof(a[0]));
	t_watchdog_disarm();
	for (int i = 0; i < XS_SLOTS; i++) {
		if (sh.slots[i]) {
			sh.held[ao_buf_index(sh.slots[i])] = 0;
			ao_buf_put(sh.slots[i]);
		}
	}
	assert_int_equal(sh.fail, 0);
	ao_bufpool_stats(sh.pool, &st);
	assert_int_equal(st.in_use, 0);
	assert_int_equal(st.cache_gets, st.cache_puts);
	assert_int_equal(st.sum.nfree + st.cached, count);
	assert_true(st.remote_frees > 0);
	print_message("      (%u bufs, cache %u, %d threads: %llu gets, %llu "
		      "hits, %llu remote, %llu refills, %llu flushes, %llu "
		      "NULL)\n",
		      count, cache, threads, (unsigned long long)st.cache_gets,
		      (unsigned long long)st.cache_hits,
		      (unsigned long long)st.remote_frees,
		      (unsigned long long)st.cache_refills,
		      (unsigned long long)st.cache_flushes,
		      (unsigned long long)st.exhausted);
	destroy_clean(sh.pool);
	free(sh.held);
}

static void test_cache_stress(void **state)
{
	(void)state;
	run_cache_stress(1024, 8, 8);
	/* Small: the shards run dry and the remote lists are reclaimed. */
	run_cache_stress(256, 2, 12);
}

/* ---- reference counting across threads ---- */

struct ref_arg {
	struct ao_buf *b;
	long iters;
};

static void *ref_worker(void *arg)
{
	struct ref_arg *a = arg;

	for (long i = 0; i < a->iters; i++) {
		ao_buf_ref(a->b);
		ao_buf_put(a->b);
	}
	/* Drop the reference the main thread gave this thread. */
	ao_buf_put(a->b);
	return NULL;
}

static void *put_once(void *arg)
{
	ao_buf_put(*(struct ao_buf **)arg);
	return NULL;
}

static void test_refcount_threads(void **state)
{
	struct ao_bufpool *pool = mkpool(512, 16, 16, 0, 0);
	struct ao_bufpool_stats st;
	struct ref_arg a[4];
	struct ao_buf *b, *bs[4];
	long rounds = t_scaled(300, 30);

	(void)state;
	t_watchdog_arm(120, "refcount");
	/* Refs taken and dropped concurrently never free it early. */
	b = ao_buf_get(pool);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct ref_arg){ ao_buf_ref(b),
					 t_scaled(100000, 2000) };
	}
	assert_int_equal(b->refs, 5);
	t_run_threads(4, ref_worker, a, sizeof(a[0]));
	assert_int_equal(b->refs, 1);
	assert_int_equal(ao_bufpool_in_use(pool), 1);
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.sum.puts, 0);
	ao_buf_put(b);
	assert_int_equal(ao_bufpool_in_use(pool), 0);

	/* Broadcast: one buffer, four holders on four threads, dropped
	 * concurrently: it goes back exactly once per round. */
	for (long r = 0; r < rounds; r++) {
		b = ao_buf_get(pool);
		for (int i = 0; i < 4; i++)
			bs[i] = i ? ao_buf_ref(b) : b;
		t_run_threads(4, put_once, bs, sizeof(bs[0]));
		assert_int_equal(ao_bufpool_in_use(pool), 0);
	}
	t_watchdog_disarm();
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.sum.gets, 1 + rounds);
	assert_int_equal(st.sum.puts, 1 + rounds);
	destroy_clean(pool);
}

/* ---- exactly-once ownership under stress ---- */

#define OWN_HELD 8
#define OWN_SLOTS 4
#define OWN_TRANSIT 0x80000000u

struct own_shared {
	struct ao_bufpool *pool;
	uint32_t *owner; /* per buffer index: holder id, 0, or TRANSIT */
	struct ao_buf *slots[OWN_SLOTS]; /* hand-offs between threads */
	uint64_t deadline;
	long iters;
	int fail;
};

struct own_arg {
	struct own_shared *sh;
	uint32_t id;
	long gets, nulls, handoffs;
};

static void own_fail(struct own_shared *sh)
{
	__atomic_store_n(&sh->fail, 1, __ATOMIC_RELAXED);
}

static void own_claim(struct own_arg *a, struct ao_buf *b, uint32_t from)
{
	uint32_t *o = &a->sh->owner[ao_buf_index(b)];
	uint32_t exp = from;

	if (!__atomic_compare_exchange_n(o, &exp, a->id, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		own_fail(a->sh); /* someone else holds it */
	*(uint64_t *)b->data = a->id;
	*(uint64_t *)((char *)b->data + b->cap - 8) = a->id;
}

static void own_release(struct own_arg *a, struct ao_buf *b, uint32_t to)
{
	uint32_t *o = &a->sh->owner[ao_buf_index(b)];
	uint32_t exp = a->id;

	if (*(uint64_t *)b->data != a->id ||
	    *(uint64_t *)((char *)b->data + b->cap - 8) != a->id)
		own_fail(a->sh); /* someone wrote into our buffer */
	if (!__atomic_compare_exchange_n(o, &exp, to, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		own_fail(a->sh);
}

static void *own_worker(void *arg)
{
	struct own_arg *a = arg;
	struct own_shared *sh = a->sh;
	struct ao_buf *held[OWN_HELD];
	unsigned int seed = a->id * 7919u;
	int n = 0;

	for (long i = 0; i < sh->iters; i++) {
		unsigned int r = (unsigned int)rand_r(&seed);

		if ((i & 255) == 0 && t_now_ns() > sh->deadline)
			break;
		if (n < OWN_HELD && (n == 0 || (r & 3) < 2)) {
			struct ao_buf *b = ao_buf_get(sh->pool);

			if (!b) {
				if (errno != ENOBUFS)
					own_fail(sh);
				a->nulls++;
				continue;
			}
			a->gets++;
			own_claim(a, b, 0);
			held[n++] = b;
		} else if ((r & 12) == 0) {
			/* Hand one to whichever thread takes the slot; take
			 * over whatever was there (put it later, here). */
			struct ao_buf *b = held[--n], *o;
			struct ao_buf **slot = &sh->slots[(r >> 4) % OWN_SLOTS];

			own_release(a, b, OWN_TRANSIT);
			o = __atomic_exchange_n(slot, b, __ATOMIC_ACQ_REL);
			a->handoffs++;
			if (o) {
				own_claim(a, o, OWN_TRANSIT);
				held[n++] = o;
			}
		} else if (n) {
			struct ao_buf *b = held[--n];

			if (r & 16) {
				/* A short-lived extra reference. */
				ao_buf_ref(b);
				ao_buf_put(b);
			}
			own_release(a, b, 0);
			ao_buf_put(b);
		}
	}
	while (n) {
		struct ao_buf *b = held[--n];

		own_release(a, b, 0);
		ao_buf_put(b);
	}
	return NULL;
}

static void run_ownership(uint32_t count, uint32_t shards, unsigned int flags,
			  int threads, uint32_t cache)
{
	struct ao_bufpool_params p = { .buf_size = 64,
				       .count = count,
				       .shards = shards,
				       .flags = flags,
				       .cache = cache };
	struct own_shared sh = { 0 };
	struct own_arg a[8];
	struct ao_bufpool_stats st;
	long gets = 0, nulls = 0, handoffs = 0;

	assert_true(threads <= 8);
	assert_int_equal(ao_bufpool_create(&sh.pool, &p), 0);
	sh.owner = calloc(count, sizeof(*sh.owner));
	assert_non_null(sh.owner);
	sh.iters = t_scaled(300000, 5000);
	sh.deadline = t_now_ns() + (uint64_t)t_scaled(2000, 400) * 1000000ull;
	for (int i = 0; i < threads; i++)
		a[i] = (struct own_arg){ &sh, (uint32_t)i + 1, 0, 0, 0 };
	t_watchdog_arm(120, "ownership stress");
	t_run_threads(threads, own_worker, a, sizeof(a[0]));
	t_watchdog_disarm();
	for (int i = 0; i < OWN_SLOTS; i++) {
		if (sh.slots[i]) {
			if (sh.owner[ao_buf_index(sh.slots[i])] != OWN_TRANSIT)
				sh.fail = 1;
			sh.owner[ao_buf_index(sh.slots[i])] = 0;
			ao_buf_put(sh.slots[i]);
		}
	}
	for (int i = 0; i < threads; i++) {
		gets += a[i].gets;
		nulls += a[i].nulls;
		handoffs += a[i].handoffs;
	}
	assert_int_equal(sh.fail, 0);
	for (uint32_t i = 0; i < count; i++)
		assert_int_equal(sh.owner[i], 0);
	ao_bufpool_stats(sh.pool, &st);
	if (cache) {
		/* Every thread had a cache: every get and put went through
		 * one; the workers' exits gave theirs back. */
		assert_int_equal(st.cache_gets, (uint64_t)gets);
		assert_int_equal(st.cache_puts, (uint64_t)gets);
		assert_int_equal(st.sum.nfree + st.cached, count);
	} else {
		assert_int_equal(st.sum.gets, (uint64_t)gets);
		assert_int_equal(st.sum.puts, (uint64_t)gets);
		assert_int_equal(st.sum.nfree, count);
	}
	assert_int_equal(st.exhausted, (uint64_t)nulls);
	assert_true(gets > 0);
	print_message("      (%u bufs, %u shards%s, cache %u, %d threads: %ld "
		      "gets, %ld hand-offs, %llu steals, %llu spills, %llu "
		      "remote, %ld NULL)\n",
		      count, shards,
		      flags & AO_BUFPOOL_RETURN_ORIGIN ? " origin" : "", cache,
		      threads, gets, handoffs,
		      (unsigned long long)st.sum.steals,
		      (unsigned long long)st.sum.spills,
		      (unsigned long long)st.remote_frees, nulls);
	destroy_clean(sh.pool);
	free(sh.owner);
}

static void test_ownership_stress(void **state)
{
	(void)state;
	/* 4 threads hold up to 8 each plus 4 in slots: 36 > 32, so the pool
	 * runs dry now and then as well. */
	run_ownership(32, 16, 0, 4, 0);
	run_ownership(32, 16, AO_BUFPOOL_RETURN_ORIGIN, 4, 0);
	run_ownership(32, 1, 0, 4, 0);
	run_ownership(256, 16, AO_BUFPOOL_THREAD_HOME, 8, 0);
	/* Thread caches: the same hand-offs are cross-thread puts that go
	 * home to the getter's cache (2 per cache: batches of one). */
	run_ownership(512, 16, 0, 8, 4);
	run_ownership(256, 16, AO_BUFPOOL_RETURN_ORIGIN, 8, 2);
	run_ownership(128, 4, 0, 8, 0);
}

/* ---- statistics, lock phases, leak report ---- */

static void test_stats_lock_phases(void **state)
{
	struct ao_bufpool *pool = mkpool(64, 16, 4, 0, 0);
	struct ao_bufpool_stats st;
	struct ao_bufpool_shard_stats ss;
	uint64_t fast = 0;

	(void)state;
	pin_here();
	for (int i = 0; i < 100; i++)
		ao_buf_put(ao_buf_get(pool));
	ao_bufpool_stats(pool, &st);
	assert_int_equal(st.sum.gets, 100);
	assert_int_equal(st.sum.puts, 100);
	assert_int_equal(st.sum.misses, 0);
	for (uint32_t s = 0; s < 4; s++) {
		assert_int_equal(ao_bufpool_shard_stats(pool, s, &ss), 0);
		fast += ss.lock.fast;
	}
#if AO_CONFIG_LOCK_STATS
	/* One uncontended acquisition per get and per put. */
	assert_int_equal(fast, 200);
	assert_int_equal(st.sum.lock.fast, 200);
	assert_int_equal(st.sum.lock.phase1 + st.sum.lock.phase2 +
				 st.sum.lock.phase3,
			 0);
#else
	assert_int_equal(fast, 0);
#endif
	unpin();
	destroy_clean(pool);
}

static void test_leak_report(void **state)
{
	struct ao_bufpool *pool = mkpool(64, 16, 4, 0, 0);
	struct ao_buf *b[3];
	char *text = NULL, want[64];
	size_t len = 0;
	FILE *f;

	(void)state;
	for (int i = 0; i < 3; i++)
		b[i] = ao_buf_get(pool);
	b[1]->len = 42;
	f = open_memstream(&text, &len);
	assert_non_null(f);
	assert_int_equal(ao_bufpool_report(pool, f), 3);
	fclose(f);
	assert_non_null(strstr(text, "3 in use"));
	assert_non_null(strstr(text, "leak: 3 buffers still out"));
	for (int i = 0; i < 3; i++) {
		snprintf(want, sizeof(want), "buffer %u (%p): refs 1 len %u",
			 ao_buf_index(b[i]), b[i]->data, b[i]->len);
		assert_non_null(strstr(text, want));
	}
	free(text);
	/* Destroy refuses, prints the report to stderr, keeps the pool. */
	assert_int_equal(ao_bufpool_destroy(pool), -EBUSY);
	assert_int_equal(ao_bufpool_in_use(pool), 3);
	for (int i = 0; i < 3; i++)
		ao_buf_put(b[i]);
	f = open_memstream(&text, &len);
	assert_int_equal(ao_bufpool_report(pool, f), 0);
	fclose(f);
	assert_null(strstr(text, "leak"));
	free(text);
	destroy_clean(pool);
}

/* ---- misuse detection (death tests) ---- */

/* Run fn in a forked child; it must die (abort or sanitizer exit) with
 * expect in its stderr. */
static void expect_death(void (*fn)(void), const char *expect)
{
	char out[4096];
	size_t n = 0;
	ssize_t r;
	int pfd[2], status;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = { 0, 0 };

		setrlimit(RLIMIT_CORE, &rl);
		signal(SIGABRT, SIG_DFL);
		dup2(pfd[1], 2);
		close(pfd[0]);
		fn();
		_exit(0); /* survived: the misuse went unnoticed */
	}
	close(pfd[1]);
	while (n < sizeof(out) - 1 &&
	       (r = read(pfd[0], out + n, sizeof(out) - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = 0;
	close(pfd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		fail_msg("misuse not detected (expected \"%s\")", expect);
	if (!strstr(out, expect))
		fail_msg("child said \"%s\", expected \"%s\"", out, expect);
}

static void do_double_put(void)
{
	struct ao_bufpool *pool = mkpool(64, 4, 1, 0, 0);
	struct ao_buf *b = ao_buf_get(pool);

	ao_buf_put(b);
	ao_buf_put(b);
}

static void do_double_put_cached(void)
{
	struct ao_bufpool *pool = mkpool_cached(1024, 8);
	struct ao_buf *b = ao_buf_get(pool);

	ao_buf_put(b);
	ao_buf_put(b);
}

static void do_write_after_put_cached(void)
{
	struct ao_bufpool *pool = mkpool_cached(1024, 8);
	struct ao_buf *b = ao_buf_get(pool);
	volatile char *d = b->data;

	ao_buf_put(b); /* onto this thread's cache */
	d[10] = 1; /* ASan stops here; the debug build at the next get */
	b = ao_buf_get(pool); /* the same buffer, off the cache */
	(void)b;
}

static void do_foreign_put(void)
{
	struct ao_buf fake;

	memset(&fake, 0, sizeof(fake));
	fake.refs = 1;
	ao_buf_put(&fake);
}

static void do_data_put(void)
{
	struct ao_bufpool *pool = mkpool(64, 4, 1, 0, 0);
	struct ao_buf *b = ao_buf_get(pool);

	/* The data pointer is not the descriptor. */
	ao_buf_put((struct ao_buf *)b->data);
}

static void do_ref_after_put(void)
{
	struct ao_bufpool *pool = mkpool(64, 4, 1, 0, 0);
	struct ao_buf *b = ao_buf_get(pool);

	ao_buf_put(b);
	ao_buf_ref(b);
}

static void do_write_after_put(void)
{
	struct ao_bufpool *pool = mkpool(64, 1, 1, 0, 0);
	struct ao_buf *b = ao_buf_get(pool);
	volatile char *d = b->data;

	ao_buf_put(b);
	d[10] = 1; /* ASan stops here; the debug build at the next get */
	b = ao_buf_get(pool);
	(void)b;
}

static void test_misuse_debug(void **state)
{
	(void)state;
	if (!AO_CONFIG_DEBUG)
		skip(); /* only DEBUG=1 builds check */
	expect_death(do_double_put, "already free (double put");
	expect_death(do_double_put_cached, "already free (double put");
	expect_death(do_foreign_put, "foreign pointer");
	expect_death(do_data_put, "foreign pointer");
	expect_death(do_ref_after_put, "use after the last put");
}

static void test_use_after_put(void **state)
{
	(void)state;
	if (T_ASAN) {
		expect_death(do_write_after_put, "use-after-poison");
		expect_death(do_write_after_put_cached, "use-after-poison");
	} else if (AO_CONFIG_DEBUG) {
		expect_death(do_write_after_put, "written after its last put");
		expect_death(do_write_after_put_cached,
			     "written after its last put");
	} else
		skip(); /* needs DEBUG=1 or SANITIZE=address */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_params),
		cmocka_unit_test(test_huge_pages),
		cmocka_unit_test(test_get_put_ref),
		cmocka_unit_test(test_exhaustion_recovery),
		cmocka_unit_test(test_steal_when_home_empty),
		cmocka_unit_test(test_put_policy_local),
		cmocka_unit_test(test_put_policy_origin),
		cmocka_unit_test(test_thread_home),
		cmocka_unit_test(test_wait_timeout),
		cmocka_unit_test(test_wait_woken_by_put),
		cmocka_unit_test(test_wait_stress),
		cmocka_unit_test(test_cache_params),
		cmocka_unit_test(test_cache_hit),
		cmocka_unit_test(test_cache_batches),
		cmocka_unit_test(test_cache_remote_home),
		cmocka_unit_test(test_cache_thread_exit),
		cmocka_unit_test(test_cache_bound),
		cmocka_unit_test(test_cache_reclaim_remote),
		cmocka_unit_test(test_cache_wait_woken),
		cmocka_unit_test(test_cache_stress),
		cmocka_unit_test(test_refcount_threads),
		cmocka_unit_test(test_ownership_stress),
		cmocka_unit_test(test_stats_lock_phases),
		cmocka_unit_test(test_leak_report),
		cmocka_unit_test(test_misuse_debug),
		cmocka_unit_test(test_use_after_put),
	};

	ao_clock_calibrate();
	return cmocka_run_group_tests_name("bufpool", tests, NULL, NULL);
}
