// SPDX-License-Identifier: MIT
/*
 * Executors: configuration and lifecycle, every item accepted runs exactly
 * once (both disciplines, bounded and unbounded, external and worker
 * producers), the block and fail policies, a worker's blocking submit into
 * a full pool, shutdown refusing and destroy running the backlog, drain,
 * idle workers burning no CPU, thread names, pinning, statistics.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <aorta/arch/processor.h>
#include <aorta/clock.h>
#include <aorta/core/cpu.h>
#include <aorta/core/exec.h>
#include "helpers.h"

/* ---- a counting item ---- */

struct cnt {
	struct ao_work work;
	int *ran;
};

static void cnt_fn(struct ao_work *w)
{
	struct cnt *c = container_of(w, struct cnt, work);

	__atomic_fetch_add(c->ran, 1, __ATOMIC_RELAXED);
}

/* ---- configuration and lifecycle ---- */

static void test_create_args(void **state)
{
	struct ao_exec_config cfg = AO_EXEC_CONFIG_INIT;
	struct ao_exec *ex = (void *)1;

	(void)state;
	assert_int_equal(ao_exec_create(&cfg, NULL), -EINVAL);
	cfg.kind = 7;
	assert_int_equal(ao_exec_create(&cfg, &ex), -EINVAL);
	assert_null(ex);
	cfg.kind = AO_EXEC_STEAL;
	cfg.policy = 9;
	assert_int_equal(ao_exec_create(&cfg, &ex), -EINVAL);
	cfg.policy = AO_EXEC_FAIL;
	cfg.workers = AO_EXEC_MAX_WORKERS + 1;
	assert_int_equal(ao_exec_create(&cfg, &ex), -EINVAL);
	cfg.workers = 1;
	cfg.capacity = AO_EXEC_CAPACITY_MAX + 1;
	assert_int_equal(ao_exec_create(&cfg, &ex), -EINVAL);
	assert_null(ex);
	/* The largest capacity works: a try_submit fits, stats count it. */
	cfg.capacity = AO_EXEC_CAPACITY_MAX;
	assert_int_equal(ao_exec_create(&cfg, &ex), 0);
	{
		struct cnt c;
		int ran = 0;
		struct ao_exec_stats st;

		ao_work_init(&c.work, cnt_fn);
		c.ran = &ran;
		assert_int_equal(ao_exec_try_submit(ex, &c.work), 0);
		assert_int_equal(ao_exec_drain(ex), 0);
		assert_int_equal(ran, 1);
		assert_int_equal(ao_exec_stats(ex, &st), 0);
		assert_int_equal(st.submitted, 1);
		assert_int_equal(st.queued, 0);
	}
	assert_int_equal(ao_exec_destroy(ex), 0);
	assert_int_equal(ao_exec_destroy(NULL), -EINVAL);
	assert_int_equal(ao_exec_drain(NULL), -EINVAL);
	assert_int_equal(ao_exec_submit(NULL, NULL), -EINVAL);
}

