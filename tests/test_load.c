// SPDX-License-Identifier: MIT
/*
 * ao-load end to end, on loopback: its command line and exit codes, and
 * runs against a small echo server in each framing and engine, asserting
 * every request came back and matched; then servers that corrupt a byte
 * or hang up, which must make the exit status 1.  With --ws, against a
 * small WebSocket echo server here (a process per connection): frames
 * echoed in odd pieces with pings between them, a flipped byte, a close
 * frame, a refused upgrade.
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
#include <netinet/tcp.h>
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

enum srv_mode {
	SRV_ECHO,
	SRV_FLIP,
	SRV_HANGUP,
	SRV_WS, /* WebSocket: echo, a ping before every 3rd */
	SRV_WS_FLIP, /* ... a payload byte flipped in every 50th */
	SRV_WS_CLOSE, /* ... a close frame (1001) for the 100th */
	SRV_WS_REFUSE, /* answers the upgrade with 403 */
};

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

static bool read_full(int fd, uint8_t *p, size_t n)
{
	ssize_t r;

	for (; n; p += r, n -= (size_t)r) {
		r = read(fd, p, n);
		if (r <= 0)
			return false;
	}
	return true;
}

/* Write in pieces of 1, 2 and 3 bytes first, then the rest: the client's
 * decoder sees frames cut anywhere. */
static void write_cut(int fd, const uint8_t *p, size_t n)
{
	size_t k = 1;
	ssize_t w;

	while (n) {
		w = write(fd, p, k < 4 && k < n ? k : n);
		if (w <= 0)
			_exit(0);
		p += w;
		n -= (size_t)w;
		k++;
	}
}

/* One WebSocket connection, to its end. */
static void __attribute__((noreturn)) ws_conn(int fd, enum srv_mode mode)
{
	static uint8_t buf[70000], out[70000 + 14];
	char head[4096], acc[WSC_ACCEPT_LEN + 1], key[WSC_KEY_LEN + 1];
	size_t got = 0, n, h, i;
	unsigned long msgs = 0;
	const char *k;
	ssize_t r;
	int len;

	while (got < sizeof(head) - 1) {
		r = read(fd, head + got, sizeof(head) - 1 - got);
		if (r <= 0)
			_exit(0);
		got += (size_t)r;
		head[got] = '\0';
		if (strstr(head, "\r\n\r\n"))
			break;
	}
	k = strstr(head, "Sec-WebSocket-Key: ");
	if (!k || mode == SRV_WS_REFUSE) {
		len = snprintf(head, sizeof(head),
			       "HTTP/1.1 403 Forbidden\r\n\r\n");
		write_cut(fd, (uint8_t *)head, (size_t)len);
		_exit(0);
	}
	memcpy(key, k + 19, WSC_KEY_LEN);
	key[WSC_KEY_LEN] = '\0';
	wsc_accept(key, acc);
	len = snprintf(head, sizeof(head),
		       "HTTP/1.1 101 Switching Protocols\r\n"
		       "Upgrade: websocket\r\nConnection: Upgrade\r\n"
		       "Sec-WebSocket-Accept: %s\r\n\r\n",
		       acc);
	write_cut(fd, (uint8_t *)head, (size_t)len);
	for (;;) {
		if (!read_full(fd, buf, 2))
			_exit(0);
		n = buf[1] & 0x7f;
		if (!(buf[1] & 0x80) || n == 127)
			_exit(2); /* unmasked, or larger than this serves */
		if (n == 126) {
			if (!read_full(fd, buf + 2, 2))
				_exit(0);
			n = (size_t)buf[2] << 8 | buf[3];
		}
		h = buf[0];
		if (!read_full(fd, buf, 4 + n))
			_exit(0);
		for (i = 0; i < n; i++)
			buf[4 + i] ^= buf[i & 3];
		if ((h & 0x0f) == WSC_PONG)
			continue;
		if (h != 0x80 + WSC_BINARY)
			_exit(3);
		msgs++;
		if (mode == SRV_WS_CLOSE && msgs == 100) {
			static const uint8_t cl[] = { 0x88, 2, 0x03, 0xe9 };

			write_cut(fd, cl, sizeof(cl));
			_exit(0);
		}
		if (mode == SRV_WS_FLIP && msgs % 50 == 0)
			buf[4 + n / 2] ^= 0x10;
		if (msgs % 3 == 0) {
			static const uint8_t ping[] = { 0x89, 1, 'p' };

			write_cut(fd, ping, sizeof(ping));
		}
		out[0] = 0x82;
		if (n < 126) {
			out[1] = (uint8_t)n;
			h = 2;
		} else {
			out[1] = 126;
			out[2] = (uint8_t)(n >> 8);
			out[3] = (uint8_t)n;
			h = 4;
		}
		memcpy(out + h, buf + 4, n);
		write_cut(fd, out, h + n);
	}
}

