// SPDX-License-Identifier: MIT
/*
 * The work-stealing deque alone: LIFO for the owner, FIFO for thieves, a
 * full ring refuses, take_half, and one owner pushing and popping against
 * several thieves for millions of operations with every item taken
 * exactly once.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "../core/deque.h"
#include "helpers.h"

static struct ao_work *items;

static void setup_items(long n)
{
	items = calloc((size_t)n, sizeof(*items));
	assert_non_null(items);
}

static struct ao_deque *new_deque(void)
{
	void *mem = NULL;

	assert_int_equal(posix_memalign(&mem, 64, sizeof(struct ao_deque)), 0);
	ao_deque_init(mem);
	return mem;
}

static void test_single_thread(void **state)
{
	struct ao_deque *d = new_deque();
	struct ao_work *w;

	(void)state;
	setup_items(AO_DEQUE_SIZE + 1);
	assert_null(ao_deque_pop(d));
	assert_int_equal(ao_deque_steal(d, &w), AO_STEAL_EMPTY);
	assert_int_equal(ao_deque_size(d), 0);
	/* Fill it: the ring refuses the one past its size. */
	for (int64_t i = 0; i < AO_DEQUE_SIZE; i++)
		assert_true(ao_deque_push(d, &items[i]));
	assert_false(ao_deque_push(d, &items[AO_DEQUE_SIZE]));
	assert_int_equal(ao_deque_size(d), AO_DEQUE_SIZE);
	/* Owner end is LIFO, thieves' end FIFO. */
	assert_ptr_equal(ao_deque_pop(d), &items[AO_DEQUE_SIZE - 1]);
	assert_int_equal(ao_deque_steal(d, &w), AO_STEAL_OK);
	assert_ptr_equal(w, &items[0]);
	assert_int_equal(ao_deque_size(d), AO_DEQUE_SIZE - 2);
	while (ao_deque_pop(d))
		;
	assert_int_equal(ao_deque_size(d), 0);
	/* Wrap around many times. */
	for (int round = 0; round < 10; round++) {
		for (int64_t i = 0; i < AO_DEQUE_SIZE; i++)
			assert_true(ao_deque_push(d, &items[i]));
		for (int64_t i = 0; i < AO_DEQUE_SIZE / 2; i++) {
			assert_int_equal(ao_deque_steal(d, &w), AO_STEAL_OK);
			assert_ptr_equal(w, &items[i]);
		}
		for (int64_t i = AO_DEQUE_SIZE - 1; i >= AO_DEQUE_SIZE / 2; i--)
			assert_ptr_equal(ao_deque_pop(d), &items[i]);
		assert_null(ao_deque_pop(d));
	}
	free(items);
	free(d);
}

static void test_take_half(void **state)
{
	struct ao_deque *d = new_deque();
	struct ao_work *first, *last, *w;
	unsigned int n;
	int64_t i;

	(void)state;
	setup_items(AO_DEQUE_SIZE);
	assert_int_equal(ao_deque_take_half(d, &first, &last), 0);
	assert_true(ao_deque_push(d, &items[0]));
	/* One item: nothing to move. */
	assert_int_equal(ao_deque_take_half(d, &first, &last), 0);
	for (i = 1; i < AO_DEQUE_SIZE; i++)
		assert_true(ao_deque_push(d, &items[i]));
	n = ao_deque_take_half(d, &first, &last);
	assert_int_equal(n, AO_DEQUE_SIZE / 2);
	/* The oldest half, oldest first, linked and terminated. */
	i = 0;
	for (w = first; w; w = w->next, i++)
		assert_ptr_equal(w, &items[i]);
	assert_int_equal(i, AO_DEQUE_SIZE / 2);
	assert_ptr_equal(last, &items[AO_DEQUE_SIZE / 2 - 1]);
	assert_int_equal(ao_deque_size(d), AO_DEQUE_SIZE / 2);
	/* Room again, and the newer half is still there. */
	assert_true(ao_deque_push(d, &items[0]));
	assert_ptr_equal(ao_deque_pop(d), &items[0]);
	assert_int_equal(ao_deque_steal(d, &w), AO_STEAL_OK);
	assert_ptr_equal(w, &items[AO_DEQUE_SIZE / 2]);
	free(items);
	free(d);
}

