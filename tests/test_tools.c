// SPDX-License-Identifier: MIT
/*
 * The built tools, run as programs: ao-echo's and ao-load's command lines
 * (--help, --version, bad options exit 2 naming the option, runtime
 * failures exit 1 or 3), ao-echo's signals (SIGUSR1 prints a statistics
 * line, SIGTERM stops it with a final report), and ao-load against
 * ao-echo for a second or two in every framing x backend x mode, asserting
 * exit 0, zero errors and mismatches, and a clean final report (every
 * buffer back); over IPv6 ([::1]) and a dual-stack (::) ao-echo too.
 * Correctness only: no timing is asserted.
 *
 * The tools come from $AO_TOOLS_DIR (make check sets it to the build's
 * tools folder, built with the same sanitizer); without it every test is
 * skipped.  Each program is a child process that dies with the runner and
 * never outlives a hung test (alarm).  Loopback only, ephemeral ports.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "helpers.h"
#include "../tools/bench/child.h"

#define CHILD_ALARM_S 120 /* no tool runs longer than this */

static char echo_path[4096], load_path[4096];
static bool have_tools;
static int uring_usable = -1; /* -1: not yet known */

/* ---- child processes (tools/bench/child.c) ---- */

/* Start path with args (NULL-terminated; argv[0] is set here), its
 * stdout and stderr kept; the child that struct held is let go first. */
static void proc_start(struct child *p, const char *path, const char **args)
{
	struct child_args a = { .n = 0 };
	struct child_opts o = { .keep_stderr = true, .alarm_s = CHILD_ALARM_S };

	if (p->pid > 0)
		child_close(p);
	child_arg(&a, "%s", path);
	for (; args && *args; args++)
		child_arg(&a, "%s", *args);
	assert_int_equal(child_spawn(p, a.v, &o), 0);
}

/* The next line of its stdout, waiting up to ms; NULL at its end or on
 * timeout.  Valid until the next call. */
static const char *proc_line(struct child *p, int ms)
{
	return child_line(p, child_now_s() + ms / 1e3) == 1 ? p->line : NULL;
}

/* Read its stdout to the end and reap it (the alarm bounds it); its exit
 * status, 128 + signal if it was killed. */
static int proc_wait(struct child *p)
{
	return child_finish(p, CHILD_ALARM_S + 10);
}

/* Run to completion; its exit status. */
static int run(struct child *p, const char *path, const char **args)
{
	proc_start(p, path, args);
	return proc_wait(p);
}

/* The last "type":"final" line of a server that has exited ("" if none). */
static const char *final_line(struct child *p)
{
	static char final[CHILD_LINE_MAX];

	child_last_json(p, child_now_s(), "\"type\":\"final\"", final,
			sizeof(final));
	return final;
}

/* ---- JSON, just enough: the number after "key": in one object ---- */

static double jnum(const char *json, const char *key)
{
	double v = -1;

	if (!json_get(json, key, &v))
		fail_msg("no number \"%s\" in %s", key, json);
	return v;
}

static bool json_str_is(const char *json, const char *key, const char *val)
{
	char pat[128];

	snprintf(pat, sizeof(pat), "\"%s\":\"%s\"", key, val);
	return strstr(json, pat) != NULL;
}

/* ---- the server ---- */

static void need_tools(void)
{
	if (!have_tools)
		skip();
}

/* Start ao-echo with args (plus --port=0 -q) and read its port; 0 if it
 * exited first (p is then reaped). */
