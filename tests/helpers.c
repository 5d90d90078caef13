// SPDX-License-Identifier: MIT
/* Test helpers (may use anything: they are not the library). */
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "helpers.h"

void t_run_threads(int n, void *(*fn)(void *), void *base, size_t stride)
{
	pthread_t *tids = calloc((size_t)n, sizeof(*tids));

	assert_non_null(tids);
	for (int i = 0; i < n; i++)
		assert_int_equal(
			pthread_create(&tids[i], NULL, fn,
				       (char *)base + (size_t)i * stride),
			0);
	for (int i = 0; i < n; i++)
		assert_int_equal(pthread_join(tids[i], NULL), 0);
	free(tids);
}

struct ao_exec *t_exec_create(enum ao_exec_kind kind, unsigned int workers,
			      size_t capacity, enum ao_exec_policy policy)
{
	struct ao_exec_config cfg = AO_EXEC_CONFIG_INIT;
	struct ao_exec *ex = NULL;

	cfg.kind = kind;
	cfg.workers = workers;
	cfg.capacity = capacity;
	cfg.policy = policy;
	assert_int_equal(ao_exec_create(&cfg, &ex), 0);
	assert_non_null(ex);
	return ex;
}

static const char *wd_what;
static struct ao_exec *wd_exec;

/* The watched executor's counters, so that a CI log shows whether a hang
 * left items queued with the workers asleep (a lost wake-up) or everything
 * run (a drain that missed its notify).  Only counter loads and a
 * formatted write: good enough for a process about to abort. */
static void wd_dump_exec(struct ao_exec *ex)
{
	struct ao_exec_stats st;
	struct ao_exec_worker_stats ws;
	char b[256];
	int n;

	if (ao_exec_stats(ex, &st))
		return;
	n = snprintf(b, sizeof(b),
		     "watchdog: executor: submitted %llu executed %llu queued "
		     "%llu rejected %llu notifies %llu parks %llu wakeups "
		     "%llu\n",
		     (unsigned long long)st.submitted,
		     (unsigned long long)st.executed,
		     (unsigned long long)st.queued,
		     (unsigned long long)st.rejected,
		     (unsigned long long)st.notifies,
		     (unsigned long long)st.parks,
		     (unsigned long long)st.wakeups);
	if (n > 0 && write(2, b, (size_t)n) < 0)
		return;
	for (unsigned int i = 0; i < st.workers; i++) {
		if (ao_exec_worker_stats(ex, i, &ws))
			return;
		n = snprintf(b, sizeof(b),
			     "watchdog:   worker %u: executed %llu parks %llu "
			     "wakeups %llu ring %llu\n",
			     i, (unsigned long long)ws.executed,
			     (unsigned long long)ws.parks,
			     (unsigned long long)ws.wakeups,
			     (unsigned long long)ws.depth);
		if (n > 0 && write(2, b, (size_t)n) < 0)
			return;
	}
}

static void wd_fire(int sig)
{
	static const char msg[] = "watchdog: test hung: ";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0 ||
	    write(2, wd_what, strlen(wd_what)) < 0 || write(2, "\n", 1) < 0)
		_exit(3);
	if (wd_exec)
		wd_dump_exec(wd_exec);
	abort();
}

void t_watchdog_watch(struct ao_exec *ex)
{
	wd_exec = ex;
}

/*
 * An abort() that says nothing (cnats' and libc's own, or one with its
 * message lost) leaves a CI log with "Aborted" and no culprit: name the
 * watched test and write the stack, then abort as before (a test that
 * expects the abort in a child still sees SIGABRT).  backtrace() is
 * called once when armed, so that the handler does not load libgcc.
 */
