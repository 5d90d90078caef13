// SPDX-License-Identifier: MIT
/*
 * The programs in examples/, run for a moment each: the TCP service
 * answers in upper case (over IPv4, IPv6 and a dual-stack listener), the
 * README's embedding echoes len16 packets and counts them per connection,
 * the chat room broadcasts a message to every member and announces who
 * leaves, the fork-join sort sorts (with one worker too), the lock
 * example's book adds up, and the timers fire late, never early, and tick
 * in order.  Each server stops cleanly on SIGTERM (exit status 0).
 *
 * The programs come from $AO_EXAMPLES_DIR (make check sets it to the
 * build's examples folder, built with the same sanitizer); without it
 * every test is skipped.  Each is a child that dies with the runner.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "helpers.h"

#define CHILD_ALARM_S 60
#define OUT_MAX 65536

static const char *dir;

struct child {
	pid_t pid;
	int out, err; /* pipes from its stdout and stderr, or -1 */
	char obuf[OUT_MAX], ebuf[OUT_MAX];
	size_t olen, elen, oline;
};

static void need_examples(void)
{
	if (!dir)
		skip();
}

/* Start examples/<name> with up to 4 arguments (NULL-terminated). */
static void child_start(struct child *c, const char *name, const char *a1,
			const char *a2)
{
	char path[4096];
	int o[2], e[2];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	memset(c, 0, sizeof(*c));
	assert_int_equal(pipe2(o, O_CLOEXEC), 0);
	assert_int_equal(pipe2(e, O_CLOEXEC), 0);
	c->pid = fork();
	assert_true(c->pid >= 0);
	if (c->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(CHILD_ALARM_S);
		dup2(o[1], 1);
		dup2(e[1], 2);
		execl(path, name, a1, a2, (char *)NULL);
		_exit(127);
	}
	close(o[1]);
	close(e[1]);
	c->out = o[0];
	c->err = e[0];
}

/* Read what its pipes have, waiting up to ms; false once both are shut. */
static bool child_pump(struct child *c, int ms)
{
	struct pollfd p[2] = { { .fd = c->out, .events = POLLIN },
			       { .fd = c->err, .events = POLLIN } };

	if (c->out < 0 && c->err < 0)
		return false;
	if (poll(p, 2, ms) <= 0)
		return true;
	for (int i = 0; i < 2; i++) {
		int *fd = i ? &c->err : &c->out;
		char *buf = i ? c->ebuf : c->obuf;
		size_t *len = i ? &c->elen : &c->olen;
		ssize_t n;

		if (*fd < 0 || !p[i].revents)
			continue;
		n = read(*fd, buf + *len, OUT_MAX - 1 - *len);
		if (n > 0) {
			*len += (size_t)n;
			buf[*len] = '\0';
		} else if (n == 0 || errno != EINTR) {
			close(*fd);
			*fd = -1;
		}
	}
	return true;
}

/* The next line of its stdout, within 20 s; NULL if none came. */
static const char *child_line(struct child *c)
{
	static char line[OUT_MAX];
	uint64_t end = t_now_ns() + 20000000000ull;

	while (t_now_ns() < end) {
		char *nl = memchr(c->obuf + c->oline, '\n', c->olen - c->oline);

		if (nl) {
			size_t n = (size_t)(nl - c->obuf) - c->oline;

			memcpy(line, c->obuf + c->oline, n);
			line[n] = '\0';
			c->oline += n + 1;
			return line;
		}
		if (!child_pump(c, 100))
			return NULL;
	}
	return NULL;
}

