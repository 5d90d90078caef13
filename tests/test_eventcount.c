// SPDX-License-Identifier: MIT
/*
 * The event count: prepare/cancel/wait/notify semantics, timeouts, and
 * stress tests in which a lost wake-up would hang (the watchdog fails it).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <aorta/sync/eventcount.h>
#include "helpers.h"

static void test_notify_before_wait(void **state)
{
	struct ao_eventcount ec = AO_EVENTCOUNT_INIT;
	uint32_t key;

	(void)state;
	assert_false(ao_ec_has_waiters(&ec));
	key = ao_ec_prepare(&ec);
	assert_true(ao_ec_has_waiters(&ec));
	/* A notify between prepare and wait must not be lost. */
	ao_ec_notify_one(&ec);
	t_watchdog_arm(10, "notify before wait lost");
	assert_int_equal(ao_ec_wait(&ec, key, -1), 0);
	t_watchdog_disarm();
	assert_false(ao_ec_has_waiters(&ec));
}

static void test_cancel(void **state)
{
	struct ao_eventcount ec;

	(void)state;
	ao_ec_init(&ec);
	(void)ao_ec_prepare(&ec);
	(void)ao_ec_prepare(&ec);
	assert_true(ao_ec_has_waiters(&ec));
	ao_ec_cancel(&ec);
	assert_true(ao_ec_has_waiters(&ec));
	ao_ec_cancel(&ec);
	assert_false(ao_ec_has_waiters(&ec));
	/* No waiters: a notify is a no-op. */
	ao_ec_notify_one(&ec);
	ao_ec_notify_all(&ec);
	assert_int_equal(__atomic_load_n(&ec.word, __ATOMIC_RELAXED), 0);
}

static void test_timeout(void **state)
{
	struct ao_eventcount ec = AO_EVENTCOUNT_INIT;
	uint32_t key;
	uint64_t t0;

	(void)state;
	key = ao_ec_prepare(&ec);
	t0 = t_now_ns();
	assert_int_equal(ao_ec_wait(&ec, key, 20000000), -ETIMEDOUT);
	assert_true(t_now_ns() - t0 >= 20000000);
	assert_false(ao_ec_has_waiters(&ec));
	/* A stale key (a notify already happened) returns at once. */
	key = ao_ec_prepare(&ec);
	ao_ec_notify_all(&ec);
	assert_int_equal(ao_ec_wait(&ec, key, 0), 0);
	key = ao_ec_prepare(&ec);
	assert_int_equal(ao_ec_wait(&ec, key, 0), -ETIMEDOUT);
}

/* ---- one-shot flag: a sleeping waiter is woken ---- */

struct flag_arg {
	struct ao_eventcount ec;
	int flag;
	int woke;
};