static void wd_abort(int sig)
{
	static const char msg[] = "aborted (last watched: ";
	void *pcs[64];
	int n;

	if (write(2, msg, sizeof(msg) - 1) >= 0 && wd_what &&
	    write(2, wd_what, strlen(wd_what)) >= 0 &&
	    write(2, ")\n", 2) >= 0) {
		n = backtrace(pcs, 64);
		backtrace_symbols_fd(pcs, n, 2);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

void t_watchdog_arm(unsigned int seconds, const char *what)
{
	static bool abort_set;

	wd_what = what;
	if (!abort_set) {
		void *pc;

		backtrace(&pc, 1);
		signal(SIGABRT, wd_abort);
		abort_set = true;
	}
	signal(SIGALRM, wd_fire);
	alarm(seconds);
}

void t_watchdog_disarm(void)
{
	alarm(0);
	wd_exec = NULL;
}

uint64_t t_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void t_spin_ns(uint64_t ns)
{
	uint64_t end = t_now_ns() + ns;

	while (t_now_ns() < end)
		;
}

void t_sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
			       .tv_nsec = (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

double t_scale(void)
{
	const char *e = getenv("AO_TEST_SCALE");

	if (e && *e)
		return atof(e);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
	return 0.2;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
	return 0.2;
#endif
#endif
	return 1.0;
}

long t_scaled(long n, long min)
{
	long v = (long)((double)n * t_scale());

	return v < min ? min : v;
}

int t_cl_connect(uint16_t port)
{
	return t_cl_connect_to("127.0.0.1", port);
}

int t_cl_connect_to(const char *addr, uint16_t port)
{
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6,
				   .sin6_port = htons(port) };
	struct sockaddr_in s4 = { .sin_family = AF_INET,
				  .sin_port = htons(port) };
	struct timeval tv = { .tv_sec = 10 };
	bool v6 = strchr(addr, ':') != NULL;
	int one = 1, fd;

	if (v6)
		assert_int_equal(inet_pton(AF_INET6, addr, &s6.sin6_addr), 1);
	else
		assert_int_equal(inet_pton(AF_INET, addr, &s4.sin_addr), 1);
	fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	if (v6)
		assert_int_equal(
			connect(fd, (struct sockaddr *)&s6, sizeof(s6)), 0);
	else
		assert_int_equal(
			connect(fd, (struct sockaddr *)&s4, sizeof(s4)), 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

bool t_ipv6_ok(void)
{
	static int ok = -1;
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6,
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	int fd;

	if (ok < 0) {
		fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		ok = fd >= 0 && !bind(fd, (struct sockaddr *)&s6, sizeof(s6));
		if (fd >= 0)
			close(fd);
		if (!ok)
			fprintf(stderr, "no IPv6 loopback here: IPv6 tests "
					"skip\n");
	}
	return ok;
}

void t_cl_write(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		assert_true(w > 0);
		b += w;
		n -= (size_t)w;
	}
}

int t_cl_read(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = recv(fd, b, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

void t_replay_corpus(const char *name, int (*fn)(const uint8_t *, size_t))
{
	char dir[512], path[1024];
	const char *slash = strrchr(__FILE__, '/');
	struct dirent *de;
	unsigned int n = 0;
	DIR *d;

	/* __FILE__ is tests/helpers.c as make compiles it. */
	snprintf(dir, sizeof(dir), "%.*sfuzz/corpus/%s",
		 slash ? (int)(slash - __FILE__ + 1) : 0, __FILE__, name);
	d = opendir(dir);
	if (!d)
		fail_msg("%s: %s (run from the source tree)", dir,
			 strerror(errno));
	while ((de = readdir(d))) {
		static uint8_t buf[1 << 16];
		size_t len;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "rb");
		assert_non_null(f);
		len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		fn(buf, len);
		n++;
	}
	closedir(d);
	assert_true(n > 0);
}

long t_rss_kib(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long size, res = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &res) != 2)
		res = -1;
	fclose(f);
	return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

bool t_tool_path(const char *rel, char *path, size_t n)
{
	const char *dir = getenv("AO_TOOLS_DIR");
	int len;

	if (!dir || !*dir)
		return false;
	len = snprintf(path, n, "%s/%s", dir, rel);
	return len > 0 && (size_t)len < n && access(path, X_OK) == 0;
}

#define T_PYTHON "/usr/bin/python3"
#define T_SKIPPED 77 /* automake's "skipped", which the scripts use too */

void t_run_script(unsigned int seconds, const char *script, const char *fmt,
		  ...)
{
	char cmd[16384], line[1024];
	va_list ap;
	FILE *f;
	int n, m, st;

	assert_true(access(T_PYTHON, X_OK) == 0);
	assert_true(access(script, R_OK) == 0);
	n = snprintf(cmd, sizeof(cmd), "timeout -k 5 %u " T_PYTHON " %s ",
		     seconds, script);
	assert_true(n > 0 && (size_t)n < sizeof(cmd));
	va_start(ap, fmt);
	m = vsnprintf(cmd + n, sizeof(cmd) - (size_t)n, fmt, ap);
	va_end(ap);
	assert_true(m >= 0 &&
		    (size_t)n + (size_t)m + sizeof(" 2>&1") <= sizeof(cmd));
	strcat(cmd, " 2>&1");
	f = popen(cmd, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		print_message("%s", line);
	st = pclose(f);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == T_SKIPPED)
		skip(); /* the script said why */
	assert_int_equal(WEXITSTATUS(st), 0);
}
