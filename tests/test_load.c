// SPDX-License-Identifier: MIT
/*
 * ao-load end to end, on loopback: its command line and exit codes, and
 * runs against a small echo server in each framing and engine, asserting
 * every request came back and matched; then servers that corrupt a byte
 * or hang up, which must make the exit status 1.
 *
 * ao-load is linked in (load_main(), its main() but for the name) and
 * each run is a child
 * process, as is the echo server, so exit() and the signal handlers stay
 * out of the runner.  The server echoes bytes as they come, which is the
 * right echo for every framing: ao-load checks the stream byte by byte.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/load/load.h"
#include "helpers.h"

enum srv_mode { SRV_ECHO, SRV_FLIP, SRV_HANGUP };

struct server {
	pid_t pid;
	uint16_t port;
};

/* Die with the runner, and never outlive a hung test. */
static void child_guard(unsigned int seconds)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(seconds);
}

/* A level-triggered epoll echo server; SRV_FLIP flips one bit of every
 * 50th read, SRV_HANGUP closes each connection after 10000 bytes. */
static void __attribute__((noreturn)) serve(int lfd, enum srv_mode mode)
{
	static uint8_t buf[65536];
	struct epoll_event ev, evs[64];
	unsigned long reads = 0;
	uint64_t *seen = calloc(65536, sizeof(*seen));
	int ep = epoll_create1(0), n, i, fd;
	ssize_t r, w, off;

	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	if (ep < 0 || !seen || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev))
		_exit(1);
	for (;;) {
		n = epoll_wait(ep, evs, 64, -1);
		for (i = 0; i < n; i++) {
			fd = evs[i].data.fd;
			if (fd == lfd) {
				fd = accept(lfd, NULL, NULL);
				if (fd < 0 || fd >= 65536)
					continue;
				ev.data.fd = fd;
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				seen[fd] = 0;
				continue;
			}
			r = read(fd, buf, sizeof(buf));
			if (r <= 0 || (mode == SRV_HANGUP &&
				       seen[fd] + (size_t)r > 10000)) {
				close(fd);
				continue;
			}
			seen[fd] += (size_t)r;
			if (mode == SRV_FLIP && ++reads % 50 == 0)
				buf[r / 2] ^= 0x10;
			/* Blocking writes: fine for a test's small loads. */
			for (off = 0; off < r; off += w) {
				w = write(fd, buf + off, (size_t)(r - off));
				if (w <= 0)
					break;
			}
		}
	}
}

static struct server server_start(enum srv_mode mode)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	struct server s;
	int lfd, one = 1;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(lfd >= 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(lfd, 128), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sin, &len), 0);
	s.port = ntohs(sin.sin_port);
	s.pid = fork();
	assert_true(s.pid >= 0);
	if (s.pid == 0) {
		child_guard(120);
		serve(lfd, mode);
	}
	close(lfd);
	return s;
}

static void server_stop(struct server *s)
{
	int st;

	kill(s->pid, SIGKILL);
	assert_int_equal(waitpid(s->pid, &st, 0), s->pid);
}

/*
 * Run ao-load with these arguments (NULL-terminated); its exit status, and
 * its stdout in out (caller frees).  Its stderr is shown when the exit
 * status is none of ao-load's own (a sanitizer report, a crash), or always
 * with AO_TEST_VERBOSE set.
 */
/* A writable argv[0] (W=1 builds with -Wwrite-strings). */
static char argv0[] = "ao-load";

static int run_load(char **out, ...)
{
	char *argv[32], line[512];
	FILE *f = tmpfile(), *ferr = tmpfile();
	size_t len;
	int argc = 0, st, rc;
	long size;
	va_list ap;
	pid_t pid;

	assert_non_null(f);
	assert_non_null(ferr);
	argv[argc++] = argv0;
	va_start(ap, out);
	while ((argv[argc] = va_arg(ap, char *)) != NULL)
		argc++;
	va_end(ap);
	assert_true(argc < 32);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		child_guard(60);
		dup2(fileno(f), 1);
		dup2(fileno(ferr), 2);
		exit(load_main(argc, argv));
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (rc > 3 || getenv("AO_TEST_VERBOSE")) {
		fprintf(stderr, "ao-load exit %d, stderr:\n", rc);
		rewind(ferr);
		while (fgets(line, sizeof(line), ferr))
			fputs(line, stderr);
	}
	fclose(ferr);
	size = ftell(f);
	if (out) {
		assert_true(size >= 0);
		*out = calloc(1, (size_t)size + 1);
		assert_non_null(*out);
		rewind(f);
		len = fread(*out, 1, (size_t)size, f);
		(*out)[len] = '\0';
	}
	fclose(f);
	return rc;
}