/* Read to the end and reap; the exit status, or 128 + signal. */
static int child_wait(struct child *c)
{
	int st;

	while (child_pump(c, 1000))
		;
	while (waitpid(c->pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run(struct child *c, const char *name, const char *a1,
	       const char *a2)
{
	child_start(c, name, a1, a2);
	return child_wait(c);
}

/* Start a server example; its port (from its port=N line). */
static uint16_t server_start(struct child *c, const char *name,
			     const char *address)
{
	const char *l;

	child_start(c, name, address, NULL);
	l = child_line(c);
	if (!l || strncmp(l, "port=", 5)) {
		kill(c->pid, SIGKILL);
		child_wait(c);
		fail_msg("%s %s: no port=N line: %s", name, address, c->ebuf);
	}
	return (uint16_t)atoi(l + 5);
}

static void server_stop(struct child *c)
{
	kill(c->pid, SIGTERM);
	if (child_wait(c) != 0)
		fail_msg("the example did not stop cleanly: %s", c->ebuf);
}

/* ---- tcp_service ---- */

static void upper_once(const char *addr, uint16_t port)
{
	char got[16];
	int fd = t_cl_connect_to(addr, port);

	t_cl_write(fd, "hello, aorta", 12);
	assert_int_equal(t_cl_read(fd, got, 12), 0);
	assert_memory_equal(got, "HELLO, AORTA", 12);
	close(fd);
}

static void test_tcp_service(void **state)
{
	static struct child c;
	uint16_t port;

	(void)state;
	need_examples();
	t_watchdog_arm(60, "examples: tcp_service");
	port = server_start(&c, "tcp_service", "127.0.0.1");
	upper_once("127.0.0.1", port);
	upper_once("127.0.0.1", port);
	server_stop(&c);
	assert_non_null(strstr(c.ebuf, "connection 1 from 127.0.0.1"));
	assert_non_null(strstr(c.ebuf, "connection 2 closed: "));
	if (t_ipv6_ok()) {
		port = server_start(&c, "tcp_service", "::");
		upper_once("::1", port);
		upper_once("127.0.0.1", port);
		server_stop(&c);
		assert_non_null(strstr(c.ebuf, "connection 1 from ::1"));
		assert_non_null(
			strstr(c.ebuf, "connection 2 from ::ffff:127.0.0.1"));
	}
	/* An address that does not parse is refused with a message. */
	assert_int_equal(run(&c, "tcp_service", "localhost", NULL), 1);
	assert_non_null(strstr(c.ebuf, "localhost"));
	t_watchdog_disarm();
}

/* ---- chat ---- */

static void chat_send(int fd, const char *msg)
{
	uint8_t b[256];
	size_t n = strlen(msg);

	b[0] = (uint8_t)(n >> 8);
	b[1] = (uint8_t)n;
	memcpy(b + 2, msg, n);
	t_cl_write(fd, b, n + 2);
}

/* Read packets until one is exactly want (others are earlier news). */
static void chat_expect(int fd, const char *want)
{
	for (int i = 0; i < 16; i++) {
		char got[256];
		uint8_t h[2];
		size_t n;

		assert_int_equal(t_cl_read(fd, h, 2), 0);
		n = (size_t)h[0] << 8 | h[1];
		assert_true(n < sizeof(got));
		assert_int_equal(t_cl_read(fd, got, n), 0);
		got[n] = '\0';
		if (!strcmp(got, want))
			return;
	}
	fail_msg("no '%s' among 16 packets", want);
}

static void test_chat(void **state)
{
	static struct child c;
	int fd[3];
	uint16_t port;

	(void)state;
	need_examples();
	t_watchdog_arm(60, "examples: chat");
	port = server_start(&c, "chat", "127.0.0.1");
	for (int i = 0; i < 3; i++) {
		fd[i] = t_cl_connect(port);
		/* Each member hears its own arrival: joined in order. */
		chat_expect(fd[i], i == 0 ? "* 1 joined" :
				   i == 1 ? "* 2 joined" :
					    "* 3 joined");
	}
	chat_send(fd[0], "hello, room");
	for (int i = 0; i < 3; i++)
		chat_expect(fd[i], "[1] hello, room");
	chat_send(fd[2], "bye");
	close(fd[2]);
	for (int i = 0; i < 2; i++) {
		chat_expect(fd[i], "[3] bye");
		chat_expect(fd[i], "* 3 left");
	}
	close(fd[0]);
	close(fd[1]);
	server_stop(&c);
	t_watchdog_disarm();
}

/* ---- embed (the README's snippet) ---- */

static void test_embed(void **state)
{
	static struct child c;
	uint8_t got[2 + 5];
	uint16_t port;
	int fd;

	(void)state;
	need_examples();
	t_watchdog_arm(60, "examples: embed");
	port = server_start(&c, "embed", "127.0.0.1");
	fd = t_cl_connect(port);
	for (int i = 0; i < 3; i++) {
		chat_send(fd, "hello");
		assert_int_equal(t_cl_read(fd, got, sizeof(got)), 0);
		assert_memory_equal(got, "\0\5hello", sizeof(got));
	}
	close(fd);
	/* Its close is counted before the stop, or by it: either way, with
	 * the three packets. */
	server_stop(&c);
	assert_non_null(strstr(c.ebuf, "connection 1: 3 packets, "));
	t_watchdog_disarm();
}

/* ---- fork_join, lock ---- */

static void test_fork_join(void **state)
{
	static struct child c;
	char n[32];

	(void)state;
	need_examples();
	t_watchdog_arm(120, "examples: fork_join");
	snprintf(n, sizeof(n), "%ld", t_scaled(300000, 20000));
	if (run(&c, "fork_join", n, "2") != 0)
		fail_msg("fork_join %s 2: %s %s", n, c.obuf, c.ebuf);
	assert_non_null(strstr(c.obuf, "2 workers"));
	/* One worker: every join waits by running the other halves. */
	if (run(&c, "fork_join", n, "1") != 0)
		fail_msg("fork_join %s 1: %s %s", n, c.obuf, c.ebuf);
	assert_non_null(strstr(c.obuf, "1 workers"));
	t_watchdog_disarm();
}

static void test_lock(void **state)
{
	static struct child c;
	char n[32];

	(void)state;
	need_examples();
	t_watchdog_arm(120, "examples: lock");
	snprintf(n, sizeof(n), "%ld", t_scaled(100000, 5000));
	if (run(&c, "lock", "4", n) != 0)
		fail_msg("lock 4 %s: %s %s", n, c.obuf, c.ebuf);
	assert_non_null(strstr(c.obuf, "lock: 4 threads"));
	assert_true(strstr(c.obuf, "acquisitions") ||
		    strstr(c.obuf, "compiled out"));
	t_watchdog_disarm();
}

static void test_timers(void **state)
{
	static struct child c;

	(void)state;
	need_examples();
	t_watchdog_arm(60, "examples: timers");
	if (run(&c, "timers", "20", "5") != 0)
		fail_msg("timers 20 5: %s %s", c.obuf, c.ebuf);
	assert_non_null(strstr(c.obuf, "timers: shot 2 at +25 ms"));
	assert_non_null(strstr(c.obuf, "ticks of 5.0 ms"));
	t_watchdog_disarm();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp_service),
		cmocka_unit_test(test_embed),
		cmocka_unit_test(test_chat),
		cmocka_unit_test(test_fork_join),
		cmocka_unit_test(test_lock),
		cmocka_unit_test(test_timers),
	};

	dir = getenv("AO_EXAMPLES_DIR");
	if (dir && !*dir)
		dir = NULL;
	if (!dir)
		fprintf(stderr, "test_examples: AO_EXAMPLES_DIR is not set: "
				"skipping (make check sets it)\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("examples", tests, NULL, NULL);
}
