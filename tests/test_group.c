// SPDX-License-Identifier: MIT
/*
 * Groups: counting in and waiting, from outside the pool and from a
 * worker; fork-join recursion (fib(20)) on 1 and 2 workers, both
 * disciplines, bounded and unbounded; add/done without submitting;
 * refused submits are not counted.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/clock.h>
#include <aorta/core/exec.h>
#include <aorta/core/group.h>
#include "helpers.h"

/* ---- fork-join: fib via groups; the tasks live on the stack ---- */

struct fib {
	struct ao_group_work gw;
	int n;
	long result;
};

static void fib_fn(struct ao_work *w);

static long fib_seq(int n)
{
	return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2);
}

static void fib_fn(struct ao_work *w)
{
	struct fib *f = container_of(w, struct fib, gw.work);
	struct fib a, b;
	struct ao_group g;

	if (f->n < 2) {
		f->result = f->n;
		return;
	}
	/* Every level waits for its children on a worker: with one worker
	 * that only works because the wait runs them. */
	ao_group_init(&g, ao_exec_current());
	a.n = f->n - 1;
	b.n = f->n - 2;
	ao_group_work_init(&a.gw, fib_fn);
	ao_group_work_init(&b.gw, fib_fn);
	assert_int_equal(ao_group_submit(&g, &a.gw), 0);
	assert_int_equal(ao_group_submit(&g, &b.gw), 0);
	assert_int_equal(ao_group_wait(&g), 0);
	assert_int_equal(ao_group_pending(&g), 0);
	f->result = a.result + b.result;
}

static void run_fib(enum ao_exec_kind kind, unsigned int workers,
		    size_t capacity, int n)
{
	struct ao_exec *ex =
		t_exec_create(kind, workers, capacity, AO_EXEC_BLOCK);
	struct ao_group g;
	struct fib f;

	t_watchdog_arm(60, "fib via groups");
	ao_group_init(&g, ex);
	f.n = n;
	ao_group_work_init(&f.gw, fib_fn);
	assert_int_equal(ao_group_submit(&g, &f.gw), 0);
	/* Waiting from outside the pool. */
	assert_int_equal(ao_group_wait(&g), 0);
	t_watchdog_disarm();
	assert_int_equal(f.result, fib_seq(n));
	assert_int_equal(ao_exec_destroy(ex), 0);
}

static int fib_n(void)
{
	return t_scale() < 1 ? 16 : 20;
}

static void test_fib_1_worker(void **state)
{
	(void)state;
	run_fib(AO_EXEC_STEAL, 1, 0, fib_n());
	run_fib(AO_EXEC_SHARED, 1, 0, fib_n());
}

static void test_fib_2_workers(void **state)
{
	(void)state;
	run_fib(AO_EXEC_STEAL, 2, 0, fib_n());
	run_fib(AO_EXEC_SHARED, 2, 0, fib_n());
}

static void test_fib_bounded(void **state)
{
	(void)state;
	run_fib(AO_EXEC_STEAL, 1, 4, fib_n());
	run_fib(AO_EXEC_STEAL, 2, 8, fib_n());
	run_fib(AO_EXEC_SHARED, 2, 2, fib_n());
}

static void test_fib_many_workers(void **state)
{
	(void)state;
	run_fib(AO_EXEC_STEAL, 4, 0, fib_n() - 2);
	run_fib(AO_EXEC_SHARED, 4, 16, fib_n() - 2);
}

/* ---- add/done, and waits by several outside threads ---- */

static struct ao_group wg;

static void *done_later(void *arg)
{
	(void)arg;
	t_sleep_ns(20000000);
	ao_group_done(&wg);
	return NULL;
}

static void *waiter(void *arg)
{
	(void)arg;
	assert_int_equal(ao_group_wait(&wg), 0);
	assert_int_equal(ao_group_pending(&wg), 0);
	return NULL;
}

static void test_add_done(void **state)
{
	pthread_t t[4];

	(void)state;
	t_watchdog_arm(30, "add/done");
	ao_group_init(&wg, NULL);
	assert_int_equal(ao_group_pending(&wg), 0);
	/* Nothing counted in: returns at once. */
	assert_int_equal(ao_group_wait(&wg), 0);
	ao_group_add(&wg, 3);
	assert_int_equal(ao_group_pending(&wg), 3);
	ao_group_done(&wg);
	ao_group_done(&wg);
	assert_int_equal(ao_group_pending(&wg), 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, waiter, NULL), 0);
	assert_int_equal(pthread_create(&t[3], NULL, done_later, NULL), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(ao_group_pending(&wg), 0);
	/* Reusable. */
	ao_group_add(&wg, 1);
	assert_int_equal(pthread_create(&t[0], NULL, done_later, NULL), 0);
	assert_int_equal(ao_group_wait(&wg), 0);
	pthread_join(t[0], NULL);
	t_watchdog_disarm();
	assert_int_equal(ao_group_submit(NULL, NULL), -EINVAL);
	assert_int_equal(ao_group_wait(NULL), -EINVAL);
}

