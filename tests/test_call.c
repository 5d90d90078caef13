// SPDX-License-Identifier: MIT
/*
 * Calls (core/call.c): fn(arg) runs exactly once per accepted call, on an
 * executor (both disciplines, bounded and not), a strand (in order with
 * its items) and a group (fork-join); a refused call runs nothing and
 * gives its item back; fn may call again (trees, inline runs in a full
 * pool); a thread that keeps calling allocates nothing once warm; idle
 * memory is trimmed back after a burst; threads that exit with calls in
 * flight leak nothing (their slabs are freed as the calls come home), in
 * a stress test that also runs under ThreadSanitizer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <aorta/clock.h>
#include <aorta/core/call.h>
#include <aorta/core/exec.h>
#include <aorta/core/group.h>
#include <aorta/core/strand.h>
#include "helpers.h"

static struct ao_call_stats stats(void)
{
	struct ao_call_stats st;

	memset(&st, 0xff, sizeof(st));
	ao_call_stats(&st);
	return st;
}

/* Slabs that exist now, in the whole process. */
static int64_t slabs_live(void)
{
	struct ao_call_stats st = stats();

	return (int64_t)(st.slabs_allocated - st.slabs_released);
}

static void bump(void *arg)
{
	__atomic_fetch_add((int *)arg, 1, __ATOMIC_RELAXED);
}

static void nothing(void *arg)
{
	(void)arg;
}

/* ---- arguments ---- */

static void test_call_args(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 1, 0, AO_EXEC_BLOCK);
	struct ao_strand s;
	struct ao_group g, none;
	int x = 0;

	(void)state;
	ao_strand_init(&s, ex);
	ao_group_init(&g, ex);
	ao_group_init(&none, NULL);
	assert_int_equal(ao_exec_call(NULL, bump, &x), -EINVAL);
	assert_int_equal(ao_exec_call(ex, NULL, &x), -EINVAL);
	assert_int_equal(ao_exec_try_call(NULL, bump, &x), -EINVAL);
	assert_int_equal(ao_exec_try_call(ex, NULL, &x), -EINVAL);
	assert_int_equal(ao_strand_call(NULL, bump, &x), -EINVAL);
	assert_int_equal(ao_strand_call(&s, NULL, &x), -EINVAL);
	assert_int_equal(ao_strand_try_call(NULL, bump, &x), -EINVAL);
	assert_int_equal(ao_strand_try_call(&s, NULL, &x), -EINVAL);
	assert_int_equal(ao_group_call(NULL, bump, &x), -EINVAL);
	assert_int_equal(ao_group_call(&g, NULL, &x), -EINVAL);
	assert_int_equal(ao_group_call(&none, bump, &x), -EINVAL);
	assert_int_equal(ao_group_try_call(NULL, bump, &x), -EINVAL);
	assert_int_equal(ao_group_try_call(&g, NULL, &x), -EINVAL);
	assert_int_equal(ao_group_pending(&g), 0);
	ao_call_stats(NULL);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(x, 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- exactly once, with the argument given ---- */

static void run_once(enum ao_exec_kind kind, unsigned int workers, bool try)
{
	struct ao_exec *ex = t_exec_create(kind, workers, 0, AO_EXEC_BLOCK);
	long n = t_scaled(50000, 2000);
	int *ran = calloc((size_t)n, sizeof(int));
	struct ao_exec_stats st;

	assert_non_null(ran);
	t_watchdog_arm(60, "calls run once");
	t_watchdog_watch(ex);
	for (long i = 0; i < n; i++)
		assert_int_equal(try ? ao_exec_try_call(ex, bump, &ran[i]) :
				       ao_exec_call(ex, bump, &ran[i]),
				 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (long i = 0; i < n; i++)
		assert_int_equal(ran[i], 1);
	assert_int_equal(ao_exec_stats(ex, &st), 0);
	assert_int_equal(st.submitted, (uint64_t)n);
	assert_int_equal(st.executed, (uint64_t)n);
	assert_int_equal(ao_exec_destroy(ex), 0);
	free(ran);
}

static void test_call_runs_once(void **state)
{
	(void)state;
	run_once(AO_EXEC_SHARED, 2, false);
	run_once(AO_EXEC_STEAL, 2, false);
	run_once(AO_EXEC_STEAL, 1, true);
}

/* ---- refusals: fn not run, the item back in the cache ---- */

struct gate {
	int open;
	int entered;
};

static void gate_fn(void *arg)
{
	struct gate *g = arg;

	__atomic_store_n(&g->entered, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE))
		t_sleep_ns(100000);
}

static void gate_wait(struct gate *g)
{
	while (!__atomic_load_n(&g->entered, __ATOMIC_ACQUIRE))
		t_sleep_ns(100000);
}

static void run_refused(enum ao_exec_kind kind)
{
	struct ao_exec *ex = t_exec_create(kind, 1, 2, AO_EXEC_FAIL);
	struct gate g = { 0, 0 };
	struct ao_call_stats st0, st1;
	int ran[4] = { 0 };
	int64_t live;

	t_watchdog_arm(30, "refused calls");
	assert_int_equal(ao_exec_call(ex, gate_fn, &g), 0);
	gate_wait(&g);
	/* The gate has started: two slots are free. */
	assert_int_equal(ao_exec_call(ex, bump, &ran[0]), 0);
	assert_int_equal(ao_exec_try_call(ex, bump, &ran[1]), 0);
	st0 = stats();
	live = slabs_live();
	/* Full: refused, and the items go back where they came from, as
	 * many times as it happens. */
	for (int i = 0; i < 10000; i++) {
		assert_int_equal(ao_exec_call(ex, bump, &ran[2]), -EAGAIN);
		assert_int_equal(ao_exec_try_call(ex, bump, &ran[3]), -EAGAIN);
	}
	st1 = stats();
	assert_int_equal(st1.cached, st0.cached);
	assert_int_equal(slabs_live(), live);
	__atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ran[0], 1);
	assert_int_equal(ran[1], 1);
	assert_int_equal(ran[2], 0);
	assert_int_equal(ran[3], 0);
	/* After shutdown. */
	ao_exec_shutdown(ex);
	assert_int_equal(ao_exec_call(ex, bump, &ran[2]), -ESHUTDOWN);
	assert_int_equal(ao_exec_try_call(ex, bump, &ran[2]), -ESHUTDOWN);
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(ran[2], 0);
}

