// SPDX-License-Identifier: MIT
/*
 * Debug builds (make DEBUG=1) catch lock misuse: unlocking a lock that is
 * not held, a double unlock, and unlocking another thread's lock abort with
 * a message naming the lock and the call site.  Each case runs in a forked
 * child; the parent checks the child died of SIGABRT and what it printed.
 * In other builds the checks are compiled out and these tests are skipped.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <aorta/sync/spinlock.h>
#include "helpers.h"

static struct ao_spinlock lock = AO_SPINLOCK_INIT;

/* Run fn in a child with stderr captured; return what it printed. */
static void expect_abort(void (*fn)(void), const char *needle)
{
	char buf[1024], addr[32];
	int fds[2], status;
	ssize_t n, len = 0;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 2);
		close(fds[0]);
		fn();
		_exit(0); /* not reached if the check works */
	}
	close(fds[1]);
	while (len < (ssize_t)sizeof(buf) - 1 &&
	       (n = read(fds[0], buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	buf[len] = 0;
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
	assert_non_null(strstr(buf, needle));
	snprintf(addr, sizeof(addr), "%p", (void *)&lock);
	assert_non_null(strstr(buf, addr)); /* names the lock */
	assert_non_null(strstr(buf, "test_lock_debug.c:")); /* call site */
}

static void unlock_free(void)
{
	ao_spin_unlock(&lock);
}

static void double_unlock(void)
{
	ao_spin_lock(&lock);
	ao_spin_unlock(&lock);
	ao_spin_unlock(&lock);
}

static void *locker(void *arg)
{
	(void)arg;
	ao_spin_lock(&lock);
	return NULL;
}

static void foreign_unlock(void)
{
	pthread_t t;

	pthread_create(&t, NULL, locker, NULL);
	pthread_join(t, NULL);
	ao_spin_unlock(&lock);
}

static void test_unlock_not_held(void **state)
{
	(void)state;
	if (!AO_CONFIG_DEBUG)
		skip();
	expect_abort(unlock_free, "not held");
}

static void test_double_unlock(void **state)
{
	(void)state;
	if (!AO_CONFIG_DEBUG)
		skip();
	expect_abort(double_unlock, "double unlock");
}

static void test_unlock_other_thread(void **state)
{
	(void)state;
	if (!AO_CONFIG_DEBUG)
		skip();
	expect_abort(foreign_unlock, "held by another thread");
}

/* Correct use raises nothing, in any build. */
static void test_correct_use_silent(void **state)
{
	struct ao_spinlock l = AO_SPINLOCK_INIT;

	(void)state;
	for (int i = 0; i < 1000; i++) {
		ao_spin_lock(&l);
		ao_spin_unlock(&l);
		if (ao_spin_trylock(&l))
			ao_spin_unlock(&l);
	}
	assert_false(ao_spin_is_locked(&l));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_correct_use_silent),
		cmocka_unit_test(test_unlock_not_held),
		cmocka_unit_test(test_double_unlock),
		cmocka_unit_test(test_unlock_other_thread),
	};

	return cmocka_run_group_tests_name("lock_debug", tests, NULL, NULL);
}
