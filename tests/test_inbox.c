// SPDX-License-Identifier: MIT
/*
 * The executor's inbox queue (core/inbox.h), on its own: FIFO order across
 * the inbox and the locked list, the batch sizes a take hands out, the
 * push that reports an empty inbox, the take that reports items it left
 * hidden, the patience that leaves a young inbox alone, and a stress test
 * of producers pushing while consumers take (every item taken once, each
 * producer's items in order for each consumer), which runs under TSan.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/clock.h>
#include "../core/inbox.h"
#include "helpers.h"

struct item {
	struct ao_work work;
	unsigned int prod;
	unsigned int seq;
};

static void nop_fn(struct ao_work *w)
{
	(void)w;
}

static void items_init(struct item *it, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		ao_work_init(&it[i].work, nop_fn);
		it[i].prod = 0;
		it[i].seq = i;
	}
}

static unsigned int seq_of(struct ao_work *w)
{
	return container_of(w, struct item, work)->seq;
}

/* Take everything, one take at a time, checking the order from *next. */
static void take_all_in_order(struct ao_inbox *q, unsigned int *next,
			      unsigned int end)
{
	while (*next < end) {
		struct ao_work *x, *rest;
		unsigned int nrest;
		bool hidden;

		x = ao_inbox_take(q, 1, 1000, &rest, &nrest, &hidden, 0);
		assert_non_null(x);
		assert_int_equal(seq_of(x), (*next)++);
		for (unsigned int i = 0; i < nrest; i++) {
			assert_non_null(rest);
			assert_int_equal(seq_of(rest), (*next)++);
			rest = rest->next;
		}
		assert_null(rest);
	}
}

static void test_empty(void **state)
{
	struct ao_inbox q;
	struct ao_work *rest = (struct ao_work *)&q;
	unsigned int nrest = 7;
	bool hidden = true;

	(void)state;
	ao_inbox_init(&q);
	assert_false(ao_inbox_peek(&q));
	assert_null(ao_inbox_take(&q, 1, 16, &rest, &nrest, &hidden, 0));
	assert_false(hidden);
	assert_false(ao_spin_is_locked(&q.lock));
}

/* The push that finds the inbox empty says so, and only that one. */
static void test_push_reports_empty(void **state)
{
	struct ao_inbox q;
	struct item it[4];
	unsigned int next = 0;

	(void)state;
	items_init(it, 4);
	ao_inbox_init(&q);
	assert_true(ao_inbox_push(&q, &it[0].work));
	assert_true(ao_inbox_peek(&q));
	assert_false(ao_inbox_push(&q, &it[1].work));
	assert_false(ao_inbox_push(&q, &it[2].work));
	take_all_in_order(&q, &next, 3);
	assert_false(ao_inbox_peek(&q));
	/* Detached: the next push finds it empty again. */
	assert_true(ao_inbox_push(&q, &it[3].work));
	take_all_in_order(&q, &next, 4);
}

/* FIFO: pushes one by one come out oldest first, and what is in the locked
 * list comes out before what was pushed onto the inbox after it. */
static void test_fifo(void **state)
{
	enum { N = 100 };
	struct ao_inbox q;
	struct item *it = calloc(N, sizeof(*it));
	unsigned int next = 0;

	(void)state;
	assert_non_null(it);
	items_init(it, N);
	ao_inbox_init(&q);
	for (unsigned int i = 0; i < 40; i++)
		ao_inbox_push(&q, &it[i].work);
	/* A list of 20 linked by hand, as a ring's overflow is. */
	for (unsigned int i = 40; i < 59; i++)
		it[i].work.next = &it[i + 1].work;
	it[59].work.next = NULL;
	take_all_in_order(&q, &next, 10);
	/* head still holds 10..39: the list goes after them. */
	ao_inbox_push_list(&q, &it[40].work, &it[59].work, 20);
	for (unsigned int i = 60; i < N; i++)
		ao_inbox_push(&q, &it[i].work);
	take_all_in_order(&q, &next, N);
	assert_false(ao_inbox_peek(&q));
	free(it);
}

/* A take hands out len / div + 1 items, at most max, and no more than
 * there are. */