static void test_call_refused(void **state)
{
	(void)state;
	run_refused(AO_EXEC_SHARED);
	run_refused(AO_EXEC_STEAL);
}

/* ---- calls that call: a binary tree, from the workers ---- */

struct tree {
	struct ao_exec *ex;
	int *ran;
	long n;
	int depth;
};

static struct tree tr;

static void tree_fn(void *arg)
{
	long i = (long)(intptr_t)arg;

	__atomic_fetch_add(&tr.ran[i], 1, __ATOMIC_RELAXED);
	if (2 * i + 2 < tr.n) {
		/* Every worker may be here at once with the pool full: a
		 * blocking call from a worker runs the child inline. */
		assert_int_equal(ao_exec_call(ao_exec_current(), tree_fn,
					      (void *)(intptr_t)(2 * i + 1)),
				 0);
		assert_int_equal(ao_exec_call(ao_exec_current(), tree_fn,
					      (void *)(intptr_t)(2 * i + 2)),
				 0);
	}
}

static void run_tree(enum ao_exec_kind kind, unsigned int workers,
		     size_t capacity)
{
	struct ao_exec_stats st;

	tr.depth = t_scale() < 1 ? 12 : 16;
	tr.n = (2l << tr.depth) - 1;
	tr.ran = calloc((size_t)tr.n, sizeof(int));
	assert_non_null(tr.ran);
	tr.ex = t_exec_create(kind, workers, capacity, AO_EXEC_BLOCK);
	t_watchdog_arm(60, "a tree of calls");
	t_watchdog_watch(tr.ex);
	assert_int_equal(ao_exec_call(tr.ex, tree_fn, (void *)(intptr_t)0), 0);
	assert_int_equal(ao_exec_drain(tr.ex), 0);
	t_watchdog_disarm();
	for (long i = 0; i < tr.n; i++)
		assert_int_equal(tr.ran[i], 1);
	assert_int_equal(ao_exec_stats(tr.ex, &st), 0);
	assert_int_equal(st.executed, (uint64_t)tr.n);
	if (capacity)
		assert_true(st.inlined > 0);
	assert_int_equal(ao_exec_destroy(tr.ex), 0);
	free(tr.ran);
}