static uint16_t echo_start(struct child *p, const char **args)
{
	const char *argv[48];
	unsigned int port = 0;
	int n = 0, r;

	argv[n++] = "--port=0";
	argv[n++] = "--quiet";
	for (; args && *args; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	proc_start(p, echo_path, argv);
	r = child_port(p, child_now_s() + 30, &port);
	if (r == -EPROTO) {
		child_kill(p);
		fail_msg("ao-echo's first line is '%s', not port=N", p->line);
	}
	if (r) {
		proc_wait(p);
		return 0;
	}
	return (uint16_t)port;
}

/* Is the io_uring backend usable here?  (ao-echo says so by starting.) */
static bool uring_ok(void)
{
	if (uring_usable < 0) {
		static struct child p;
		const char *args[] = { "--backend=uring", NULL };

		if (echo_start(&p, args)) {
			kill(p.pid, SIGTERM);
			assert_int_equal(proc_wait(&p), 0);
			uring_usable = 1;
		} else {
			uring_usable = 0;
		}
	}
	return uring_usable == 1;
}

/* ---- command lines ---- */

struct bad_case {
	const char *arg; /* one bad argument */
	const char *names; /* what the message must mention */
};

static void expect_usage_error(const char *path, const char **args,
			       const char *names)
{
	static struct child p;
	int rc = run(&p, path, args);

	if (rc != 2 || !strstr(child_stderr(&p), names))
		fail_msg("%s %s: exit %d, stderr '%s' (want 2 and '%s')", path,
			 args[0], rc, child_stderr(&p), names);
	assert_int_equal(p.len, 0); /* nothing on stdout */
}

static void test_echo_help_version(void **state)
{
	static struct child p;
	const char *help[] = { "--help", NULL }, *h[] = { "-h", NULL };
	const char *ver[] = { "--version", NULL }, *v[] = { "-V", NULL };

	(void)state;
	need_tools();
	assert_int_equal(run(&p, echo_path, help), 0);
	assert_non_null(strstr(child_out(&p), "Usage: ao-echo"));
	assert_non_null(strstr(child_out(&p), "--mode=M"));
	assert_non_null(strstr(child_out(&p), "Exit status"));
	assert_int_equal(run(&p, echo_path, h), 0);
	assert_non_null(strstr(child_out(&p), "Usage: ao-echo"));
	assert_int_equal(run(&p, echo_path, ver), 0);
	assert_true(!strncmp(child_out(&p), "ao-echo ", 8));
	assert_int_equal(run(&p, echo_path, v), 0);
	assert_true(!strncmp(child_out(&p), "ao-echo ", 8));
}

static void test_echo_bad_options(void **state)
{
	static const struct bad_case cases[] = {
		{ "--bogus", "--bogus" },
		{ "-Z", "-Z" },
		{ "--port", "--port" }, /* no value */
		{ "--port=65536", "--port" },
		{ "--port=http", "--port" },
		{ "--address=1.2.3", "--address" },
		{ "--address=localhost", "--address" },
		{ "--address=[1.2.3.4]", "--address" },
		{ "--address=::g", "--address" },
		{ "--address=[::1", "--address" },
		{ "--workers=-1", "--workers" },
		{ "--workers=100000", "--workers" },
		{ "--rings=0", "--rings" },
		{ "--backend=kqueue", "--backend" },
		{ "--framing=len8", "--framing" },
		{ "--mode=fast", "--mode" },
		{ "--discipline=fifo", "--discipline" },
		{ "--max-packet=0", "--max-packet" },
		{ "--max-packet=2G", "--max-packet" },
		{ "--max-conns=0", "--max-conns" },
		{ "--idle-timeout=5x", "--idle-timeout" },
		{ "--buffers=none", "--buffers" },
		{ "--drain-timeout=0", "--drain-timeout" },
		{ "--stats=soon", "--stats" },
		{ "--stats=1ms", "--stats" },
		{ "stray", "stray" },
	};

	(void)state;
	need_tools();
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *args[] = { cases[i].arg, NULL };

		expect_usage_error(echo_path, args, cases[i].names);
	}
}

static void test_load_help_version(void **state)
{
	static struct child p;
	const char *help[] = { "--help", NULL };
	const char *ver[] = { "--version", NULL };

	(void)state;
	need_tools();
	assert_int_equal(run(&p, load_path, help), 0);
	assert_non_null(strstr(child_out(&p), "Usage: ao-load"));
	assert_int_equal(run(&p, load_path, ver), 0);
	assert_true(!strncmp(child_out(&p), "ao-load ", 8));
}

static void test_load_bad_options(void **state)
{
	static const struct bad_case cases[] = {
		{ "--bogus", "--bogus" },
		{ "--connections=0", "--connections" },
		{ "--framing=len8", "--framing" },
		{ "--engine=kqueue", "--engine" },
		{ "--address=localhost", "--address" },
		{ "--address=1.2.3", "--address" },
		{ "--address=[::1", "--address" },
		{ "--duration=abc", "--duration" },
		{ "--size=0", "--size" },
		{ "--progress=maybe", "--progress" },
	};
	const char *noport[] = { "--duration=1s", NULL };

	(void)state;
	need_tools();
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *args[] = { "--port=1", cases[i].arg, NULL };

		expect_usage_error(load_path, args, cases[i].names);
	}
	expect_usage_error(load_path, noport, "--port");
}

/* Runtime failures: a port in use is exit 1 for ao-echo; a port nobody
 * listens on is exit 3 for ao-load. */
