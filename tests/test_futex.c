// SPDX-License-Identifier: MIT
/* The futex wrapper: value mismatch, timeout, wake of a sleeper. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <aorta/sync/futex.h>
#include "helpers.h"

static void test_mismatch(void **state)
{
	uint32_t w = 5;

	(void)state;
	assert_int_equal(ao_futex_wait(&w, 4, -1), -EAGAIN);
}

static void test_timeout(void **state)
{
	uint32_t w = 0;
	uint64_t t0 = t_now_ns();

	(void)state;
	assert_int_equal(ao_futex_wait(&w, 0, 10000000), -ETIMEDOUT);
	assert_true(t_now_ns() - t0 >= 10000000);
	assert_int_equal(ao_futex_wait(&w, 0, 0), -ETIMEDOUT);
}

static void test_wake_nobody(void **state)
{
	uint32_t w = 0;

	(void)state;
	assert_int_equal(ao_futex_wake(&w, 1), 0);
	assert_int_equal(ao_futex_wake(&w, 0), -EINVAL);
	assert_int_equal(ao_futex_wake(&w, -1), -EINVAL);
}

static uint32_t word;
static int sleeping;

static void *sleeper(void *arg)
{
	int *ret = arg;

	__atomic_store_n(&sleeping, 1, __ATOMIC_RELEASE);
	/* ACQUIRE load pairs with the RELEASE store in the waker. */
	while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) == 0) {
		int r = ao_futex_wait(&word, 0, -1);

		if (r && r != -EAGAIN && r != -EINTR)
			*ret = r;
	}
	return NULL;
}

static void test_wake_sleeper(void **state)
{
	pthread_t t;
	int ret = 0, woken = 0;

	(void)state;
	word = 0;
	t_watchdog_arm(10, "futex sleeper never woken");
	assert_int_equal(pthread_create(&t, NULL, sleeper, &ret), 0);
	while (!__atomic_load_n(&sleeping, __ATOMIC_ACQUIRE))
		sched_yield();
	/* Give it time to reach the kernel, then one store and one wake:
	 * the sleeper must come out (a lost wake hangs: the watchdog). */
	t_sleep_ns(20000000);
	__atomic_store_n(&word, 1, __ATOMIC_RELEASE);
	woken = ao_futex_wake(&word, 1);
	assert_true(woken == 0 || woken == 1);
	pthread_join(t, NULL);
	t_watchdog_disarm();
	assert_int_equal(ret, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mismatch),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_wake_nobody),
		cmocka_unit_test(test_wake_sleeper),
	};

	return cmocka_run_group_tests_name("futex", tests, NULL, NULL);
}