static void test_call_tree(void **state)
{
	(void)state;
	run_tree(AO_EXEC_STEAL, 1, 0);
	run_tree(AO_EXEC_STEAL, 2, 0);
	run_tree(AO_EXEC_SHARED, 2, 0);
	run_tree(AO_EXEC_STEAL, 2, 4);
	run_tree(AO_EXEC_SHARED, 2, 1);
}

/* ---- strands: calls in order with the strand's items ---- */

#define SPROD 4

struct sess {
	struct ao_strand strand;
	int inside;
	long last[SPROD];
	long ran;
	int bad;
};

struct spkt {
	struct ao_work work; /* odd sequence numbers go as items */
	struct sess *s;
	int producer;
	long seq;
};

static void spkt_check(struct spkt *p)
{
	struct sess *s = p->s;

	if (__atomic_fetch_add(&s->inside, 1, __ATOMIC_RELAXED))
		s->bad = 1;
	if (ao_strand_current() != &s->strand)
		s->bad = 1;
	/* Plain accesses: the strand alone serialises them. */
	if (p->seq != s->last[p->producer] + 1)
		s->bad = 1;
	s->last[p->producer] = p->seq;
	s->ran++;
	__atomic_fetch_sub(&s->inside, 1, __ATOMIC_RELAXED);
}

static void spkt_call(void *arg)
{
	spkt_check(arg);
}

static void spkt_work(struct ao_work *w)
{
	spkt_check(container_of(w, struct spkt, work));
}

struct sprod {
	struct spkt *pkts;
	long n;
};

static void *sprod_fn(void *arg)
{
	struct sprod *pr = arg;

	for (long i = 0; i < pr->n; i++) {
		struct spkt *p = &pr->pkts[i];

		if (i & 1) {
			ao_work_init(&p->work, spkt_work);
			assert_int_equal(
				ao_strand_submit(&p->s->strand, &p->work), 0);
		} else {
			assert_int_equal(
				ao_strand_call(&p->s->strand, spkt_call, p), 0);
		}
	}
	return NULL;
}

static void run_strand(enum ao_exec_kind kind, size_t capacity)
{
	struct ao_exec *ex = t_exec_create(kind, 2, capacity, AO_EXEC_BLOCK);
	struct sess *s = calloc(2, sizeof(*s));
	struct sprod pr[SPROD];
	long n = t_scaled(20000, 1000);

	assert_non_null(s);
	for (int k = 0; k < 2; k++) {
		ao_strand_init(&s[k].strand, ex);
		ao_strand_set_batch(&s[k].strand, (unsigned int)(k + 2));
		for (int j = 0; j < SPROD; j++)
			s[k].last[j] = -1;
	}
	for (int i = 0; i < SPROD; i++) {
		pr[i].n = n;
		pr[i].pkts = calloc((size_t)n, sizeof(struct spkt));
		assert_non_null(pr[i].pkts);
		for (long k = 0; k < n; k++) {
			pr[i].pkts[k].s = &s[i % 2];
			pr[i].pkts[k].producer = i;
			pr[i].pkts[k].seq = k;
		}
	}
	t_watchdog_arm(120, "strand calls in order");
	t_watchdog_watch(ex);
	t_run_threads(SPROD, sprod_fn, pr, sizeof(pr[0]));
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_disarm();
	for (int k = 0; k < 2; k++) {
		assert_int_equal(s[k].bad, 0);
		assert_int_equal(s[k].ran, 2 * n);
		assert_int_equal(ao_strand_destroy(&s[k].strand), 0);
	}
	assert_int_equal(ao_exec_destroy(ex), 0);
	for (int i = 0; i < SPROD; i++)
		free(pr[i].pkts);
	free(s);
}

static void test_call_strand_order(void **state)
{
	(void)state;
	run_strand(AO_EXEC_SHARED, 0);
	run_strand(AO_EXEC_STEAL, 0);
	run_strand(AO_EXEC_STEAL, 16);
}