/* A process per WebSocket connection. */
static void __attribute__((noreturn)) serve_ws(int lfd, enum srv_mode mode)
{
	int fd, one = 1;

	signal(SIGCHLD, SIG_IGN); /* no zombies */
	for (;;) {
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		/* The small writes go out at once (no delayed-ACK wait). */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (fork() == 0) {
			close(lfd);
			ws_conn(fd, mode);
		}
		close(fd);
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
		setpgid(0, 0); /* server_stop() kills its connections too */
		if (mode >= SRV_WS)
			serve_ws(lfd, mode);
		serve(lfd, mode);
	}
	close(lfd);
	return s;
}

static void server_stop(struct server *s)
{
	int st;

	kill(-s->pid, SIGKILL);
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

static void ws_run(const char *port, const char *engine, const char *pipeline,
		   const char *threads, const char *size)
{
	char *out;
	int rc;

	rc = run_load(&out, "-p", port, "--ws", "-e", engine, "-c", "6", "-P",
		      pipeline, "-t", threads, "-n", "1200", "-s", size,
		      "--json", NULL);
	if (rc)
		fprintf(stderr, "ws %s %s: exit %d: %s\n", engine, size, rc,
			out);
	assert_int_equal(rc, 0);
	assert_int_equal(json_num(out, "requests"), 1200);
	assert_int_equal(json_num(out, "mismatches"), 0);
	assert_int_equal(json_num(out, "errors"), 0);
	assert_non_null(strstr(out, "\"framing\":\"ws\""));
	free(out);
}

static void test_ws(void **state)
{
	struct server s = server_start(SRV_WS);
	char port[16], *out;
	int rc;

	(void)state;
	t_watchdog_arm(120, "test_ws");
	snprintf(port, sizeof(port), "%u", s.port);
	/* Payloads with 7- and 16-bit lengths; pings answered meanwhile. */
	ws_run(port, "epoll", "1", "1", "100");
	ws_run(port, "epoll", "4", "2", "1000");
	if (engine_uring_probe() == 0) {
		ws_run(port, "uring", "1", "1", "125");
		ws_run(port, "uring", "4", "2", "126");
	}
	/* -f ws is --ws; --ws with another framing is a usage error. */
	assert_int_equal(run_load(NULL, "-p", port, "-f", "ws", "-c", "1", "-n",
				  "10", NULL),
			 0);
	assert_int_equal(
		run_load(NULL, "-p", port, "--ws", "-f", "len16", NULL), 2);
	assert_int_equal(run_load(NULL, "-p", port, "--ws-path=x", NULL), 2);
	server_stop(&s);

	/* A flipped byte is a mismatch; a close frame ends the connection. */
	s = server_start(SRV_WS_FLIP);
	snprintf(port, sizeof(port), "%u", s.port);
	assert_int_equal(run_load(&out, "-p", port, "--ws", "-c", "2", "-n",
				  "1000", "--json", NULL),
			 1);
	assert_true(json_num(out, "mismatches") > 0);
	assert_int_equal(json_num(out, "requests"), 1000);
	free(out);
	server_stop(&s);
	s = server_start(SRV_WS_CLOSE);
	snprintf(port, sizeof(port), "%u", s.port);
	rc = run_load(&out, "-p", port, "--ws", "-c", "3", "-d", "2s", "--json",
		      NULL);
	if (rc != 1)
		fprintf(stderr, "close: exit %d: %s\n", rc, out);
	assert_int_equal(rc, 1);
	assert_int_equal(json_num(out, "conn_errors"), 3);
	assert_int_equal(json_num(out, "requests"), 3 * 99);
	free(out);
	server_stop(&s);
	/* A refused upgrade: could not connect. */
	s = server_start(SRV_WS_REFUSE);
	snprintf(port, sizeof(port), "%u", s.port);
	assert_int_equal(run_load(NULL, "-p", port, "--ws", "-c", "2", NULL),
			 3);
	server_stop(&s);
	t_watchdog_disarm();
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
		cmocka_unit_test(test_ws),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