/* The number after "key": in a JSON line, or -1. */
static long long json_num(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

static void test_usage(void **state)
{
	char *out;

	(void)state;
	assert_int_equal(run_load(&out, "--help", NULL), 0);
	assert_non_null(strstr(out, "Usage:"));
	assert_non_null(strstr(out, "--framing"));
	free(out);
	assert_int_equal(run_load(&out, "--version", NULL), 0);
	assert_non_null(strstr(out, AO_VERSION));
	free(out);
	assert_int_equal(run_load(NULL, NULL), 2); /* no --port */
	assert_int_equal(run_load(NULL, "--port=0", NULL), 2);
	assert_int_equal(run_load(NULL, "--port=70000", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", "1", "--bogus", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", "1", "-c", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", "1", "-c", "0", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", "1", "--framing=len8", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", "1", "--engine=dpdk", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", "1", "-d", "3x", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", "1", "-s", "70000", "-f", "len16",
				  NULL),
			 2);
	assert_int_equal(
		run_load(NULL, "-p", "1", "--address=10.0.0.300", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", "1", "stray", NULL), 2);
	assert_int_equal(
		run_load(NULL, "-p", "1", "--progress=sometimes", NULL), 2);
}

static void test_no_server(void **state)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	char port[16];
	int fd;

	(void)state;
	/* A port that was just free: nobody listens there. */
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	snprintf(port, sizeof(port), "%u", ntohs(sin.sin_port));
	close(fd);
	assert_int_equal(run_load(NULL, "-p", port, "-c", "4", NULL), 3);
}

static void one_run(const char *port, const char *framing, const char *engine,
		    const char *pipeline, const char *threads)
{
	char *out;
	int rc;

	rc = run_load(&out, "-p", port, "-f", framing, "-e", engine, "-c", "8",
		      "-P", pipeline, "-t", threads, "-n", "3000", "-s", "100",
		      "--json", NULL);
	if (rc)
		fprintf(stderr, "%s %s: exit %d: %s\n", framing, engine, rc,
			out);
	assert_int_equal(rc, 0);
	assert_int_equal(json_num(out, "requests"), 3000);
	assert_int_equal(json_num(out, "mismatches"), 0);
	assert_int_equal(json_num(out, "errors"), 0);
	assert_true(json_num(out, "p99_ns") > 0);
	free(out);
}

static void test_echo(void **state)
{
	static const char *const framings[] = { "raw", "len16", "len32" };
	struct server s = server_start(SRV_ECHO);
	char port[16];
	unsigned int i;

	(void)state;
	t_watchdog_arm(120, "test_echo");
	snprintf(port, sizeof(port), "%u", s.port);
	for (i = 0; i < 3; i++) {
		one_run(port, framings[i], "epoll", "1", "1");
		one_run(port, framings[i], "epoll", "4", "2");
		if (engine_uring_probe() == 0) {
			one_run(port, framings[i], "uring", "1", "1");
			one_run(port, framings[i], "uring", "4", "2");
		}
	}
	t_watchdog_disarm();
	server_stop(&s);
}

static void test_open_loop_and_hist(void **state)
{
	struct server s = server_start(SRV_ECHO);
	char port[16], path[] = "/tmp/ao-load-test-XXXXXX", line[128];
	char *out;
	long long n;
	FILE *f;
	int fd;

	(void)state;
	t_watchdog_arm(60, "test_open_loop_and_hist");
	snprintf(port, sizeof(port), "%u", s.port);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(run_load(&out, "-p", port, "-c", "4", "-P", "4", "-R",
				  "2000", "-d", "500ms", "--json", "--hist",
				  path, NULL),
			 0);
	/*
	 * 2000/s for 0.5 s: 1000 due, each sent and answered or (on a slow
	 * machine) left unsent.
	 */
	n = json_num(out, "requests");
	assert_true(n > 0);
	assert_int_equal(n + json_num(out, "unsent"), 1000);
	assert_non_null(strstr(out, "\"mode\":\"open\""));
	free(out);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	assert_string_equal(line,
			    "low_ns,high_ns,count,cumulative,percentile\n");
	assert_non_null(fgets(line, sizeof(line), f));
	fclose(f);
	unlink(path);
	/* An unwritable --hist is an error after the run. */
	assert_int_equal(run_load(NULL, "-p", port, "-c", "2", "-n", "10",
				  "--hist", "/nonexistent/dir/x.csv", NULL),
			 1);
	t_watchdog_disarm();
	server_stop(&s);
}

static void test_mismatch(void **state)
{
	struct server s = server_start(SRV_FLIP);
	char port[16], *out;

	(void)state;
	t_watchdog_arm(60, "test_mismatch");
	snprintf(port, sizeof(port), "%u", s.port);
	assert_int_equal(run_load(&out, "-p", port, "-c", "4", "-n", "2000",
				  "-f", "len16", "--json", NULL),
			 1);
	assert_true(json_num(out, "mismatches") > 0);
	assert_int_equal(json_num(out, "requests"), 2000);
	free(out);
	t_watchdog_disarm();
	server_stop(&s);
}

static void test_hangup(void **state)
{
	struct server s = server_start(SRV_HANGUP);
	char port[16], *out;

	(void)state;
	t_watchdog_arm(60, "test_hangup");
	snprintf(port, sizeof(port), "%u", s.port);
	assert_int_equal(run_load(&out, "-p", port, "-c", "4", "-d", "2s",
				  "--json", NULL),
			 1);
	assert_int_equal(json_num(out, "conn_errors"), 4);
	assert_int_equal(json_num(out, "mismatches"), 0);
	free(out);
	t_watchdog_disarm();
	server_stop(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_usage),
		cmocka_unit_test(test_no_server),
		cmocka_unit_test(test_echo),
		cmocka_unit_test(test_open_loop_and_hist),
		cmocka_unit_test(test_mismatch),
		cmocka_unit_test(test_hangup),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