static void test_call_strand_refused(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 1, 2, AO_EXEC_FAIL);
	struct ao_strand s;
	struct gate g = { 0, 0 };
	int ran[3] = { 0 };
	uint64_t cached;

	(void)state;
	t_watchdog_arm(30, "strand call refusals");
	ao_strand_init(&s, ex);
	assert_int_equal(ao_exec_call(ex, gate_fn, &g), 0);
	gate_wait(&g);
	/* One call takes a slot, the strand's turn the other: full. */
	assert_int_equal(ao_strand_call(&s, bump, &ran[0]), 0);
	cached = stats().cached;
	assert_int_equal(ao_strand_call(&s, bump, &ran[1]), -EAGAIN);
	assert_int_equal(ao_strand_try_call(&s, bump, &ran[2]), -EAGAIN);
	assert_int_equal(stats().cached, cached);
	__atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
	assert_int_equal(ao_exec_drain(ex), 0);
	assert_int_equal(ao_strand_try_call(&s, bump, &ran[0]), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	ao_exec_shutdown(ex);
	assert_int_equal(ao_strand_call(&s, bump, &ran[1]), -ESHUTDOWN);
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
	assert_int_equal(ran[0], 2);
	assert_int_equal(ran[1], 0);
	assert_int_equal(ran[2], 0);
	assert_int_equal(ao_strand_destroy(&s), 0);
}

/* ---- groups: fork-join with calls ---- */

struct fib {
	int n;
	bool try;
	long result;
};

static long fib_seq(int n)
{
	return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2);
}

static void fib_fn(void *arg)
{
	struct fib *f = arg;
	struct fib a = { f->n - 1, f->try, 0 }, b = { f->n - 2, f->try, 0 };
	struct ao_group g;

	if (f->n < 2) {
		f->result = f->n;
		return;
	}
	ao_group_init(&g, ao_exec_current());
	if (f->try) {
		/* Refused when full: run it here instead. */
		if (ao_group_try_call(&g, fib_fn, &a))
			fib_fn(&a);
	} else {
		assert_int_equal(ao_group_call(&g, fib_fn, &a), 0);
	}
	assert_int_equal(ao_group_call(&g, fib_fn, &b), 0);
	assert_int_equal(ao_group_wait(&g), 0);
	f->result = a.result + b.result;
}

