/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers for the CMocka runners: threads, a watchdog that turns a
 * hang into a failure, time, loopback clients, the fuzz corpora, the
 * tools and Python scripts that black-box runners drive, and the CMocka
 * includes in the right order.
 */
#ifndef AORTA_TESTS_HELPERS_H
#define AORTA_TESTS_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <aorta/core/exec.h>

/* T_ASAN: 1 in an AddressSanitizer build, else 0. */
#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif
#ifndef T_ASAN
#define T_ASAN 0
#endif

/* Run fn(arg_i) on n threads (args[i] = base + i * stride) and join. */
void t_run_threads(int n, void *(*fn)(void *), void *base, size_t stride);

/*
 * Arm a watchdog: if it is not disarmed within seconds, print what and
 * abort the runner (so a lost wake-up fails the test instead of hanging
 * CI).  One at a time.
 */
void t_watchdog_arm(unsigned int seconds, const char *what);
void t_watchdog_disarm(void);
/* If the watchdog fires, also print ex's statistics (NULL: none); the
 * disarm forgets it.  Call with NULL before destroying ex. */
void t_watchdog_watch(struct ao_exec *ex);

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

/* The process's resident memory in KiB (/proc/self/statm), or -1. */
long t_rss_kib(void);

/* Assert cond within ms_max milliseconds, polling it every millisecond. */
#define WAIT_UNTIL(cond, ms_max)                                    \
	do {                                                        \
		for (int __i = 0; __i < (ms_max) && !(cond); __i++) \
			t_sleep_ns(1000000);                        \
		assert_true(cond);                                  \
	} while (0)

/* A blocking TCP client of 127.0.0.1:port (TCP_NODELAY, 10 s timeouts). */
int t_cl_connect(uint16_t port);
/* The same to a numeric IPv4 or IPv6 address ("::1"). */
int t_cl_connect_to(const char *addr, uint16_t port);
/* Can this machine bind ::1?  (Said once on stderr when not.) */
bool t_ipv6_ok(void);
/* Send all n bytes (asserts). */
void t_cl_write(int fd, const void *p, size_t n);
/* Read exactly n bytes; 0, or -1 on EOF, error or timeout. */
int t_cl_read(int fd, void *p, size_t n);

/* Feed every file of tests/fuzz/corpus/<name>/ to fn; asserts there is one. */
void t_replay_corpus(const char *name, int (*fn)(const uint8_t *, size_t));

/* $AO_TOOLS_DIR/rel (make check sets AO_TOOLS_DIR to the tools' build
 * folder) into path, n bytes: whether that is an executable (false when
 * AO_TOOLS_DIR is unset or empty, or the path does not fit). */
bool t_tool_path(const char *rel, char *path, size_t n);

/*
 * Run /usr/bin/python3 script (a path from the source tree, where make
 * check runs the runners) with the arguments fmt formats (quoted for sh),
 * under timeout(1): SIGTERM after seconds, SIGKILL 5 s later.  The script
 * inherits our environment (setenv() its options first); its stdout and
 * stderr are printed as they come.  The test fails unless it exits 0, and
 * is skipped if it exits 77 (the scripts' "skipped", after saying why).
 */
void t_run_script(unsigned int seconds, const char *script, const char *fmt,
		  ...) __attribute__((format(printf, 3, 4)));

#endif /* AORTA_TESTS_HELPERS_H */