static void test_runtime_errors(void **state)
{
	static struct child srv, p;
	char port_arg[32];
	uint16_t port;

	(void)state;
	need_tools();
	t_watchdog_arm(60, "tools: runtime errors");
	port = echo_start(&srv, NULL);
	assert_true(port != 0);
	snprintf(port_arg, sizeof(port_arg), "--port=%u", port);
	{
		const char *args[] = { port_arg, "--quiet", NULL };

		assert_int_equal(run(&p, echo_path, args), 1);
		assert_non_null(strstr(child_stderr(&p), "cannot listen"));
		assert_null(strstr(child_out(&p), "port="));
	}
	kill(srv.pid, SIGTERM);
	assert_int_equal(proc_wait(&srv), 0);
	{
		/* A port bound and not listening refuses connections (the
		 * server's old port may linger a moment: io_uring tears
		 * down asynchronously). */
		struct sockaddr_in sin = { .sin_family = AF_INET };
		socklen_t len = sizeof(sin);
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_true(fd >= 0);
		assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)),
				 0);
		assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len),
				 0);
		snprintf(port_arg, sizeof(port_arg), "--port=%u",
			 ntohs(sin.sin_port));

		const char *args[] = { port_arg,
				       "--connections=2",
				       "--duration=1s",
				       "--timeout=2s",
				       "-q",
				       NULL };

		int rc = run(&p, load_path, args);

		if (rc != 3 || !strstr(child_stderr(&p), "cannot connect"))
			fail_msg("ao-load to a closed port: exit %d, '%s'", rc,
				 child_stderr(&p));
		close(fd);
	}
	t_watchdog_disarm();
}

/* SIGUSR1 prints a statistics line at once (text, then JSON); SIGINT
 * stops the server like SIGTERM. */
static void test_echo_signals(void **state)
{
	static struct child srv;
	const char *json[] = { "--json", NULL };
	const char *l;

	(void)state;
	need_tools();
	t_watchdog_arm(60, "tools: signals");
	assert_true(echo_start(&srv, NULL) != 0);
	kill(srv.pid, SIGUSR1);
	l = proc_line(&srv, 20000);
	assert_non_null(l);
	assert_non_null(strstr(l, "open 0"));
	assert_non_null(strstr(l, "pool"));
	kill(srv.pid, SIGINT);
	assert_int_equal(proc_wait(&srv), 0);
	assert_non_null(strstr(child_out(&srv), "final statistics"));
	assert_non_null(strstr(child_out(&srv), "buffer pool"));
	assert_non_null(strstr(child_out(&srv), "pool locks"));
	assert_non_null(strstr(child_out(&srv), "executor"));
	assert_non_null(strstr(child_out(&srv), "stop          ok"));

	assert_true(echo_start(&srv, json) != 0);
	kill(srv.pid, SIGUSR1);
	l = proc_line(&srv, 20000);
	assert_non_null(l);
	assert_true(json_str_is(l, "type", "stats"));
	assert_int_equal(jnum(l, "open"), 0);
	assert_true(jnum(l, "pool_total") == 4096);
	kill(srv.pid, SIGTERM);
	assert_int_equal(proc_wait(&srv), 0);
	l = proc_line(&srv, 0);
	assert_non_null(l);
	assert_true(json_str_is(l, "type", "final"));
	assert_true(json_str_is(l, "status", "ok"));
	t_watchdog_disarm();
}

/* ---- ao-load against ao-echo ---- */

struct combo {
	const char *framing;
	const char *backend;
	const char *mode;
	const char *extra; /* one more option, or NULL */
};

#define COMBO(f, b, m)        \
	{                     \
		f, b, m, NULL \
	}
static struct combo combos[] = {
	COMBO("raw", "uring", "worker"),
	COMBO("raw", "epoll", "worker"),
	COMBO("len16", "uring", "worker"),
	COMBO("len16", "epoll", "worker"),
	COMBO("len32", "uring", "worker"),
	COMBO("len32", "epoll", "worker"),
	COMBO("raw", "uring", "ring"),
	COMBO("raw", "epoll", "ring"),
	COMBO("len16", "uring", "ring"),
	COMBO("len16", "epoll", "ring"),
	COMBO("len32", "uring", "ring"),
	COMBO("len32", "epoll", "ring"),
	{ "raw", "uring", "worker", "--no-assist" },
	{ "len16", "epoll", "worker", "--no-assist" },
};