static void run_fib(enum ao_exec_kind kind, unsigned int workers,
		    size_t capacity, bool try)
{
	struct ao_exec *ex =
		t_exec_create(kind, workers, capacity, AO_EXEC_BLOCK);
	int n = t_scale() < 1 ? 15 : 19;
	struct fib f = { n, try, 0 };
	struct ao_group g;

	t_watchdog_arm(60, "fib with group calls");
	t_watchdog_watch(ex);
	ao_group_init(&g, ex);
	assert_int_equal(ao_group_call(&g, fib_fn, &f), 0);
	assert_int_equal(ao_group_wait(&g), 0);
	t_watchdog_disarm();
	assert_int_equal(f.result, fib_seq(n));
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_call_group_fib(void **state)
{
	(void)state;
	run_fib(AO_EXEC_STEAL, 1, 0, false);
	run_fib(AO_EXEC_STEAL, 2, 0, true);
	run_fib(AO_EXEC_SHARED, 2, 0, false);
	run_fib(AO_EXEC_STEAL, 2, 8, true);
	run_fib(AO_EXEC_SHARED, 2, 2, false);
}

static void test_call_group_refused(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 1, 1, AO_EXEC_FAIL);
	struct gate gt = { 0, 0 };
	struct ao_group g;
	int ran[3] = { 0 };
	uint64_t cached;

	(void)state;
	t_watchdog_arm(30, "group call refusals");
	assert_int_equal(ao_exec_call(ex, gate_fn, &gt), 0);
	gate_wait(&gt);
	ao_group_init(&g, ex);
	assert_int_equal(ao_group_call(&g, bump, &ran[0]), 0);
	cached = stats().cached;
	assert_int_equal(ao_group_call(&g, bump, &ran[1]), -EAGAIN);
	assert_int_equal(ao_group_try_call(&g, bump, &ran[2]), -EAGAIN);
	/* Not counted, and both of each call's items are back. */
	assert_int_equal(ao_group_pending(&g), 1);
	assert_int_equal(stats().cached, cached);
	__atomic_store_n(&gt.open, 1, __ATOMIC_RELEASE);
	assert_int_equal(ao_group_wait(&g), 0);
	assert_int_equal(ao_group_pending(&g), 0);
	assert_int_equal(ran[0], 1);
	assert_int_equal(ao_group_try_call(&g, bump, &ran[2]), 0);
	assert_int_equal(ao_group_wait(&g), 0);
	t_watchdog_disarm();
	assert_int_equal(ran[1], 0);
	assert_int_equal(ran[2], 1);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

/* ---- memory: nothing allocated once warm; trimmed after a burst ---- */

static void run_steady(enum ao_exec_kind kind)
{
	struct ao_exec *ex = t_exec_create(kind, 2, 0, AO_EXEC_BLOCK);
	long rounds = t_scaled(300, 60), per = 1000;
	uint64_t a0 = 0;
	int n = 0;

	t_watchdog_arm(120, "steady calls");
	t_watchdog_watch(ex);
	for (long r = 0; r < rounds + 10; r++) {
		if (r == 10)
			a0 = stats().slabs_allocated;
		for (long i = 0; i < per; i++)
			assert_int_equal(ao_exec_call(ex, bump, &n), 0);
		assert_int_equal(ao_exec_drain(ex), 0);
	}
	t_watchdog_disarm();
	assert_int_equal(n, (rounds + 10) * per);
	/*
	 * At most 1000 calls in flight, and each worker holds at most one
	 * batch: about 17 slabs in use, all kept (AO_CALL_IDLE_SLABS).
	 * Without the recycling every 62 calls would take a new slab.
	 */
	assert_true(stats().slabs_allocated - a0 <= 8);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static void test_call_steady_state(void **state)
{
	(void)state;
	run_steady(AO_EXEC_SHARED);
	run_steady(AO_EXEC_STEAL);
}

/*
 * A worker's calls to its own shared pool run in the order they were
 * made (FIFO), so the items that come back are of its older slabs, not
 * its current one: core/call.c gathers them per slab (own) before they
 * go back on the slab.  After a tree of calls, the worker must have
 * every item of every slab it allocated idle again: none lost in a
 * gathering, none counted twice.
 */
struct fifo {
	struct ao_exec *ex;
	int64_t live0; /* slabs before the tree (the main thread's) */
	int ran; /* calls of the tree that ran */
	int64_t slabs; /* the worker's slabs, after the tree */
	uint64_t cached; /* the worker's idle items then */
	struct ao_work check; /* reads them, on the worker */
};

static struct fifo fifo;

static void fifo_node(void *arg)
{
	uintptr_t i = (uintptr_t)arg;

	__atomic_fetch_add(&fifo.ran, 1, __ATOMIC_RELAXED);
	if (2 * i + 2 < 20000) {
		assert_int_equal(ao_exec_call(fifo.ex, fifo_node,
					      (void *)(2 * i + 1)),
				 0);
		assert_int_equal(ao_exec_call(fifo.ex, fifo_node,
					      (void *)(2 * i + 2)),
				 0);
	}
}

static void fifo_check(struct ao_work *w)
{
	struct ao_call_stats st = stats();

	(void)w;
	fifo.slabs =
		(int64_t)(st.slabs_allocated - st.slabs_released) - fifo.live0;
	fifo.cached = st.cached;
}

/* The tree's root, on the worker: its calls are then all the worker's. */
static void fifo_root(struct ao_work *w)
{
	(void)w;
	fifo_node((void *)0);
}

static void test_call_fifo_returns(void **state)
{
	struct ao_work root;

	(void)state;
	fifo.ex = t_exec_create(AO_EXEC_SHARED, 1, 0, AO_EXEC_BLOCK);
	fifo.live0 = slabs_live();
	fifo.ran = 0;
	t_watchdog_arm(60, "a FIFO call tree");
	t_watchdog_watch(fifo.ex);
	ao_work_init(&root, fifo_root);
	ao_work_init(&fifo.check, fifo_check);
	assert_int_equal(ao_exec_submit(fifo.ex, &root), 0);
	assert_int_equal(ao_exec_drain(fifo.ex), 0);
	assert_int_equal(ao_exec_submit(fifo.ex, &fifo.check), 0);
	assert_int_equal(ao_exec_drain(fifo.ex), 0);
	t_watchdog_disarm();
	/* Nodes 0 to 19,998: 2i + 2 < 20,000 has children. */
	assert_int_equal(fifo.ran, 19999);
	/* Some 5,000 calls in flight at the widest: many slabs. */
	assert_true(fifo.slabs >= 20);
	assert_int_equal(fifo.cached,
			 (uint64_t)fifo.slabs * AO_CALL_SLAB_ITEMS);
	assert_int_equal(ao_exec_destroy(fifo.ex), 0);
}

struct trim {
	struct ao_exec *ex;
	int64_t burst_slabs, left_slabs; /* slabs alive, above the start */
	uint64_t burst_bytes, left_bytes; /* bytes held, likewise */
	long burst_rss, left_rss; /* the process's resident KiB */
	uint64_t cached; /* idle items the thread has at the end */
	uint64_t trim_ms; /* how long the trim took */
};

/* On a thread of its own, so that its cache starts empty.  The checks
 * are made by the main thread (test_call_trim_after_burst()). */
static void *trim_thread(void *arg)
{
	struct trim *t = arg;
	struct gate g = { 0, 0 };
	long burst = 20000;
	int64_t live0 = slabs_live();
	struct ao_call_stats st, st0 = stats();
	uint64_t deadline;
	int n = 0;

	assert_int_equal(ao_exec_call(t->ex, gate_fn, &g), 0);
	gate_wait(&g);
	for (long i = 0; i < burst; i++)
		assert_int_equal(ao_exec_call(t->ex, bump, &n), 0);
	t->burst_slabs = slabs_live() - live0;
	t->burst_bytes = stats().bytes - st0.bytes;
	t->burst_rss = t_rss_kib();
	__atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
	assert_int_equal(ao_exec_drain(t->ex), 0);
	assert_int_equal(n, burst);
	/* Now one call at a time until the idle slabs are trimmed: the
	 * thread trims those it went a second without (core/call.c), so
	 * two seconds of calls; bounded at ten (the checks below fail
	 * then).  The figure to wait for is the bound asserted below. */
	deadline = ao_now_ns() + 10000000000ull;
	for (long i = 0;; i++) {
		assert_int_equal(ao_exec_call(t->ex, bump, &n), 0);
		assert_int_equal(ao_exec_drain(t->ex), 0);
		if (i % 1024)
			continue;
		if (slabs_live() - live0 <= (int64_t)AO_CALL_IDLE_SLABS + 4 ||
		    ao_now_ns() > deadline)
			break;
	}
	t->trim_ms = (ao_now_ns() - (deadline - 10000000000ull)) / 1000000;
	st = stats();
	t->cached = st.cached;
	t->left_slabs = slabs_live() - live0;
	t->left_bytes = st.bytes - st0.bytes;
	t->left_rss = t_rss_kib();
	return NULL;
}

static void test_call_trim_after_burst(void **state)
{
	struct trim t = { .ex = t_exec_create(AO_EXEC_STEAL, 1, 0,
					      AO_EXEC_BLOCK) };
	pthread_t th;

	(void)state;
	t_watchdog_arm(120, "trim after a burst");
	t_watchdog_watch(t.ex);
	assert_int_equal(pthread_create(&th, NULL, trim_thread, &t), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	t_watchdog_disarm();
	assert_int_equal(ao_exec_destroy(t.ex), 0);
	/* The burst: 20,000 calls queued at once, 62 to a slab, at least
	 * their own 32 bytes each. */
	assert_true(t.burst_slabs >= 20000 / (long)AO_CALL_SLAB_ITEMS);
	assert_true(t.burst_bytes >= 20000 * 32);
	print_message("trimmed %llu ms after the burst\n",
		      (unsigned long long)t.trim_ms);
	/* What is left: the idle slabs kept, the current one and a few
	 * partly idle (the worker held some of their items), each pinning
	 * at most its page (the rest of each block, and the part of the
	 * last one never carved, went back); and the threads' caches. */
	assert_true(t.cached <= (AO_CALL_IDLE_SLABS + 4) * AO_CALL_SLAB_ITEMS);
	assert_true(t.left_slabs <= (int64_t)AO_CALL_IDLE_SLABS + 4);
	assert_true(t.left_bytes <=
		    (AO_CALL_IDLE_SLABS + 4) * (uint64_t)sysconf(_SC_PAGESIZE) +
			    4096);
	/* And the process gave that memory back (unmapped, or the pages
	 * of blocks that stay given back): at least half of it, as other
	 * threads' memory moves meanwhile. */
	print_message("resident %ld KiB after the burst, %ld after the "
		      "trim; held %llu, %llu\n",
		      t.burst_rss, t.left_rss,
		      (unsigned long long)t.burst_bytes / 1024,
		      (unsigned long long)t.left_bytes / 1024);
	assert_true(t.burst_rss > 0 && t.left_rss > 0);
	assert_true(t.burst_rss - t.left_rss >=
		    (long)((t.burst_bytes - t.left_bytes) / 2048));
}

/* ---- threads that exit with calls in flight ---- */

struct caller {
	struct ao_exec *ex;
	struct ao_strand *strand;
	int *ran;
	long n;
};

static void *caller_fn(void *arg)
{
	struct caller *c = arg;

	/* No wait at the end: the thread exits with its calls queued, and
	 * its slabs go when the last of them has run. */
	for (long i = 0; i < c->n; i++) {
		if (c->strand && i % 3 == 0)
			assert_int_equal(
				ao_strand_call(c->strand, bump, &c->ran[i]), 0);
		else
			assert_int_equal(ao_exec_call(c->ex, bump, &c->ran[i]),
					 0);
	}
	return NULL;
}

static void run_exit(enum ao_exec_kind kind, size_t capacity, bool strand)
{
	struct ao_call_stats st0 = stats(), st1;
	int64_t live0 = slabs_live();
	struct ao_exec *ex = t_exec_create(kind, 2, capacity, AO_EXEC_BLOCK);
	struct ao_strand s;
	struct caller c[6];
	long n = t_scaled(20000, 1000);

	ao_strand_init(&s, ex);
	for (int i = 0; i < 6; i++) {
		c[i].ex = ex;
		c[i].strand = strand ? &s : NULL;
		c[i].n = n;
		c[i].ran = calloc((size_t)n, sizeof(int));
		assert_non_null(c[i].ran);
	}
	t_watchdog_arm(120, "callers that exit");
	t_watchdog_watch(ex);
	t_run_threads(6, caller_fn, c, sizeof(c[0]));
	assert_int_equal(ao_exec_drain(ex), 0);
	t_watchdog_watch(NULL);
	/* The workers exit too, sending home what they hold. */
	assert_int_equal(ao_exec_destroy(ex), 0);
	t_watchdog_disarm();
	for (int i = 0; i < 6; i++) {
		for (long k = 0; k < n; k++)
			assert_int_equal(c[i].ran[k], 1);
		free(c[i].ran);
	}
	st1 = stats();
	/* Every thread's cache is gone, and every slab it had. */
	assert_int_equal(st1.threads, st0.threads);
	assert_int_equal(slabs_live(), live0);
	assert_int_equal(st1.bytes, st0.bytes);
	assert_true(st1.slabs_allocated > st0.slabs_allocated);
}

static void test_call_thread_exit(void **state)
{
	(void)state;
	run_exit(AO_EXEC_STEAL, 0, false);
	run_exit(AO_EXEC_SHARED, 0, true);
	run_exit(AO_EXEC_STEAL, 64, true);
}

/* ---- stress: callers come and go, workers call back ---- */

struct stress {
	struct ao_exec *ex;
	struct ao_strand strand;
	int *ran; /* per call, for every kind of call */
	long per; /* calls per thread per round */
	long base; /* this round's first index */
};

static struct stress sx;

static void stress_child(void *arg)
{
	__atomic_fetch_add(&sx.ran[(long)(intptr_t)arg], 1, __ATOMIC_RELAXED);
}

/* Runs on a worker: counts itself, then calls its child from there. */
static void stress_parent(void *arg)
{
	long i = (long)(intptr_t)arg;

	__atomic_fetch_add(&sx.ran[i], 1, __ATOMIC_RELAXED);
	assert_int_equal(ao_exec_call(ao_exec_current(), stress_child,
				      (void *)(intptr_t)(i + 1)),
			 0);
}

static void *stress_thread(void *arg)
{
	long id = (long)(intptr_t)arg;
	long first = sx.base + id * sx.per * 2;
	struct ao_group g;

	ao_group_init(&g, sx.ex);
	for (long k = 0; k < sx.per; k++) {
		long i = first + 2 * k;
		void *a = (void *)(intptr_t)i;

		switch (k % 4) {
		case 0: /* a parent and its child */
			assert_int_equal(ao_exec_call(sx.ex, stress_parent, a),
					 0);
			break;
		case 1:
			assert_int_equal(
				ao_strand_call(&sx.strand, stress_child, a), 0);
			__atomic_fetch_add(&sx.ran[i + 1], 1, __ATOMIC_RELAXED);
			break;
		case 2:
			assert_int_equal(ao_group_call(&g, stress_child, a), 0);
			__atomic_fetch_add(&sx.ran[i + 1], 1, __ATOMIC_RELAXED);
			break;
		default:
			/* Refused when a bounded pool is full: not run, so
			 * run it here. */
			if (ao_exec_try_call(sx.ex, stress_child, a))
				stress_child(a);
			__atomic_fetch_add(&sx.ran[i + 1], 1, __ATOMIC_RELAXED);
			break;
		}
	}
	/* The group is on this stack: wait for it, but not for the other
	 * calls, which may still be queued when the thread exits. */
	assert_int_equal(ao_group_wait(&g), 0);
	return NULL;
}

static void test_call_stress(void **state)
{
	long rounds = t_scaled(40, 8), threads = 4;
	int64_t live0 = slabs_live();
	uint64_t heaps0 = stats().threads, bytes0 = stats().bytes;

	(void)state;
	sx.per = t_scaled(4000, 400);
	sx.ran = calloc((size_t)(rounds * threads * sx.per * 2), sizeof(int));
	assert_non_null(sx.ran);
	t_watchdog_arm(300, "call stress");
	for (long r = 0; r < rounds; r++) {
		pthread_t t[4];

		sx.ex = t_exec_create(r & 1 ? AO_EXEC_STEAL : AO_EXEC_SHARED, 2,
				      r % 3 ? 0 : 32, AO_EXEC_BLOCK);
		t_watchdog_watch(sx.ex);
		ao_strand_init(&sx.strand, sx.ex);
		sx.base = r * threads * sx.per * 2;
		for (long i = 0; i < threads; i++)
			assert_int_equal(pthread_create(&t[i], NULL,
							stress_thread,
							(void *)(intptr_t)i),
					 0);
		for (long i = 0; i < threads; i++)
			assert_int_equal(pthread_join(t[i], NULL), 0);
		/* Before destroy: a parent that ran after shutdown started
		 * would have its child refused. */
		assert_int_equal(ao_exec_drain(sx.ex), 0);
		t_watchdog_watch(NULL);
		assert_int_equal(ao_exec_destroy(sx.ex), 0);
		for (long i = sx.base; i < sx.base + threads * sx.per * 2; i++)
			assert_int_equal(sx.ran[i], 1);
	}
	t_watchdog_disarm();
	assert_int_equal(stats().threads, heaps0);
	assert_int_equal(slabs_live(), live0);
	assert_int_equal(stats().bytes, bytes0);
	free(sx.ran);
}

/* ---- statistics ---- */

static void *stats_thread(void *arg)
{
	struct ao_exec *ex = arg;
	struct ao_call_stats st;
	int n = 0;

	/* A thread that has not called yet has no cache. */
	st = stats();
	assert_int_equal(st.cached, 0);
	assert_int_equal(st.held, 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(ao_exec_call(ex, bump, &n), 0);
	assert_int_equal(ao_exec_drain(ex), 0);
	st = stats();
	/* Its first slab: 62 items, 10 of them out or held by the
	 * worker, or sent back. */
	assert_true(st.cached >= AO_CALL_SLAB_ITEMS - 10);
	assert_true(st.cached <= AO_CALL_SLAB_ITEMS);
	assert_true(st.bytes >= 2048 + 64);
	assert_int_equal(n, 10);
	return NULL;
}

static void test_call_stats(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_STEAL, 1, 0, AO_EXEC_BLOCK);
	uint64_t heaps0 = stats().threads;
	pthread_t t;

	(void)state;
	assert_int_equal(pthread_create(&t, NULL, stats_thread, ex), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
	/* The thread and the worker that ran its calls have exited. */
	assert_int_equal(stats().threads, heaps0);
	assert_int_equal(ao_exec_call(NULL, nothing, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_call_args),
		cmocka_unit_test(test_call_stats),
		cmocka_unit_test(test_call_runs_once),
		cmocka_unit_test(test_call_refused),
		cmocka_unit_test(test_call_tree),
		cmocka_unit_test(test_call_strand_order),
		cmocka_unit_test(test_call_strand_refused),
		cmocka_unit_test(test_call_group_fib),
		cmocka_unit_test(test_call_group_refused),
		cmocka_unit_test(test_call_steady_state),
		cmocka_unit_test(test_call_fifo_returns),
		cmocka_unit_test(test_call_trim_after_burst),
		cmocka_unit_test(test_call_thread_exit),
		cmocka_unit_test(test_call_stress),
	};

	ao_clock_calibrate();
	return cmocka_run_group_tests_name("call", tests, NULL, NULL);
}