static void test_batch_sizes(void **state)
{
	enum { N = 64 };
	struct ao_inbox q;
	struct item it[N];
	struct ao_work *x, *rest;
	unsigned int nrest;
	bool hidden;

	(void)state;
	items_init(it, N);
	ao_inbox_init(&q);
	for (unsigned int i = 0; i < N; i++)
		ao_inbox_push(&q, &it[i].work);
	/* 64 / 4 + 1 = 17, capped at 16. */
	x = ao_inbox_take(&q, 4, 16, &rest, &nrest, &hidden, 0);
	assert_ptr_equal(x, &it[0].work);
	assert_int_equal(nrest, 15);
	assert_true(hidden); /* it refilled head and left 48 there */
	/* 48 / 4 + 1 = 13. */
	x = ao_inbox_take(&q, 4, 16, &rest, &nrest, &hidden, 0);
	assert_ptr_equal(x, &it[16].work);
	assert_int_equal(nrest, 12);
	assert_false(hidden); /* head was not empty: nothing was hidden */
	assert_ptr_equal(rest, &it[17].work);
	/* 35 / 1 + 1 = 36, capped at the 35 there are. */
	x = ao_inbox_take(&q, 1, 100, &rest, &nrest, &hidden, 0);
	assert_ptr_equal(x, &it[29].work);
	assert_int_equal(nrest, 34);
	assert_null(ao_inbox_take(&q, 1, 100, &rest, &nrest, &hidden, 0));
	/* A take of everything a refill brought hides nothing. */
	ao_inbox_push(&q, &it[0].work);
	ao_inbox_push(&q, &it[1].work);
	x = ao_inbox_take(&q, 1, 100, &rest, &nrest, &hidden, 0);
	assert_ptr_equal(x, &it[0].work);
	assert_int_equal(nrest, 1);
	assert_false(hidden);
}

/* With patience, an inbox younger than that is left alone while head is
 * empty; without, or once old enough, it is taken. */
static void test_patience(void **state)
{
	struct ao_inbox q;
	struct item it[3];
	struct ao_work *x, *rest;
	unsigned int nrest;
	bool hidden;
	uint64_t forever = ao_ns_to_cycles(3600ull * 1000000000ull);
	uint64_t short_wait = ao_ns_to_cycles(1000);

	(void)state;
	items_init(it, 3);
	ao_inbox_init(&q);
	ao_inbox_push(&q, &it[0].work);
	assert_null(ao_inbox_take(&q, 1, 1, &rest, &nrest, &hidden, forever));
	assert_true(ao_inbox_peek(&q)); /* still there, still visible */
	t_sleep_ns(2000000);
	x = ao_inbox_take(&q, 1, 1, &rest, &nrest, &hidden, short_wait);
	assert_ptr_equal(x, &it[0].work);
	/* Items in head are taken whatever the patience. */
	ao_inbox_push(&q, &it[1].work);
	ao_inbox_push(&q, &it[2].work);
	x = ao_inbox_take(&q, 1, 1, &rest, &nrest, &hidden, 0);
	assert_ptr_equal(x, &it[1].work);
	assert_true(hidden);
	x = ao_inbox_take(&q, 1, 1, &rest, &nrest, &hidden, forever);
	assert_ptr_equal(x, &it[2].work);
}

/* ---- stress: producers push, consumers take ---- */

#define ST_PRODUCERS 3
#define ST_CONSUMERS 3

static struct ao_inbox st_q;
static struct item *st_items;
static unsigned int st_per_prod;
static unsigned int *st_taken; /* per item, how many times */
static uint64_t st_total;
static uint64_t st_empty_pushes;
static uint64_t st_bad; /* items out of order, or not ours */

static void *st_producer(void *arg)
{
	unsigned int p = (unsigned int)(uintptr_t)arg;

	struct item *base = &st_items[p * st_per_prod];

	for (unsigned int i = 0; i < st_per_prod; i++) {
		base[i].prod = p;
		base[i].seq = i;
		ao_work_init(&base[i].work, nop_fn);
	}
	/* The last producer pushes lists of 8, as a ring's overflow does
	 * (in order: all of its items go through head..tail). */
	if (p == ST_PRODUCERS - 1) {
		for (unsigned int i = 0; i < st_per_prod; i += 8) {
			unsigned int n = st_per_prod - i < 8 ? st_per_prod - i :
							       8;

			for (unsigned int k = 0; k + 1 < n; k++)
				base[i + k].work.next = &base[i + k + 1].work;
			base[i + n - 1].work.next = NULL;
			ao_inbox_push_list(&st_q, &base[i].work,
					   &base[i + n - 1].work, n);
		}
		return NULL;
	}
	for (unsigned int i = 0; i < st_per_prod; i++)
		if (ao_inbox_push(&st_q, &base[i].work))
			__atomic_fetch_add(&st_empty_pushes, 1,
					   __ATOMIC_RELAXED);
	return NULL;
}