static void *flag_waiter(void *p)
{
	struct flag_arg *a = p;

	for (;;) {
		uint32_t key = ao_ec_prepare(&a->ec);

		/* ACQUIRE: pairs with the RELEASE store of the flag. */
		if (__atomic_load_n(&a->flag, __ATOMIC_ACQUIRE)) {
			ao_ec_cancel(&a->ec);
			break;
		}
		ao_ec_wait(&a->ec, key, -1);
	}
	__atomic_fetch_add(&a->woke, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void test_notify_all_wakes_all(void **state)
{
	struct flag_arg a = { AO_EVENTCOUNT_INIT, 0, 0 };
	pthread_t t[6];

	(void)state;
	t_watchdog_arm(20, "notify_all lost a waiter");
	for (int i = 0; i < 6; i++)
		assert_int_equal(pthread_create(&t[i], NULL, flag_waiter, &a),
				 0);
	t_sleep_ns(20000000); /* let them go to sleep (not required) */
	__atomic_store_n(&a.flag, 1, __ATOMIC_RELEASE);
	ao_ec_notify_all(&a.ec);
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	t_watchdog_disarm();
	assert_int_equal(a.woke, 6);
	assert_false(ao_ec_has_waiters(&a.ec));
}

/* ---- stress: tokens produced and consumed, notify_one per token ---- */

struct tok {
	struct ao_eventcount ec;
	long tokens; /* available */
	long consumed;
	long target;
};

static bool take_token(struct tok *t)
{
	long v = __atomic_load_n(&t->tokens, __ATOMIC_ACQUIRE);

	while (v > 0)
		if (__atomic_compare_exchange_n(&t->tokens, &v, v - 1, false,
						__ATOMIC_ACQUIRE,
						__ATOMIC_ACQUIRE))
			return true;
	return false;
}

static void *consumer(void *p)
{
	struct tok *t = p;

	for (;;) {
		uint32_t key;

		if (__atomic_load_n(&t->consumed, __ATOMIC_ACQUIRE) >=
		    t->target)
			return NULL;
		if (take_token(t)) {
			if (__atomic_add_fetch(&t->consumed, 1,
					       __ATOMIC_ACQ_REL) >= t->target)
				ao_ec_notify_all(&t->ec); /* let the rest out */
			continue;
		}
		key = ao_ec_prepare(&t->ec);
		if (__atomic_load_n(&t->tokens, __ATOMIC_ACQUIRE) > 0 ||
		    __atomic_load_n(&t->consumed, __ATOMIC_ACQUIRE) >=
			    t->target) {
			ao_ec_cancel(&t->ec);
			continue;
		}
		/* No timeout: a lost wake-up hangs and the watchdog fires. */
		ao_ec_wait(&t->ec, key, -1);
	}
}

static void *producer(void *p)
{
	struct tok *t = p;
	long n = t->target / 2;

	for (long i = 0; i < n; i++) {
		/* RELEASE: pairs with the consumers' ACQUIRE loads. */
		__atomic_add_fetch(&t->tokens, 1, __ATOMIC_RELEASE);
		ao_ec_notify_one(&t->ec);
		if ((i & 63) == 0)
			sched_yield();
	}
	return NULL;
}

static void test_stress_no_lost_wakeup(void **state)
{
	struct tok t = { AO_EVENTCOUNT_INIT, 0, 0, 0 };
	pthread_t c[4], p[2];

	(void)state;
	t.target = 2 * t_scaled(100000, 5000);
	t_watchdog_arm(120, "event count lost a wake-up");
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&c[i], NULL, consumer, &t), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&p[i], NULL, producer, &t), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(p[i], NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(c[i], NULL);
	t_watchdog_disarm();
	assert_int_equal(t.consumed, t.target);
	assert_int_equal(t.tokens, 0);
	assert_false(ao_ec_has_waiters(&t.ec));
}

/* ---- stress: ping-pong, the worst case for the prepare/wait window ---- */

struct pp {
	struct ao_eventcount ec[2];
	long turn; /* whose turn: even = thread 0, odd = thread 1 */
	long rounds;
};

struct pp_arg {
	struct pp *pp;
	int me;
};

static void *pinger(void *p)
{
	struct pp_arg *a = p;
	struct pp *pp = a->pp;

	for (;;) {
		long turn = __atomic_load_n(&pp->turn, __ATOMIC_ACQUIRE);
		uint32_t key;

		if (turn >= pp->rounds)
			return NULL;
		if ((turn & 1) == a->me) {
			__atomic_store_n(&pp->turn, turn + 1, __ATOMIC_RELEASE);
			ao_ec_notify_one(&pp->ec[!a->me]);
			continue;
		}
		key = ao_ec_prepare(&pp->ec[a->me]);
		if (__atomic_load_n(&pp->turn, __ATOMIC_ACQUIRE) != turn) {
			ao_ec_cancel(&pp->ec[a->me]);
			continue;
		}
		ao_ec_wait(&pp->ec[a->me], key, -1);
	}
}

static void test_stress_ping_pong(void **state)
{
	struct pp pp = { { AO_EVENTCOUNT_INIT, AO_EVENTCOUNT_INIT }, 0, 0 };
	struct pp_arg a[2] = { { &pp, 0 }, { &pp, 1 } };

	(void)state;
	pp.rounds = t_scaled(50000, 2000);
	t_watchdog_arm(120, "ping-pong lost a wake-up");
	t_run_threads(2, pinger, a, sizeof(a[0]));
	t_watchdog_disarm();
	assert_true(pp.turn >= pp.rounds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_notify_before_wait),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_notify_all_wakes_all),
		cmocka_unit_test(test_stress_no_lost_wakeup),
		cmocka_unit_test(test_stress_ping_pong),
	};

	return cmocka_run_group_tests_name("eventcount", tests, NULL, NULL);
}