static void test_load_echo(void **state)
{
	const struct combo *k = *state;
	static struct child srv, load;
	char f_arg[32], b_arg[32], m_arg[32], port_arg[32];
	const char *srv_args[] = {
		f_arg, b_arg, m_arg, "--json", k->extra, NULL
	};
	const char *dur = t_scale() < 1 ? "--duration=1s" : "--duration=2s";
	double requests, line;
	const char *l, *final;
	uint16_t port;
	int rc;

	need_tools();
	if (!strcmp(k->backend, "uring") && !uring_ok())
		skip();
	t_watchdog_arm(90, "tools: ao-load against ao-echo");
	snprintf(f_arg, sizeof(f_arg), "--framing=%s", k->framing);
	snprintf(b_arg, sizeof(b_arg), "--backend=%s", k->backend);
	snprintf(m_arg, sizeof(m_arg), "--mode=%s", k->mode);
	port = echo_start(&srv, srv_args);
	if (!port)
		fail_msg("ao-echo %s %s %s did not start: %s", f_arg, b_arg,
			 m_arg, child_stderr(&srv));
	snprintf(port_arg, sizeof(port_arg), "--port=%u", port);
	{
		/* Pipelined, several connections, a size that is no
		 * multiple of anything in particular. */
		const char *args[] = {
			port_arg,	   f_arg,	   dur,
			"--connections=8", "--pipeline=4", "--size=300",
			"--json",	   "-q",	   NULL
		};

		rc = run(&load, load_path, args);
	}
	if (rc != 0)
		fail_msg("ao-load exit %d: %s %s", rc, child_out(&load),
			 child_stderr(&load));
	requests = jnum(child_out(&load), "requests");
	assert_true(requests > 0);
	assert_int_equal(jnum(child_out(&load), "mismatches"), 0);
	assert_int_equal(jnum(child_out(&load), "errors"), 0);

	/* A statistics line on request, while it runs. */
	kill(srv.pid, SIGUSR1);
	l = proc_line(&srv, 20000);
	assert_non_null(l);
	assert_true(json_str_is(l, "type", "stats"));
	line = jnum(l, "packets_in");
	assert_true(line > 0);

	kill(srv.pid, SIGTERM);
	rc = proc_wait(&srv);
	final = final_line(&srv);
	if (rc != 0 || !*final)
		fail_msg("ao-echo exit %d: %s %s", rc, child_out(&srv),
			 child_stderr(&srv));
	assert_true(json_str_is(final, "status", "ok"));
	assert_true(json_str_is(final, "mode", k->mode));
	assert_true(json_str_is(final, "backend",
				!strcmp(k->backend, "uring") ? "io_uring" :
							       "epoll"));
	assert_int_equal(jnum(final, "pool_in_use"), 0);
	assert_int_equal(jnum(final, "open"), 0);
	assert_int_equal(jnum(final, "accepted"), 8);
	assert_true(jnum(final, "packets_in") >= line);
	/* Every byte back, prefixes included. */
	assert_true(jnum(final, "bytes_out") == jnum(final, "bytes_in"));
	if (strcmp(k->framing, "raw")) {
		/* One packet per request. */
		assert_true(jnum(final, "packets_in") == requests);
		assert_true(jnum(final, "packets_out") == requests);
	}
	/* Ring mode never runs anything on the executor; worker mode with
	 * --no-assist runs every packet there (with the ring's assist, as
	 * many as the ring left to the workers: any number). */
	if (!strcmp(k->mode, "ring"))
		assert_int_equal(jnum(final, "exec_executed"), 0);
	else if (k->extra && !strcmp(k->extra, "--no-assist"))
		assert_true(jnum(final, "exec_executed") >=
			    jnum(final, "packets_in"));
	t_watchdog_disarm();
}

/* ---- IPv6 ---- */

/* ao-load --address=addr with engine against port: exit 0, every one of
 * requests answered and checked. */
static void load_at(const char *addr, uint16_t port, const char *engine)
{
	static struct child load;
	char a_arg[64], p_arg[32], e_arg[32];
	const char *args[] = {
		a_arg,	  p_arg, e_arg, "--connections=4", "--requests=2000",
		"--json", "-q",	 NULL
	};
	int rc;

	snprintf(a_arg, sizeof(a_arg), "--address=%s", addr);
	snprintf(p_arg, sizeof(p_arg), "--port=%u", port);
	snprintf(e_arg, sizeof(e_arg), "--engine=%s", engine);
	rc = run(&load, load_path, args);
	if (rc != 0)
		fail_msg("ao-load %s %s: exit %d: %s %s", a_arg, e_arg, rc,
			 child_out(&load), child_stderr(&load));
	assert_true(json_str_is(child_out(&load), "addr", addr));
	assert_int_equal(jnum(child_out(&load), "requests"), 2000);
	assert_int_equal(jnum(child_out(&load), "errors"), 0);
	assert_int_equal(jnum(child_out(&load), "mismatches"), 0);
}