/* ---- one owner against several thieves ---- */

#define THIEVES 3

static struct ao_deque *sd;
static int *taken; /* per item: how many times it was taken */
static long n_items;
static int owner_done;
static long stolen_by[THIEVES];

static void take(struct ao_work *w)
{
	long idx = w - items;

	assert_true(idx >= 0 && idx < n_items);
	__atomic_fetch_add(&taken[idx], 1, __ATOMIC_RELAXED);
}

static void *thief(void *arg)
{
	long *mine = arg;

	for (;;) {
		/* Read before the steal: empty after the owner stopped
		 * pushing and popping means empty for good. */
		int done = __atomic_load_n(&owner_done, __ATOMIC_ACQUIRE);
		struct ao_work *w;
		enum ao_steal r = ao_deque_steal(sd, &w);

		if (r == AO_STEAL_OK) {
			take(w);
			(*mine)++;
		} else if (r == AO_STEAL_EMPTY && done) {
			break;
		}
	}
	return NULL;
}

static void run_owner(bool with_half)
{
	pthread_t t[THIEVES];
	long next = 0;
	uint64_t rng = 88172645463325252ull;
	long stolen = 0, popped = 0, halved = 0;

	sd = new_deque();
	taken = calloc((size_t)n_items, sizeof(int));
	assert_non_null(taken);
	owner_done = 0;
	memset(stolen_by, 0, sizeof(stolen_by));
	for (int i = 0; i < THIEVES; i++)
		assert_int_equal(
			pthread_create(&t[i], NULL, thief, &stolen_by[i]), 0);
	while (next < n_items) {
		int burst;

		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		/* Push a burst, then pop part of it: the deque swings
		 * between empty (owner and thieves race for the last item)
		 * and full (take_half when asked for, else pop). */
		burst = (int)(rng % 300) + 1;
		for (int i = 0; i < burst && next < n_items; i++) {
			if (ao_deque_push(sd, &items[next])) {
				next++;
				continue;
			}
			if (with_half) {
				struct ao_work *f = NULL, *l = NULL, *w;
				unsigned int n = ao_deque_take_half(sd, &f, &l);

				for (w = f; w; w = w->next) {
					take(w);
					halved++;
				}
				(void)n;
			} else {
				struct ao_work *w = ao_deque_pop(sd);

				if (w) {
					take(w);
					popped++;
				}
			}
		}
		for (int i = (int)(rng >> 40) % (burst + 1); i > 0; i--) {
			struct ao_work *w = ao_deque_pop(sd);

			if (!w)
				break;
			take(w);
			popped++;
		}
	}
	for (struct ao_work *w; (w = ao_deque_pop(sd));) {
		take(w);
		popped++;
	}
	__atomic_store_n(&owner_done, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < THIEVES; i++) {
		pthread_join(t[i], NULL);
		stolen += stolen_by[i];
	}
	for (long i = 0; i < n_items; i++)
		assert_int_equal(taken[i], 1);
	assert_int_equal(popped + stolen + halved, n_items);
	assert_int_equal(ao_deque_size(sd), 0);
	free(taken);
	free(sd);
}

static void test_owner_vs_thieves(void **state)
{
	(void)state;
	n_items = t_scaled(3000000, 100000);
	setup_items(n_items);
	t_watchdog_arm(60, "deque owner vs thieves");
	run_owner(false);
	t_watchdog_disarm();
	free(items);
}

static void test_owner_vs_thieves_take_half(void **state)
{
	(void)state;
	n_items = t_scaled(2000000, 100000);
	setup_items(n_items);
	t_watchdog_arm(60, "deque take_half vs thieves");
	run_owner(true);
	t_watchdog_disarm();
	free(items);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single_thread),
		cmocka_unit_test(test_take_half),
		cmocka_unit_test(test_owner_vs_thieves),
		cmocka_unit_test(test_owner_vs_thieves_take_half),
	};

	return cmocka_run_group_tests_name("deque", tests, NULL, NULL);
}