static void test_create_default(void **state)
{
	struct ao_exec_config cfg;
	struct ao_exec *ex;
	struct ao_work w = AO_WORK_INIT(NULL);

	(void)state;
	/* NULL config: the defaults, one worker per usable CPU. */
	assert_int_equal(ao_exec_create(NULL, &ex), 0);
	assert_int_equal(ao_exec_workers(ex), ao_cpu_count());
	ao_exec_get_config(ex, &cfg);
	assert_int_equal(cfg.kind, AO_EXEC_SHARED);
	assert_int_equal(cfg.workers, ao_cpu_count());
	assert_int_equal(cfg.capacity, 0);
	assert_int_equal(cfg.spin_ns, AO_EXEC_DEFAULT_SPIN_NS);
	assert_string_equal(cfg.name, AO_EXEC_NAME_DEFAULT);
	assert_false(ao_exec_stopping(ex));
	/* An item with no function is refused. */
	assert_int_equal(ao_exec_submit(ex, &w), -EINVAL);
	assert_int_equal(ao_exec_submit(ex, NULL), -EINVAL);
	/* Outside the pool there is no worker. */
	assert_null(ao_exec_current());
	assert_int_equal(ao_exec_worker_index(ex), -1);
	assert_false(ao_exec_run_one(ex));
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- thread names, current worker, pinning ---- */

struct probe {
	struct ao_work work;
	struct ao_exec *ex;
	char name[16];
	int index;
	int ncpus;
	struct ao_exec *cur;
	int drain_rc, destroy_rc;
	bool run_one;
	int done;
};

static void probe_fn(struct ao_work *w)
{
	struct probe *p = container_of(w, struct probe, work);
	cpu_set_t set;

	pthread_getname_np(pthread_self(), p->name, sizeof(p->name));
	p->index = ao_exec_worker_index(p->ex);
	p->cur = ao_exec_current();
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		p->ncpus = CPU_COUNT(&set);
	p->drain_rc = ao_exec_drain(p->ex);
	p->destroy_rc = ao_exec_destroy(p->ex);
	p->run_one = ao_exec_run_one(p->ex);
	__atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
}

static void run_probe(struct ao_exec *ex, struct probe *p)
{
	memset(p, 0, sizeof(*p));
	ao_work_init(&p->work, probe_fn);
	p->ex = ex;
	assert_int_equal(ao_exec_submit(ex, &p->work), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(__atomic_load_n(&p->done, __ATOMIC_ACQUIRE), 1);
}

static void test_worker_identity(void **state)
{
	struct ao_exec_config cfg = AO_EXEC_CONFIG_INIT;
	struct ao_exec *ex;
	struct probe p;

	(void)state;
	cfg.workers = 1;
	assert_int_equal(ao_exec_create(&cfg, &ex), 0);
	run_probe(ex, &p);
	assert_string_equal(p.name, "ao-w0");
	assert_int_equal(p.index, 0);
	assert_ptr_equal(p.cur, ex);
	/* drain and destroy from a worker would wait for themselves. */
	assert_int_equal(p.drain_rc, -EDEADLK);
	assert_int_equal(p.destroy_rc, -EDEADLK);
	assert_false(p.run_one);
	assert_int_equal(ao_exec_destroy(ex), 0);

	cfg.name = "game-logic-";
	cfg.kind = AO_EXEC_STEAL;
	cfg.workers = 1;
	assert_int_equal(ao_exec_create(&cfg, &ex), 0);
	run_probe(ex, &p);
	assert_string_equal(p.name, "game-logic-0");
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_pinning(void **state)
{
	struct ao_exec_config cfg = AO_EXEC_CONFIG_INIT;
	struct ao_exec *ex;
	struct probe p;

	(void)state;
	cfg.workers = 1;
	cfg.pin = true;
	assert_int_equal(ao_exec_create(&cfg, &ex), 0);
	run_probe(ex, &p);
	assert_int_equal(p.ncpus, 1);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- exactly once, under stress ---- */

struct xo_item {
	struct ao_work work;
	struct xo_ctx *ctx;
	uint32_t idx;
	uint32_t children; /* how many to submit from the worker */
};

struct xo_ctx {
	struct ao_exec *ex;
	struct xo_item *items;
	int *ran; /* one flag per item */
	int *accepted; /* one flag per item */
	long n_roots; /* per producer */
	int producers;
	uint32_t fanout;
	bool try;
	long refused;
	long next_child; /* allocator of child slots */
	long n_items;
};

static void xo_fn(struct ao_work *w);

static void xo_submit(struct xo_ctx *c, struct xo_item *it, bool in_worker)
{
	int r;

	ao_work_init(&it->work, xo_fn);
	r = c->try ? ao_exec_try_submit(c->ex, &it->work) :
		     ao_exec_submit(c->ex, &it->work);
	if (r == 0) {
		/* Marked after the submit returned: the item may already
		 * have run, so the check is done at the end. */
		__atomic_store_n(&c->accepted[it->idx], 1, __ATOMIC_RELAXED);
	} else {
		assert_int_equal(r, -EAGAIN);
		(void)in_worker;
		__atomic_fetch_add(&c->refused, 1, __ATOMIC_RELAXED);
	}
}

static void xo_fn(struct ao_work *w)
{
	struct xo_item *it = container_of(w, struct xo_item, work);
	struct xo_ctx *c = it->ctx;
	uint32_t kids = it->children;

	__atomic_fetch_add(&c->ran[it->idx], 1, __ATOMIC_RELAXED);
	for (uint32_t k = 0; k < kids; k++) {
		long slot =
			__atomic_fetch_add(&c->next_child, 1, __ATOMIC_RELAXED);
		struct xo_item *ch;

		assert_true(slot < c->n_items);
		ch = &c->items[slot];
		ch->ctx = c;
		ch->idx = (uint32_t)slot;
		ch->children = 0;
		xo_submit(c, ch, true);
	}
}

struct xo_prod {
	struct xo_ctx *c;
	int id;
};

static void *xo_producer(void *arg)
{
	struct xo_prod *p = arg;
	struct xo_ctx *c = p->c;

	for (long i = 0; i < c->n_roots; i++) {
		long idx = p->id * c->n_roots + i;
		struct xo_item *it = &c->items[idx];

		it->ctx = c;
		it->idx = (uint32_t)idx;
		it->children = c->fanout;
		xo_submit(c, it, false);
	}
	return NULL;
}

static void run_exactly_once(enum ao_exec_kind kind, unsigned int workers,
			     size_t capacity, enum ao_exec_policy policy,
			     bool try)
{
	struct xo_ctx c;
	struct xo_prod prods[4];
	struct ao_exec_stats st;
	long accepted = 0;

	memset(&c, 0, sizeof(c));
	c.ex = t_exec_create(kind, workers, capacity, policy);
	c.producers = 4;
	c.fanout = 3;
	c.try = try;
	c.n_roots = t_scaled(20000, 500);
	c.n_items = c.producers * c.n_roots * (1 + c.fanout);
	c.next_child = c.producers * c.n_roots;
	c.items = calloc((size_t)c.n_items, sizeof(*c.items));
	c.ran = calloc((size_t)c.n_items, sizeof(int));
	c.accepted = calloc((size_t)c.n_items, sizeof(int));
	assert_non_null(c.items);
	assert_non_null(c.ran);
	assert_non_null(c.accepted);
	for (int i = 0; i < c.producers; i++)
		prods[i] = (struct xo_prod){ &c, i };
	t_watchdog_arm(120, "exactly-once stress");
	t_watchdog_watch(c.ex);
	t_run_threads(c.producers, xo_producer, prods, sizeof(prods[0]));
	assert_int_equal(ao_exec_drain(c.ex), 0);
	t_watchdog_disarm();
	for (long i = 0; i < c.n_items; i++) {
		if (i >= c.next_child)
			break;
		/* Accepted: ran exactly once.  Refused: never ran. */
		assert_int_equal(c.ran[i], c.accepted[i]);
		accepted += c.accepted[i];
	}
	assert_int_equal(ao_exec_stats(c.ex, &st), 0);
	assert_int_equal(st.executed, (uint64_t)accepted);
	assert_int_equal(st.submitted, (uint64_t)accepted);
	assert_int_equal(st.rejected, (uint64_t)c.refused);
	assert_int_equal(st.queued, 0);
	if (policy == AO_EXEC_BLOCK && !try)
		assert_int_equal(c.refused, 0);
	assert_int_equal(ao_exec_destroy(c.ex), 0);
	free(c.items);
	free(c.ran);
	free(c.accepted);
}

static void test_xo_shared_unbounded(void **state)
{
	(void)state;
	run_exactly_once(AO_EXEC_SHARED, 2, 0, AO_EXEC_BLOCK, false);
	run_exactly_once(AO_EXEC_SHARED, 4, 0, AO_EXEC_BLOCK, false);
}

static void test_xo_shared_bounded_block(void **state)
{
	(void)state;
	run_exactly_once(AO_EXEC_SHARED, 2, 64, AO_EXEC_BLOCK, false);
	run_exactly_once(AO_EXEC_SHARED, 3, 1, AO_EXEC_BLOCK, false);
}

static void test_xo_shared_bounded_fail(void **state)
{
	(void)state;
	run_exactly_once(AO_EXEC_SHARED, 2, 64, AO_EXEC_FAIL, false);
	run_exactly_once(AO_EXEC_SHARED, 2, 64, AO_EXEC_BLOCK, true);
}

static void test_xo_steal_unbounded(void **state)
{
	(void)state;
	run_exactly_once(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK, false);
	run_exactly_once(AO_EXEC_STEAL, 4, 0, AO_EXEC_BLOCK, false);
	/* Workers + producers > CPUs on any machine: the yielding spins. */
	run_exactly_once(AO_EXEC_STEAL, ao_cpu_count(), 0, AO_EXEC_BLOCK,
			 false);
}

static void test_xo_steal_bounded_block(void **state)
{
	(void)state;
	run_exactly_once(AO_EXEC_STEAL, 2, 64, AO_EXEC_BLOCK, false);
	run_exactly_once(AO_EXEC_STEAL, ao_cpu_count(), 64, AO_EXEC_BLOCK,
			 false);
	run_exactly_once(AO_EXEC_STEAL, 3, 1, AO_EXEC_BLOCK, false);
}

static void test_xo_steal_bounded_fail(void **state)
{
	(void)state;
	run_exactly_once(AO_EXEC_STEAL, 2, 64, AO_EXEC_FAIL, false);
	run_exactly_once(AO_EXEC_STEAL, 2, 64, AO_EXEC_BLOCK, true);
}

/* ---- deque overflow: a worker spawning far more than its ring holds ---- */

struct spawner {
	struct ao_work work;
	struct cnt *kids;
	long n;
};

static void spawner_fn(struct ao_work *w)
{
	struct spawner *s = container_of(w, struct spawner, work);

	for (long i = 0; i < s->n; i++)
		assert_int_equal(
			ao_exec_submit(ao_exec_current(), &s->kids[i].work), 0);
}

static void run_spawn_many(enum ao_exec_kind kind, unsigned int workers)
{
	struct ao_exec *ex = t_exec_create(kind, workers, 0, AO_EXEC_BLOCK);
	long n = t_scaled(100000, 5000);
	struct cnt *kids = calloc((size_t)n, sizeof(*kids));
	int *ran = calloc((size_t)n, sizeof(int));
	struct spawner s;
	struct ao_exec_stats st;

	assert_non_null(kids);
	assert_non_null(ran);
	for (long i = 0; i < n; i++) {
		ao_work_init(&kids[i].work, cnt_fn);
		kids[i].ran = &ran[i];
	}
	ao_work_init(&s.work, spawner_fn);
	s.kids = kids;
	s.n = n;
	t_watchdog_arm(60, "spawn many");
	t_watchdog_watch(ex);
	assert_int_equal(ao_exec_submit(ex, &s.work), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (long i = 0; i < n; i++)
		assert_int_equal(ran[i], 1);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	assert_int_equal(st.executed, (uint64_t)n + 1);
	if (kind == AO_EXEC_STEAL)
		assert_true(st.overflowed > 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	free(kids);
	free(ran);
}

static void test_spawn_overflow(void **state)
{
	(void)state;
	run_spawn_many(AO_EXEC_STEAL, 1);
	run_spawn_many(AO_EXEC_STEAL, 2);
	run_spawn_many(AO_EXEC_SHARED, 2);
}

/* ---- a gate: an item that holds a worker until opened ---- */

struct gate {
	struct ao_work work;
	int open;
	int entered;
	struct ao_exec *ex; /* if set: also opens when shutdown starts */
};

static void gate_fn(struct ao_work *w)
{
	struct gate *g = container_of(w, struct gate, work);

	__atomic_store_n(&g->entered, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE) &&
	       !(g->ex && ao_exec_stopping(g->ex)))
		t_sleep_ns(100000);
}

static void gate_init(struct gate *g, struct ao_exec *ex_opens)
{
	memset(g, 0, sizeof(*g));
	ao_work_init(&g->work, gate_fn);
	g->ex = ex_opens;
}

static void gate_wait_entered(struct gate *g)
{
	while (!__atomic_load_n(&g->entered, __ATOMIC_ACQUIRE))
		t_sleep_ns(100000);
}

static void gate_open(struct gate *g)
{
	__atomic_store_n(&g->open, 1, __ATOMIC_RELEASE);
}

/* ---- fail policy and try_submit ---- */

static void run_full(enum ao_exec_kind kind, enum ao_exec_policy policy)
{
	struct ao_exec *ex = t_exec_create(kind, 1, 4, policy);
	struct gate g;
	struct cnt c[6];
	int ran[6] = { 0 };
	struct ao_exec_stats st;

	t_watchdog_arm(30, "fail policy");
	gate_init(&g, NULL);
	assert_int_equal(ao_exec_submit(ex, &g.work), 0);
	gate_wait_entered(&g);
	for (int i = 0; i < 6; i++) {
		ao_work_init(&c[i].work, cnt_fn);
		c[i].ran = &ran[i];
	}
	/* The gate has started: four slots are free. */
	for (int i = 0; i < 4; i++)
		assert_int_equal(ao_exec_try_submit(ex, &c[i].work), 0);
	assert_int_equal(ao_exec_try_submit(ex, &c[4].work), -EAGAIN);
	if (policy == AO_EXEC_FAIL)
		assert_int_equal(ao_exec_submit(ex, &c[5].work), -EAGAIN);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	assert_int_equal(st.queued, 4);
	gate_open(&g);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (int i = 0; i < 4; i++)
		assert_int_equal(ran[i], 1);
	assert_int_equal(ran[4], 0);
	assert_int_equal(ran[5], 0);
	/* Room again. */
	assert_int_equal(ao_exec_try_submit(ex, &c[4].work), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ran[4], 1);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	assert_int_equal(st.rejected, policy == AO_EXEC_FAIL ? 2 : 1);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_fail_policy(void **state)
{
	(void)state;
	run_full(AO_EXEC_SHARED, AO_EXEC_FAIL);
	run_full(AO_EXEC_STEAL, AO_EXEC_FAIL);
}

static void test_try_submit_never_blocks(void **state)
{
	(void)state;
	run_full(AO_EXEC_SHARED, AO_EXEC_BLOCK);
	run_full(AO_EXEC_STEAL, AO_EXEC_BLOCK);
}

/* ---- block policy: really blocks, then resumes ---- */

struct blocker {
	struct ao_exec *ex;
	struct cnt *items;
	int n;
	int returned; /* submits that came back */
	int rc[8];
};

static void *blocker_thread(void *arg)
{
	struct blocker *b = arg;

	for (int i = 0; i < b->n; i++) {
		b->rc[i] = ao_exec_submit(b->ex, &b->items[i].work);
		__atomic_fetch_add(&b->returned, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void run_block_policy(enum ao_exec_kind kind)
{
	struct ao_exec *ex = t_exec_create(kind, 1, 2, AO_EXEC_BLOCK);
	struct gate g;
	struct cnt c[5];
	int ran[5] = { 0 };
	struct blocker b = { ex, c, 5, 0, { 0 } };
	pthread_t t;

	t_watchdog_arm(30, "block policy");
	gate_init(&g, NULL);
	assert_int_equal(ao_exec_submit(ex, &g.work), 0);
	gate_wait_entered(&g);
	for (int i = 0; i < 5; i++) {
		ao_work_init(&c[i].work, cnt_fn);
		c[i].ran = &ran[i];
	}
	assert_int_equal(pthread_create(&t, NULL, blocker_thread, &b), 0);
	/* Two fit; the third submit must be waiting, for as long as the
	 * gate is shut. */
	while (__atomic_load_n(&b.returned, __ATOMIC_ACQUIRE) < 2)
		t_sleep_ns(100000);
	t_sleep_ns(50000000);
	assert_int_equal(__atomic_load_n(&b.returned, __ATOMIC_ACQUIRE), 2);
	gate_open(&g);
	pthread_join(t, NULL);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (int i = 0; i < 5; i++) {
		assert_int_equal(b.rc[i], 0);
		assert_int_equal(ran[i], 1);
	}
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_block_policy(void **state)
{
	(void)state;
	run_block_policy(AO_EXEC_SHARED);
	run_block_policy(AO_EXEC_STEAL);
}

/* ---- a worker's blocking submit into a full pool does not deadlock ---- */

struct tree {
	struct ao_work work;
	int depth;
};

static struct tree *tree_pool;
static long tree_next, tree_count;

static void tree_fn(struct ao_work *w)
{
	struct tree *t = container_of(w, struct tree, work);

	__atomic_fetch_add(&tree_count, 1, __ATOMIC_RELAXED);
	if (t->depth <= 0)
		return;
	for (int i = 0; i < 2; i++) {
		long k = __atomic_fetch_add(&tree_next, 1, __ATOMIC_RELAXED);
		struct tree *kid = &tree_pool[k];

		ao_work_init(&kid->work, tree_fn);
		kid->depth = t->depth - 1;
		/* Every worker may be here at once with the queue full. */
		assert_int_equal(ao_exec_submit(ao_exec_current(), &kid->work),
				 0);
	}
}

static void run_nested_full(enum ao_exec_kind kind, unsigned int workers,
			    size_t capacity)
{
	struct ao_exec *ex =
		t_exec_create(kind, workers, capacity, AO_EXEC_BLOCK);
	int depth = t_scale() < 1 ? 10 : 13;
	long n = (1l << (depth + 1)) - 1;
	struct ao_exec_stats st;

	tree_pool = calloc((size_t)n, sizeof(*tree_pool));
	assert_non_null(tree_pool);
	tree_next = 1;
	tree_count = 0;
	ao_work_init(&tree_pool[0].work, tree_fn);
	tree_pool[0].depth = depth;
	t_watchdog_arm(60, "nested submits into a full pool");
	t_watchdog_watch(ex);
	assert_int_equal(ao_exec_submit(ex, &tree_pool[0].work), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(tree_count, n);
	assert_int_equal(tree_next, n);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	assert_int_equal(st.executed, (uint64_t)n);
	if (capacity)
		assert_true(st.inlined > 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	free(tree_pool);
}

static void test_worker_submit_full_no_deadlock(void **state)
{
	(void)state;
	run_nested_full(AO_EXEC_SHARED, 1, 1);
	run_nested_full(AO_EXEC_SHARED, 2, 4);
	run_nested_full(AO_EXEC_STEAL, 1, 1);
	run_nested_full(AO_EXEC_STEAL, 2, 4);
	run_nested_full(AO_EXEC_STEAL, 2, 0);
}

/*
 * Deeper than AO_EXEC_INLINE_MAX: a chain of items, each submitting the
 * next into a full pool from its worker (1 worker, capacity 1, the slot
 * held by a filler the head submits first).  The first AO_EXEC_INLINE_MAX
 * run inline, nested; the next is queued beyond the bound (a borrowed
 * slot), and so on.  Every item runs once, and afterwards the bound is
 * exact again: every borrowed slot was paid back, none twice.
 */
#define CHAIN_LEN ((int)(3 * AO_EXEC_INLINE_MAX + 7))

static struct cnt chain_filler;
static int chain_filler_ran, chain_ran[CHAIN_LEN];
static struct ao_work chain_items[CHAIN_LEN];

static void chain_fn(struct ao_work *w)
{
	long i = w - chain_items;
	struct ao_exec *ex = ao_exec_current();

	chain_ran[i]++;
	if (i == 0) {
		ao_work_init(&chain_filler.work, cnt_fn);
		chain_filler.ran = &chain_filler_ran;
		assert_int_equal(ao_exec_submit(ex, &chain_filler.work), 0);
	}
	if (i + 1 < CHAIN_LEN) {
		ao_work_init(&chain_items[i + 1], chain_fn);
		assert_int_equal(ao_exec_submit(ex, &chain_items[i + 1]), 0);
	}
}

static void run_chain_beyond_inline(enum ao_exec_kind kind)
{
	struct ao_exec *ex = t_exec_create(kind, 1, 1, AO_EXEC_BLOCK);
	struct ao_exec_stats st;
	struct gate g;
	struct cnt c[2];
	int ran[2] = { 0 };

	memset(chain_ran, 0, sizeof(chain_ran));
	chain_filler_ran = 0;
	t_watchdog_arm(30, "a chain deeper than the inline bound");
	ao_work_init(&chain_items[0], chain_fn);
	assert_int_equal(ao_exec_submit(ex, &chain_items[0]), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	for (int i = 0; i < CHAIN_LEN; i++)
		assert_int_equal(chain_ran[i], 1);
	assert_int_equal(chain_filler_ran, 1);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	assert_true(st.inlined >= AO_EXEC_INLINE_MAX);
	assert_int_equal(st.executed, CHAIN_LEN + 1);
	assert_int_equal(st.queued, 0);
	/* The bound is exact again: with the worker held by a gate, one
	 * item fits and the next is refused. */
	gate_init(&g, NULL);
	assert_int_equal(ao_exec_submit(ex, &g.work), 0);
	gate_wait_entered(&g);
	for (int i = 0; i < 2; i++) {
		ao_work_init(&c[i].work, cnt_fn);
		c[i].ran = &ran[i];
	}
	assert_int_equal(ao_exec_try_submit(ex, &c[0].work), 0);
	assert_int_equal(ao_exec_try_submit(ex, &c[1].work), -EAGAIN);
	gate_open(&g);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(ran[0], 1);
	assert_int_equal(ran[1], 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_inline_depth_bound(void **state)
{
	(void)state;
	run_chain_beyond_inline(AO_EXEC_SHARED);
	run_chain_beyond_inline(AO_EXEC_STEAL);
}

/* ---- shutdown: refused, never lost ---- */

struct late {
	struct ao_work work;
	struct ao_exec *ex;
	struct cnt child;
	int child_ran;
	int rc;
};

static void late_fn(struct ao_work *w)
{
	struct late *l = container_of(w, struct late, work);

	/* Once we see shutdown, a submit from the worker sees it too. */
	while (!ao_exec_stopping(l->ex))
		t_sleep_ns(100000);
	ao_work_init(&l->child.work, cnt_fn);
	l->child.ran = &l->child_ran;
	l->rc = ao_exec_submit(l->ex, &l->child.work);
}

static void run_shutdown(enum ao_exec_kind kind, size_t capacity)
{
	struct ao_exec *ex = t_exec_create(kind, 2, capacity, AO_EXEC_BLOCK);
	struct late l;
	struct cnt c;
	int ran = 0;

	t_watchdog_arm(30, "shutdown");
	memset(&l, 0, sizeof(l));
	ao_work_init(&l.work, late_fn);
	l.ex = ex;
	l.rc = 1;
	assert_int_equal(ao_exec_submit(ex, &l.work), 0);
	/* destroy: stops accepting, lets late_fn finish, joins. */
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(l.rc, -ESHUTDOWN);
	assert_int_equal(l.child_ran, 0);

	/* External submits after ao_exec_shutdown(). */
	ex = t_exec_create(kind, 2, capacity, AO_EXEC_BLOCK);
	ao_work_init(&c.work, cnt_fn);
	c.ran = &ran;
	ao_exec_shutdown(ex);
	assert_true(ao_exec_stopping(ex));
	assert_int_equal(ao_exec_submit(ex, &c.work), -ESHUTDOWN);
	assert_int_equal(ao_exec_try_submit(ex, &c.work), -ESHUTDOWN);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	assert_int_equal(ran, 0);
}

static void test_submit_after_shutdown(void **state)
{
	(void)state;
	run_shutdown(AO_EXEC_SHARED, 0);
	run_shutdown(AO_EXEC_STEAL, 0);
	run_shutdown(AO_EXEC_STEAL, 8);
}

/* destroy with a full backlog runs all of it; a submitter blocked on the
 * full executor when destroy starts is refused, not dropped. */
static void run_destroy_backlog(enum ao_exec_kind kind, size_t capacity,
				unsigned int workers)
{
	struct ao_exec *ex =
		t_exec_create(kind, workers, capacity, AO_EXEC_BLOCK);
	long n = capacity ? (long)capacity : t_scaled(50000, 2000);
	struct cnt *c = calloc((size_t)n + 1, sizeof(*c));
	int *ran = calloc((size_t)n + 1, sizeof(int));
	struct gate g[4];
	struct blocker b;
	pthread_t t;

	assert_non_null(c);
	assert_non_null(ran);
	t_watchdog_arm(60, "destroy with a backlog");
	for (unsigned int i = 0; i < workers; i++) {
		gate_init(&g[i], ex);
		assert_int_equal(ao_exec_submit(ex, &g[i].work), 0);
		gate_wait_entered(&g[i]);
	}
	for (long i = 0; i <= n; i++) {
		ao_work_init(&c[i].work, cnt_fn);
		c[i].ran = &ran[i];
	}
	if (capacity) {
		/* Fill it: slots of started items come back in batches, so
		 * it may be full a little before capacity. */
		long k = 0;

		while (k < n && ao_exec_try_submit(ex, &c[k].work) == 0)
			k++;
		assert_true(k >= n - n / 8 - (long)workers);
		n = k;
	} else {
		for (long i = 0; i < n; i++)
			assert_int_equal(ao_exec_submit(ex, &c[i].work), 0);
	}
	if (capacity) {
		memset(&b, 0, sizeof(b));
		b.ex = ex;
		b.items = &c[n];
		ran[n] = 0;
		b.n = 1;
		assert_int_equal(pthread_create(&t, NULL, blocker_thread, &b),
				 0);
		t_sleep_ns(20000000);
		assert_int_equal(__atomic_load_n(&b.returned, __ATOMIC_ACQUIRE),
				 0);
	}
	/* The gates open when shutdown starts. */
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
	for (long i = 0; i < n; i++)
		assert_int_equal(ran[i], 1);
	if (capacity) {
		pthread_join(t, NULL);
		/* Either refused, or (if room came first) accepted and run. */
		if (b.rc[0] == 0)
			assert_int_equal(ran[n], 1);
		else
			assert_int_equal(b.rc[0], -ESHUTDOWN);
		if (b.rc[0])
			assert_int_equal(ran[n], 0);
	}
	free(c);
	free(ran);
}

static void test_destroy_runs_backlog(void **state)
{
	(void)state;
	run_destroy_backlog(AO_EXEC_SHARED, 0, 1);
	run_destroy_backlog(AO_EXEC_STEAL, 0, 2);
	run_destroy_backlog(AO_EXEC_SHARED, 64, 2);
	run_destroy_backlog(AO_EXEC_STEAL, 64, 1);
}

/* ---- drain from many threads while producers run ---- */

static struct ao_exec *dr_ex;
static int dr_ran[4][2000];
static struct cnt dr_items[4][2000];

static void *dr_thread(void *arg)
{
	int id = (int)(intptr_t)arg;
	int n = (int)t_scaled(2000, 200);

	if (n > 2000)
		n = 2000; /* the size of dr_items (AO_TEST_SCALE > 1) */
	for (int i = 0; i < n; i++) {
		ao_work_init(&dr_items[id][i].work, cnt_fn);
		dr_items[id][i].ran = &dr_ran[id][i];
		assert_int_equal(ao_exec_submit(dr_ex, &dr_items[id][i].work),
				 0);
		if (i % 100 == 99) {
			/* Everything this thread submitted has run. */
			assert_int_equal(ao_exec_drain(dr_ex), 0);
			for (int j = 0; j <= i; j++)
				assert_int_equal(
					__atomic_load_n(&dr_ran[id][j],
							__ATOMIC_RELAXED),
					1);
		}
	}
	return NULL;
}

static void test_drain_concurrent(void **state)
{
	pthread_t t[4];

	(void)state;
	memset(dr_ran, 0, sizeof(dr_ran));
	for (int k = 0; k < 2; k++) {
		dr_ex = t_exec_create(k ? AO_EXEC_STEAL : AO_EXEC_SHARED, 2, 0,
				      AO_EXEC_BLOCK);
		memset(dr_ran, 0, sizeof(dr_ran));
		t_watchdog_arm(60, "concurrent drains");
		for (int i = 0; i < 4; i++)
			assert_int_equal(pthread_create(&t[i], NULL, dr_thread,
							(void *)(intptr_t)i),
					 0);
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		t_watchdog_disarm();
		assert_int_equal(ao_exec_destroy(dr_ex), 0);
	}
}

/* ---- an idle executor burns no CPU; a submit wakes one worker ---- */

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void run_idle(enum ao_exec_kind kind)
{
	struct ao_exec *ex = t_exec_create(kind, 4, 0, AO_EXEC_BLOCK);
	struct ao_exec_stats st0, st1;
	struct cnt c;
	int ran = 0;
	uint64_t c0, c1;

	t_watchdog_arm(30, "idle");
	ao_work_init(&c.work, cnt_fn);
	c.ran = &ran;
	assert_int_equal(ao_exec_submit(ex, &c.work), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	/* Let every worker finish its spin and park. */
	t_sleep_ns(50000000);
	c0 = cpu_ns();
	t_sleep_ns(300000000);
	c1 = cpu_ns();
	/* 4 workers busy-yielding would burn 4 x 300 ms.  Allow 15 ms of
	 * noise (sanitizer runtimes have their own threads). */
	assert_true(c1 - c0 < 15000000);
	assert_int_equal(ao_exec_stats(ex, &st0), 0);
	assert_true(st0.parks >= 4);
	/* One submit to a sleeping pool: exactly one futex wake. */
	assert_int_equal(ao_exec_submit(ex, &c.work), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ran, 2);
	assert_int_equal(ao_exec_stats(ex, &st1), 0);
	assert_int_equal(st1.notifies - st0.notifies, 1);
	assert_true(st1.wakeups > st0.wakeups);
	t_watchdog_disarm();
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_idle_burns_no_cpu(void **state)
{
	(void)state;
	run_idle(AO_EXEC_SHARED);
	run_idle(AO_EXEC_STEAL);
}

/*
 * Lone items with idle gaps: the idle spin shrinks after every spin that
 * ends in a park (down to almost nothing) and grows back when a spin finds
 * work.  Every item must still run, every gap end in a park and a wake, and
 * a burst after the gaps must restore the spin without losing anything.
 */
static void run_lone_items(enum ao_exec_kind kind, unsigned int workers)
{
	struct ao_exec *ex = t_exec_create(kind, workers, 0, AO_EXEC_BLOCK);
	struct ao_exec_stats st;
	struct cnt c, burst[256];
	int ran = 0, bran[256] = { 0 };

	t_watchdog_arm(30, "lone items");
	t_watchdog_watch(ex);
	ao_work_init(&c.work, cnt_fn);
	c.ran = &ran;
	for (int i = 0; i < 20; i++) {
		t_sleep_ns(2000000);
		assert_int_equal(ao_exec_submit(ex, &c.work), 0);
		assert_int_equal(ao_exec_drain(ex), 0);
		assert_int_equal(ran, i + 1);
	}
	for (int i = 0; i < 256; i++) {
		ao_work_init(&burst[i].work, cnt_fn);
		burst[i].ran = &bran[i];
		assert_int_equal(ao_exec_submit(ex, &burst[i].work), 0);
	}
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (int i = 0; i < 256; i++)
		assert_int_equal(bran[i], 1);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	/* No timing is asserted: only that workers did park and were woken
	 * (a gap of 2 ms is 100 times the default spin). */
	assert_true(st.parks >= 1);
	assert_true(st.wakeups >= 1);
	assert_int_equal(st.executed, 20 + 256);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_lone_items(void **state)
{
	(void)state;
	run_lone_items(AO_EXEC_SHARED, 1);
	run_lone_items(AO_EXEC_STEAL, 2);
	/* As many workers as CPUs: oversubscribed with the submitter, so
	 * idle spins yield (spin_pause()). */
	run_lone_items(AO_EXEC_STEAL, ao_cpu_count());
}

/* ---- no system call when every worker is awake ---- */

static void run_busy_no_wake(enum ao_exec_kind kind)
{
	struct ao_exec *ex = t_exec_create(kind, 2, 0, AO_EXEC_BLOCK);
	struct ao_exec_stats st0, st1;
	struct gate g[2];
	struct cnt c[1000];
	int ran[1000] = { 0 };

	t_watchdog_arm(30, "busy pool");
	for (int i = 0; i < 2; i++) {
		gate_init(&g[i], NULL);
		assert_int_equal(ao_exec_submit(ex, &g[i].work), 0);
	}
	for (int i = 0; i < 2; i++)
		gate_wait_entered(&g[i]);
	assert_int_equal(ao_exec_stats(ex, &st0), 0);
	/* Both workers are awake (running): no submit may issue a futex
	 * wake, whatever the number of items. */
	for (int i = 0; i < 1000; i++) {
		ao_work_init(&c[i].work, cnt_fn);
		c[i].ran = &ran[i];
		assert_int_equal(ao_exec_submit(ex, &c[i].work), 0);
	}
	assert_int_equal(ao_exec_stats(ex, &st1), 0);
	assert_int_equal(st1.notifies, st0.notifies);
	assert_int_equal(st1.queued, 1000);
	for (int i = 0; i < 2; i++)
		gate_open(&g[i]);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (int i = 0; i < 1000; i++)
		assert_int_equal(ran[i], 1);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_busy_pool_no_wake(void **state)
{
	(void)state;
	run_busy_no_wake(AO_EXEC_SHARED);
	run_busy_no_wake(AO_EXEC_STEAL);
}

/*
 * As many blocking items as workers, submitted to a pool whose workers are
 * still spinning or parking: each must get a worker of its own.  A worker
 * whose park is called off by the first item (it saw it in its re-check)
 * must not swallow the wake-up meant for a sleeper while it runs that item
 * (the busy-pool test above hung this way under TSan, 1 run in 4).
 */
static void run_gates(enum ao_exec_kind kind, unsigned int workers)
{
	struct gate g[4];
	long rounds = t_scaled(200, 20);

	t_watchdog_arm(120, "one gate per worker");
	for (long r = 0; r < rounds; r++) {
		struct ao_exec *ex =
			t_exec_create(kind, workers, 0, AO_EXEC_BLOCK);

		t_watchdog_watch(ex);
		/* Vary the moment: right after create, or once they park. */
		if (r & 1)
			t_sleep_ns(50000 * (uint64_t)(r % 7));
		for (unsigned int i = 0; i < workers; i++) {
			gate_init(&g[i], NULL);
			assert_int_equal(ao_exec_submit(ex, &g[i].work), 0);
		}
		for (unsigned int i = 0; i < workers; i++)
			gate_wait_entered(&g[i]);
		for (unsigned int i = 0; i < workers; i++)
			gate_open(&g[i]);
		t_watchdog_watch(NULL);
		assert_int_equal(ao_exec_destroy(ex), 0);
	}
	t_watchdog_disarm();
}

static void test_gate_per_worker(void **state)
{
	(void)state;
	run_gates(AO_EXEC_SHARED, 2);
	run_gates(AO_EXEC_STEAL, 2);
	run_gates(AO_EXEC_STEAL, 4);
}

/* ---- ao_exec_run_one() on a worker runs queued work ---- */

struct helper {
	struct ao_work work;
	struct cnt kids[4];
	int ran[4];
	int helped;
};

static void helper_fn(struct ao_work *w)
{
	struct helper *h = container_of(w, struct helper, work);
	struct ao_exec *ex = ao_exec_current();

	for (int i = 0; i < 4; i++) {
		ao_work_init(&h->kids[i].work, cnt_fn);
		h->kids[i].ran = &h->ran[i];
		assert_int_equal(ao_exec_submit(ex, &h->kids[i].work), 0);
	}
	/* One worker: nobody else can take them, so we run all four. */
	while (ao_exec_run_one(ex))
		h->helped++;
}

static void test_run_one(void **state)
{
	for (int k = 0; k < 2; k++) {
		struct ao_exec *ex =
			t_exec_create(k ? AO_EXEC_STEAL : AO_EXEC_SHARED, 1, 0,
				      AO_EXEC_BLOCK);
		struct helper h;

		(void)state;
		memset(&h, 0, sizeof(h));
		ao_work_init(&h.work, helper_fn);
		assert_int_equal(ao_exec_submit(ex, &h.work), 0);
		assert_int_equal(ao_exec_drain(ex), 0);
		assert_int_equal(h.helped, 4);
		for (int i = 0; i < 4; i++)
			assert_int_equal(h.ran[i], 1);
		assert_int_equal(ao_exec_destroy(ex), 0);
	}
}

/*
 * ao_exec_run_one() takes an item an outside thread has just submitted: a
 * worker in its own loop may leave a young inbox alone for a moment
 * (core/exec.c, "Batches"), but a caller of run_one wants work now.  A
 * patient run_one fails this most rounds (a round's item is younger than
 * INBOX_AGE_NS when run_one looks, unless a thread was preempted).
 */
#define FRESH_ROUNDS 32

struct fresh {
	struct ao_work work;
	struct cnt kid[FRESH_ROUNDS];
	int ran[FRESH_ROUNDS];
	int step;
	int got;
};

static void fresh_fn(struct ao_work *w)
{
	struct fresh *f = container_of(w, struct fresh, work);

	for (int r = 0; r < FRESH_ROUNDS; r++) {
		__atomic_store_n(&f->step, 2 * r + 1, __ATOMIC_RELEASE);
		/* No yield: run_one follows the submit by well under a
		 * microsecond. */
		while (__atomic_load_n(&f->step, __ATOMIC_ACQUIRE) != 2 * r + 2)
			cpu_relax();
		f->got += ao_exec_run_one(ao_exec_current());
	}
}

static void test_run_one_fresh(void **state)
{
	(void)state;
	for (int k = 0; k < 2; k++) {
		struct ao_exec *ex =
			t_exec_create(k ? AO_EXEC_STEAL : AO_EXEC_SHARED, 1, 0,
				      AO_EXEC_BLOCK);
		struct fresh f;

		t_watchdog_arm(30, "run_one takes a fresh item");
		memset(&f, 0, sizeof(f));
		ao_work_init(&f.work, fresh_fn);
		assert_int_equal(ao_exec_submit(ex, &f.work), 0);
		for (int r = 0; r < FRESH_ROUNDS; r++) {
			ao_work_init(&f.kid[r].work, cnt_fn);
			f.kid[r].ran = &f.ran[r];
			while (__atomic_load_n(&f.step, __ATOMIC_ACQUIRE) !=
			       2 * r + 1)
				cpu_relax();
			/* From outside: onto the inbox. */
			assert_int_equal(ao_exec_submit(ex, &f.kid[r].work), 0);
			__atomic_store_n(&f.step, 2 * r + 2, __ATOMIC_RELEASE);
		}
		assert_int_equal(ao_exec_drain(ex), 0);
		t_watchdog_disarm();
		assert_int_equal(f.got, FRESH_ROUNDS);
		for (int r = 0; r < FRESH_ROUNDS; r++)
			assert_int_equal(f.ran[r], 1);
		assert_int_equal(ao_exec_destroy(ex), 0);
	}
}

/* ---- statistics ---- */

static void test_stats(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 2, 0, AO_EXEC_BLOCK);
	struct ao_exec_worker_stats ws, sum;
	struct ao_exec_stats st;
	struct cnt c[100];
	int ran[100] = { 0 };

	(void)state;
	for (int i = 0; i < 100; i++) {
		ao_work_init(&c[i].work, cnt_fn);
		c[i].ran = &ran[i];
		assert_int_equal(ao_exec_submit(ex, &c[i].work), 0);
	}
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	assert_int_equal(st.workers, 2);
	assert_int_equal(st.submitted, 100);
	assert_int_equal(st.executed, 100);
	assert_int_equal(st.rejected, 0);
	assert_int_equal(st.queued, 0);
	memset(&sum, 0, sizeof(sum));
	for (unsigned int i = 0; i < 2; i++) {
		assert_int_equal(ao_exec_worker_stats(ex, i, &ws), 0);
		sum.executed += ws.executed;
		sum.stolen += ws.stolen;
		sum.stolen_from += ws.stolen_from;
		assert_int_equal(ws.depth, 0);
	}
	assert_int_equal(sum.executed, 100);
	assert_int_equal(sum.stolen, sum.stolen_from);
	assert_int_equal(sum.stolen, st.stolen);
	assert_int_equal(ao_exec_worker_stats(ex, 2, &ws), -EINVAL);
	assert_int_equal(ao_exec_stats(ex, NULL), -EINVAL);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_args),
		cmocka_unit_test(test_create_default),
		cmocka_unit_test(test_worker_identity),
		cmocka_unit_test(test_pinning),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_fail_policy),
		cmocka_unit_test(test_try_submit_never_blocks),
		cmocka_unit_test(test_block_policy),
		cmocka_unit_test(test_submit_after_shutdown),
		cmocka_unit_test(test_destroy_runs_backlog),
		cmocka_unit_test(test_drain_concurrent),
		cmocka_unit_test(test_idle_burns_no_cpu),
		cmocka_unit_test(test_lone_items),
		cmocka_unit_test(test_busy_pool_no_wake),
		cmocka_unit_test(test_gate_per_worker),
		cmocka_unit_test(test_run_one),
		cmocka_unit_test(test_run_one_fresh),
		cmocka_unit_test(test_spawn_overflow),
		cmocka_unit_test(test_worker_submit_full_no_deadlock),
		cmocka_unit_test(test_inline_depth_bound),
		cmocka_unit_test(test_xo_shared_unbounded),
		cmocka_unit_test(test_xo_shared_bounded_block),
		cmocka_unit_test(test_xo_shared_bounded_fail),
		cmocka_unit_test(test_xo_steal_unbounded),
		cmocka_unit_test(test_xo_steal_bounded_block),
		cmocka_unit_test(test_xo_steal_bounded_fail),
	};

	ao_clock_calibrate();
	return cmocka_run_group_tests_name("exec", tests, NULL, NULL);
}