static void st_seen(struct ao_work *w, int64_t *last)
{
	struct item *it = container_of(w, struct item, work);
	unsigned int idx = it->prod * st_per_prod + it->seq;

	/* No cmocka assertion off the main thread: count what is wrong. */
	if (it->prod >= ST_PRODUCERS) {
		__atomic_fetch_add(&st_bad, 1, __ATOMIC_RELAXED);
		return;
	}
	/* Each producer's items reach one consumer in push order. */
	if ((int64_t)it->seq <= last[it->prod])
		__atomic_fetch_add(&st_bad, 1, __ATOMIC_RELAXED);
	last[it->prod] = it->seq;
	__atomic_fetch_add(&st_taken[idx], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&st_total, 1, __ATOMIC_RELAXED);
}

static void *st_consumer(void *arg)
{
	unsigned int c = (unsigned int)(uintptr_t)arg;
	uint64_t all = (uint64_t)ST_PRODUCERS * st_per_prod;
	uint64_t patience = c == 0 ? ao_ns_to_cycles(1000) : 0;
	int64_t last[ST_PRODUCERS];

	for (unsigned int p = 0; p < ST_PRODUCERS; p++)
		last[p] = -1;
	while (__atomic_load_n(&st_total, __ATOMIC_RELAXED) < all) {
		struct ao_work *x, *rest;
		unsigned int nrest;
		bool hidden;

		if (!ao_inbox_peek(&st_q)) {
			cpu_relax();
			continue;
		}
		x = ao_inbox_take(&st_q, 1 + c, 16, &rest, &nrest, &hidden,
				  patience);
		if (!x)
			continue;
		st_seen(x, last);
		for (unsigned int i = 0; i < nrest; i++) {
			struct ao_work *n = rest->next;

			st_seen(rest, last);
			rest = n;
		}
	}
	return NULL;
}

static void *st_thread(void *arg)
{
	uintptr_t i = (uintptr_t)arg;

	if (i < ST_PRODUCERS)
		return st_producer((void *)i);
	return st_consumer((void *)(i - ST_PRODUCERS));
}

static void test_stress(void **state)
{
	uint64_t all;
	pthread_t th[ST_PRODUCERS + ST_CONSUMERS];

	(void)state;
	st_per_prod = (unsigned int)t_scaled(200000, 5000);
	all = (uint64_t)ST_PRODUCERS * st_per_prod;
	st_items = calloc(all, sizeof(*st_items));
	st_taken = calloc(all, sizeof(*st_taken));
	assert_non_null(st_items);
	assert_non_null(st_taken);
	st_total = 0;
	st_empty_pushes = 0;
	st_bad = 0;
	ao_inbox_init(&st_q);
	t_watchdog_arm(300, "inbox stress");
	for (uintptr_t i = 0; i < ST_PRODUCERS + ST_CONSUMERS; i++)
		assert_int_equal(
			pthread_create(&th[i], NULL, st_thread, (void *)i), 0);
	for (unsigned int i = 0; i < ST_PRODUCERS + ST_CONSUMERS; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	t_watchdog_disarm();
	assert_int_equal(st_total, all);
	assert_int_equal(st_bad, 0);
	for (uint64_t i = 0; i < all; i++)
		assert_int_equal(st_taken[i], 1);
	assert_false(ao_inbox_peek(&st_q));
	/* At least the first push found it empty; at most every one did. */
	assert_true(st_empty_pushes >= 1 && st_empty_pushes <= all);
	free(st_items);
	free(st_taken);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_push_reports_empty),
		cmocka_unit_test(test_fifo),
		cmocka_unit_test(test_batch_sizes),
		cmocka_unit_test(test_patience),
		cmocka_unit_test(test_stress),
	};

	ao_clock_calibrate();
	return cmocka_run_group_tests_name("inbox", tests, NULL, NULL);
}