/* Stop ao-echo; its final report must be clean with conns accepted. */
static void echo_stop_clean(struct child *srv, double conns)
{
	const char *final;
	int rc;

	kill(srv->pid, SIGTERM);
	rc = proc_wait(srv);
	final = final_line(srv);
	if (rc != 0 || !*final)
		fail_msg("ao-echo exit %d: %s %s", rc, child_out(srv),
			 child_stderr(srv));
	assert_true(json_str_is(final, "status", "ok"));
	assert_int_equal(jnum(final, "pool_in_use"), 0);
	assert_true(jnum(final, "accepted") == conns);
}

/* ao-echo -a ::1 (and [::1]) under ao-load to [::1] and ::1, with each
 * engine; 127.0.0.1 is refused there. */
static void test_ipv6_loopback(void **state)
{
	static struct child srv, p;
	const char *bare[] = { "--address=::1", "--json", NULL };
	const char *brackets[] = { "--address=[::1]", "--json", NULL };
	char port_arg[32];
	uint16_t port;

	(void)state;
	need_tools();
	if (!t_ipv6_ok())
		skip();
	t_watchdog_arm(90, "tools: IPv6");
	port = echo_start(&srv, bare);
	if (!port)
		fail_msg("ao-echo -a ::1 did not start: %s",
			 child_stderr(&srv));
	load_at("[::1]", port, "epoll");
	load_at("::1", port, uring_ok() ? "uring" : "epoll");
	snprintf(port_arg, sizeof(port_arg), "--port=%u", port);
	{
		const char *args[] = { "--address=127.0.0.1", port_arg,
				       "--timeout=2s", "-q", NULL };

		assert_int_equal(run(&p, load_path, args), 3);
	}
	echo_stop_clean(&srv, 8);
	port = echo_start(&srv, brackets);
	if (!port)
		fail_msg("ao-echo -a [::1] did not start: %s",
			 child_stderr(&srv));
	load_at("::1", port, "epoll");
	echo_stop_clean(&srv, 4);
	t_watchdog_disarm();
}

/* ao-echo -a :: serves IPv4 and IPv6 clients on one port. */
static void test_dual_stack(void **state)
{
	static struct child srv;
	const char *args[] = { "--address=::", "--json", NULL };
	uint16_t port;

	(void)state;
	need_tools();
	if (!t_ipv6_ok())
		skip();
	t_watchdog_arm(90, "tools: dual stack");
	port = echo_start(&srv, args);
	if (!port)
		fail_msg("ao-echo -a :: did not start: %s", child_stderr(&srv));
	load_at("127.0.0.1", port, "epoll");
	load_at("[::1]", port, "epoll");
	echo_stop_clean(&srv, 8);
	t_watchdog_disarm();
}

static int setup(void)
{
	const char *dir = getenv("AO_TOOLS_DIR");

	if (!dir || !*dir) {
		fprintf(stderr, "test_tools: AO_TOOLS_DIR is not set: "
				"skipping (make check sets it)\n");
		return 0;
	}
	snprintf(echo_path, sizeof(echo_path), "%s/echo/ao-echo", dir);
	snprintf(load_path, sizeof(load_path), "%s/load/ao-load", dir);
	if (access(echo_path, X_OK) || access(load_path, X_OK)) {
		fprintf(stderr, "test_tools: no %s or %s: skipping\n",
			echo_path, load_path);
		return 0;
	}
	have_tools = true;
	return 0;
}

#define LOAD_ECHO(i) cmocka_unit_test_prestate(test_load_echo, &combos[i])

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo_help_version),
		cmocka_unit_test(test_echo_bad_options),
		cmocka_unit_test(test_load_help_version),
		cmocka_unit_test(test_load_bad_options),
		cmocka_unit_test(test_runtime_errors),
		cmocka_unit_test(test_echo_signals),
		cmocka_unit_test(test_ipv6_loopback),
		cmocka_unit_test(test_dual_stack),
		LOAD_ECHO(0),
		LOAD_ECHO(1),
		LOAD_ECHO(2),
		LOAD_ECHO(3),
		LOAD_ECHO(4),
		LOAD_ECHO(5),
		LOAD_ECHO(6),
		LOAD_ECHO(7),
		LOAD_ECHO(8),
		LOAD_ECHO(9),
		LOAD_ECHO(10),
		LOAD_ECHO(11),
		LOAD_ECHO(12),
		LOAD_ECHO(13),
	};

	signal(SIGPIPE, SIG_IGN);
	setup();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
