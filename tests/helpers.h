/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers for the CMocka runners: threads, a watchdog that turns a
 * hang into a failure, time, and the CMocka includes in the right order.
 */
#ifndef AORTA_TESTS_HELPERS_H
#define AORTA_TESTS_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <aorta/core/exec.h>

/* Run fn(arg_i) on n threads (args[i] = base + i * stride) and join. */
void t_run_threads(int n, void *(*fn)(void *), void *base, size_t stride);

/*
 * Arm a watchdog: if it is not disarmed within seconds, print what and
 * abort the runner (so a lost wake-up fails the test instead of hanging
 * CI).  One at a time.
 */
void t_watchdog_arm(unsigned int seconds, const char *what);
void t_watchdog_disarm(void);

/* Create an executor with these settings (the rest default); asserts. */
struct ao_exec *t_exec_create(enum ao_exec_kind kind, unsigned int workers,
			      size_t capacity, enum ao_exec_policy policy);

/* Monotonic nanoseconds. */
uint64_t t_now_ns(void);
/* Burn about ns nanoseconds of CPU (no sleep). */
void t_spin_ns(uint64_t ns);
/* Sleep for ns nanoseconds. */
void t_sleep_ns(uint64_t ns);
/* Scale for stress-test sizes: 1 normally, smaller under sanitizers
 * (AO_TEST_SCALE in the environment overrides). */
double t_scale(void);
/* n * t_scale(), at least min. */
long t_scaled(long n, long min);

#endif /* AORTA_TESTS_HELPERS_H */