/* ---- many small groups hammered by many threads ---- */

struct leaf {
	struct ao_group_work gw;
	int *ran;
};

static void leaf_fn(struct ao_work *w)
{
	struct leaf *l = container_of(w, struct leaf, gw.work);

	__atomic_fetch_add(l->ran, 1, __ATOMIC_RELAXED);
}

static struct ao_exec *hex;

static void *group_hammer(void *arg)
{
	long rounds = t_scaled(3000, 200);

	(void)arg;
	for (long r = 0; r < rounds; r++) {
		struct leaf l[8];
		int ran[8] = { 0 };
		struct ao_group g;

		/* The group and its items are on this stack: a late
		 * ao_group_done() touching g would be a use after return. */
		ao_group_init(&g, hex);
		for (int i = 0; i < 8; i++) {
			ao_group_work_init(&l[i].gw, leaf_fn);
			l[i].ran = &ran[i];
			assert_int_equal(ao_group_submit(&g, &l[i].gw), 0);
		}
		assert_int_equal(ao_group_wait(&g), 0);
		for (int i = 0; i < 8; i++)
			assert_int_equal(ran[i], 1);
	}
	return NULL;
}

static void test_many_groups(void **state)
{
	(void)state;
	for (int k = 0; k < 2; k++) {
		hex = t_exec_create(k ? AO_EXEC_STEAL : AO_EXEC_SHARED, 2, 0,
				    AO_EXEC_BLOCK);
		t_watchdog_arm(60, "many groups");
		t_run_threads(4, group_hammer, NULL, 0);
		t_watchdog_disarm();
		assert_int_equal(ao_exec_destroy(hex), 0);
	}
}

/* ---- a refused submit is not counted ---- */

struct hold {
	struct ao_work work;
	int started;
	int open;
};

static void hold_fn(struct ao_work *w)
{
	struct hold *h = container_of(w, struct hold, work);

	__atomic_store_n(&h->started, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&h->open, __ATOMIC_ACQUIRE))
		t_sleep_ns(100000);
}

static void test_refused_not_counted(void **state)
{
	struct ao_exec *ex = t_exec_create(AO_EXEC_SHARED, 1, 1, AO_EXEC_FAIL);
	struct hold h = { AO_WORK_INIT(hold_fn), 0, 0 };
	struct leaf l[3];
	int ran[3] = { 0 };
	struct ao_group g;
	struct ao_exec_stats st;

	(void)state;
	t_watchdog_arm(30, "refused group submit");
	assert_int_equal(ao_exec_submit(ex, &h.work), 0);
	/*
	 * Wait until the holder runs.  Its slot is given back when the worker
	 * takes it, before its function runs (with capacity 1 the worker's
	 * credit batch is 1), so the one slot is free once it has started.
	 * The queue depth going to 0 is not enough: it drops before the
	 * worker gives the slot back.
	 */
	while (!__atomic_load_n(&h.started, __ATOMIC_ACQUIRE))
		t_sleep_ns(100000);
	ao_exec_stats(ex, &st);
	assert_int_equal(st.queued, 0);
	ao_group_init(&g, ex);
	for (int i = 0; i < 3; i++) {
		ao_group_work_init(&l[i].gw, leaf_fn);
		l[i].ran = &ran[i];
	}
	assert_int_equal(ao_group_submit(&g, &l[0].gw), 0);
	assert_int_equal(ao_group_submit(&g, &l[1].gw), -EAGAIN);
	assert_int_equal(ao_group_try_submit(&g, &l[2].gw), -EAGAIN);
	assert_int_equal(ao_group_pending(&g), 1);
	__atomic_store_n(&h.open, 1, __ATOMIC_RELEASE);
	assert_int_equal(ao_group_wait(&g), 0);
	t_watchdog_disarm();
	assert_int_equal(ran[0], 1);
	assert_int_equal(ran[1], 0);
	assert_int_equal(ran[2], 0);
	assert_int_equal(ao_exec_destroy(ex), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_done),
		cmocka_unit_test(test_refused_not_counted),
		cmocka_unit_test(test_fib_1_worker),
		cmocka_unit_test(test_fib_2_workers),
		cmocka_unit_test(test_fib_bounded),
		cmocka_unit_test(test_fib_many_workers),
		cmocka_unit_test(test_many_groups),
	};

	ao_clock_calibrate();
	return cmocka_run_group_tests_name("group", tests, NULL, NULL);
}
