// SPDX-License-Identifier: MIT
/*
 * The test-and-test-and-set lock (sync/taslock.h): trylock, mutual
 * exclusion under contention (2 and 16 threads, more than the CPUs, so
 * that waiters reach the yield phase while a holder is preempted), and a
 * waiter that outlasts the spin phase.
 */
#include <pthread.h>
#include <stdbool.h>
#include <aorta/clock.h>
#include "../sync/taslock.h"
#include "helpers.h"

static void test_trylock(void **state)
{
	struct ao_taslock l = AO_TASLOCK_INIT;

	(void)state;
	assert_false(ao_tas_is_locked(&l));
	assert_true(ao_tas_trylock(&l));
	assert_true(ao_tas_is_locked(&l));
	assert_false(ao_tas_trylock(&l));
	ao_tas_unlock(&l);
	assert_false(ao_tas_is_locked(&l));
	ao_tas_lock(&l);
	assert_false(ao_tas_trylock(&l));
	ao_tas_unlock(&l);
	ao_tas_init(&l);
	assert_true(ao_tas_trylock(&l));
	ao_tas_unlock(&l);
}

static struct ao_taslock mx_lock;
static unsigned long mx_counter; /* deliberately not atomic */
static long mx_iters;

static void *mx_worker(void *arg)
{
	(void)arg;
	for (long i = 0; i < mx_iters; i++) {
		ao_tas_lock(&mx_lock);
		mx_counter++;
		ao_tas_unlock(&mx_lock);
	}
	return NULL;
}

static void run_mutex_test(int threads)
{
	ao_tas_init(&mx_lock);
	mx_counter = 0;
	mx_iters = t_scaled(200000, 2000);
	t_watchdog_arm(120, "taslock mutual exclusion");
	t_run_threads(threads, mx_worker, NULL, 0);
	t_watchdog_disarm();
	assert_int_equal(mx_counter, (unsigned long)threads * mx_iters);
	assert_false(ao_tas_is_locked(&mx_lock));
}

static void test_mutual_exclusion_2(void **state)
{
	(void)state;
	run_mutex_test(2);
}

static void test_mutual_exclusion_16(void **state)
{
	(void)state;
	run_mutex_test(16);
}

/* A waiter that spins past AO_TASLOCK_SPINS and yields still gets the
 * lock once it is free, and sees what the holder wrote. */
static struct ao_taslock ws_lock;
static int ws_value;
static int ws_seen;
static int ws_waiting;

static void *ws_waiter(void *arg)
{
	(void)arg;
	__atomic_store_n(&ws_waiting, 1, __ATOMIC_RELEASE);
	ao_tas_lock(&ws_lock);
	ws_seen = ws_value;
	ao_tas_unlock(&ws_lock);
	return NULL;
}

static void test_long_wait(void **state)
{
	pthread_t th;

	(void)state;
	ao_tas_init(&ws_lock);
	ws_value = 0;
	ws_seen = -1;
	ao_tas_lock(&ws_lock);
	t_watchdog_arm(60, "taslock long wait");
	assert_int_equal(pthread_create(&th, NULL, ws_waiter, NULL), 0);
	while (!__atomic_load_n(&ws_waiting, __ATOMIC_ACQUIRE))
		t_sleep_ns(100000);
	/* Long enough for the waiter to reach its yields. */
	t_sleep_ns(20000000);
	ws_value = 42;
	ao_tas_unlock(&ws_lock);
	assert_int_equal(pthread_join(th, NULL), 0);
	t_watchdog_disarm();
	assert_int_equal(ws_seen, 42);
	assert_false(ao_tas_is_locked(&ws_lock));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trylock),
		cmocka_unit_test(test_mutual_exclusion_2),
		cmocka_unit_test(test_mutual_exclusion_16),
		cmocka_unit_test(test_long_wait),
	};

	ao_clock_calibrate();
	return cmocka_run_group_tests_name("taslock", tests, NULL, NULL);
}
