// SPDX-License-Identifier: MIT
/*
 * ao-arena and ao-bots as programs, end to end, a few seconds each: their
 * command lines; bots that find no server (exit 3); bots playing the
 * arena (epoll and io_uring, ring and worker handlers), every snapshot
 * verified, with zero failures and a clean, consistent stop of the
 * server; churn (bots leaving, rejoining, reconnecting); and bots that
 * stop reading, which the arena must skip and then close while the
 * others play on.
 *
 * The tools come from $AO_TOOLS_DIR (make check sets it); without it the
 * tests are skipped.  Each program is a child that dies with the runner
 * and never outlives a hung test (alarm); its output goes to a file.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "helpers.h"

#define CHILD_ALARM_S 90

static char arena_path[4096], bots_path[4096];
static bool have_tools;

struct child {
	pid_t pid;
	char out[64], err[64]; /* files of its stdout and stderr */
};

static void child_start(struct child *c, const char *path, const char **args)
{
	char *argv[48];
	int n = 0, fd;

	argv[n++] = strdup(path);
	for (; *args; args++)
		argv[n++] = strdup(*args);
	argv[n] = NULL;
	strcpy(c->out, "/tmp/ao-test-game-XXXXXX");
	strcpy(c->err, "/tmp/ao-test-game-XXXXXX");
	fd = mkstemp(c->out);
	assert_true(fd >= 0);
	close(fd);
	fd = mkstemp(c->err);
	assert_true(fd >= 0);
	close(fd);
	c->pid = fork();
	assert_true(c->pid >= 0);
	if (!c->pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(CHILD_ALARM_S);
		fd = open(c->out, O_WRONLY | O_TRUNC);
		dup2(fd, 1);
		fd = open(c->err, O_WRONLY | O_TRUNC);
		dup2(fd, 2);
		execv(path, argv);
		_exit(127);
	}
	for (int i = 0; i < n; i++)
		free(argv[i]);
}

/* A file's text (static, until the next call). */
static const char *slurp(const char *path)
{
	static char buf[1 << 20];
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return buf;
}

/* Wait for the child (at most CHILD_ALARM_S): its exit status. */
static int child_wait(struct child *c)
{
	int st;

	while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void child_clean(struct child *c)
{
	unlink(c->out);
	unlink(c->err);
}

static int run(const char *path, const char **args, struct child *c)
{
	child_start(c, path, args);
	return child_wait(c);
}

/* The number after "key": in text (the first one). */
static double jnum(const char *text, const char *key)
{
	char pat[64];
	const char *s;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	s = strstr(text, pat);
	if (!s)
		fail_msg("no \"%s\" in %s", key, text);
	return strtod(s + strlen(pat), NULL);
}

static void need_tools(void)
{
	if (!have_tools)
		skip();
}

/* ---- the programs ---- */

/* Start ao-arena (--json, quiet) with args; its port. */
static uint16_t arena_start(struct child *c, const char **args)
{
	const char *argv[32] = { "--quiet", "--json" };
	int n = 2;

	for (; *args; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	child_start(c, arena_path, argv);
	for (int i = 0; i < 3000; i++) {
		const char *s = slurp(c->out), *p = strstr(s, "port=");

		if (p && strchr(p, '\n'))
			return (uint16_t)atoi(p + 5);
		if (waitpid(c->pid, NULL, WNOHANG) == c->pid)
			fail_msg("ao-arena exited: %s", slurp(c->err));
		t_sleep_ns(10000000);
	}
	fail_msg("ao-arena never said port=N");
	return 0;
}

/* Stop it: status 0, and its final report (a copy). */
static char *arena_stop(struct child *c)
{
	const char *s, *fin;
	int rc;

	kill(c->pid, SIGTERM);
	rc = child_wait(c);
	s = slurp(c->out);
	fin = strstr(s, "\"type\":\"final\"");
	if (rc || !fin)
		fail_msg("ao-arena: exit %d, final %s; stderr %s", rc, s,
			 slurp(c->err));
	assert_non_null(strstr(fin, "\"status\":\"ok\""));
	assert_non_null(strstr(fin, "\"consistent\":true"));
	assert_int_equal(jnum(fin, "players"), 0);
	assert_int_equal(jnum(fin, "pool_in_use"), 0);
	/* Every close reason has its key (none printed as "(null)"). */
	assert_null(strstr(s, "null"));
	return strdup(fin);
}

/* Start ao-bots against port with args (--json, -q) in the background. */
static void bots_start(uint16_t port, const char **args, struct child *c)
{
	const char *argv[32] = { "--json", "--quiet" };
	char p[32];
	int n = 2;

	snprintf(p, sizeof(p), "--port=%u", port);
	argv[n++] = p;
	for (; *args; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	child_start(c, bots_path, argv);
}

/* Run ao-bots against port with args (--json, -q): its status and JSON
 * (a copy); its output is shown when the status is not the one expected. */
static int bots_run(uint16_t port, const char **args, char **json, int want)
{
	struct child c;
	int rc;

	bots_start(port, args, &c);
	rc = child_wait(&c);
	*json = strdup(slurp(c.out));
	if (rc != want)
		print_message("ao-bots: exit %d\n%s%s", rc, *json,
			      slurp(c.err));
	child_clean(&c);
	return rc;
}

/* Has the child exited?  (It is not reaped: child_wait() still works.) */
static bool child_exited(struct child *c)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT))
		return false;
	return si.si_pid == c->pid;
}

/* The arena's last complete statistics line (--stats), or NULL. */
static const char *arena_last_stats(struct child *c)
{
	static const char head[] = "{\"type\":\"stats\"";
	static char line[8192];
	const char *s = slurp(c->out), *last = NULL, *p, *nl;

	for (p = s; (nl = strchr(p, '\n')); p = nl + 1)
		if (!strncmp(p, head, sizeof(head) - 1))
			last = p;
	if (!last)
		return NULL;
	nl = strchr(last, '\n');
	if ((size_t)(nl - last) >= sizeof(line))
		return NULL;
	memcpy(line, last, (size_t)(nl - last));
	line[nl - last] = '\0';
	return line;
}

/* Bots play the arena: no failure, snapshots and inputs seen. */
static void play(const char **arena_args, const char **bots_args,
		 char **bots_json, char **arena_json)
{
	struct child a;
	uint16_t port = arena_start(&a, arena_args);
	int rc = bots_run(port, bots_args, bots_json, 0);

	*arena_json = arena_stop(&a);
	child_clean(&a);
	assert_int_equal(rc, 0);
	assert_int_equal(jnum(*bots_json, "failures"), 0);
	assert_true(jnum(*bots_json, "snapshots") > 0);
	assert_true(jnum(*bots_json, "inputs_seen") > 0);
	assert_true(jnum(*bots_json, "chat_lines") > 0);
}

/* ---- tests ---- */

static void test_command_lines(void **state)
{
	static const char *const arena_bad[] = {
		"--bogus",	"--tick-rate=0", "--room-size=2000",
		"--port=65536", "--mode=fast",	 "--sndbuf=10",
	};
	static const char *const bots_bad[] = {
		"--port=0",   "--players=0", "--engine=kqueue",
		"--stall=-1", "--churn=1ms", "--bogus",
	};
	const char *help[] = { "--help", NULL }, *ver[] = { "--version", NULL };
	const char *args[3] = { NULL, NULL, NULL };
	const char *a[] = { "--port=1", "--players=3", "--stall=5", NULL };
	struct child c;

	(void)state;
	need_tools();
	assert_int_equal(run(arena_path, help, &c), 0);
	assert_non_null(strstr(slurp(c.out), "Usage: ao-arena"));
	assert_non_null(strstr(slurp(c.out), "--copy-broadcast"));
	child_clean(&c);
	assert_int_equal(run(bots_path, help, &c), 0);
	assert_non_null(strstr(slurp(c.out), "Usage: ao-bots"));
	assert_non_null(strstr(slurp(c.out), "--churn=T"));
	child_clean(&c);
	assert_int_equal(run(arena_path, ver, &c), 0);
	assert_true(!strncmp(slurp(c.out), "ao-arena ", 9));
	child_clean(&c);
	assert_int_equal(run(bots_path, ver, &c), 0);
	assert_true(!strncmp(slurp(c.out), "ao-bots ", 8));
	child_clean(&c);
	for (size_t i = 0; i < sizeof(arena_bad) / sizeof(*arena_bad); i++) {
		args[0] = arena_bad[i];
		assert_int_equal(run(arena_path, args, &c), 2);
		child_clean(&c);
	}
	/* ao-bots needs --port. */
	args[0] = "--players=3";
	assert_int_equal(run(bots_path, args, &c), 2);
	assert_non_null(strstr(slurp(c.err), "--port"));
	child_clean(&c);
	args[0] = "--port=1";
	for (size_t i = 0; i < sizeof(bots_bad) / sizeof(*bots_bad); i++) {
		args[1] = bots_bad[i];
		assert_int_equal(run(bots_path, args, &c), 2);
		child_clean(&c);
	}
	/* More bots stalled than there are. */
	assert_int_equal(run(bots_path, a, &c), 2);
	child_clean(&c);
}

/* A loopback port nobody listens on (bound, noted, closed). */
static uint16_t free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

static bool uring_usable(void)
{
	struct io_uring_params p;
	int fd;

	memset(&p, 0, sizeof(p));
	fd = (int)syscall(__NR_io_uring_setup, 2, &p);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Nothing listens: exit status 3. */
static void test_no_server(void **state)
{
	const char *args[] = { "--players=2", "--duration=200ms", "--ramp=0",
			       "--drain=0", NULL };
	char *json;

	(void)state;
	need_tools();
	assert_int_equal(bots_run(free_port(), args, &json, 3), 3);
	assert_true(jnum(json, "failures") > 0);
	assert_int_equal(jnum(json, "connects"), 0);
	free(json);
}

static void test_play(void **state)
{
	const char *aa[] = { NULL };
	const char *ba[] = { "--players=60", "--duration=2s", "--ramp=200ms",
			     "--chat=300ms", "--drain=1s",    NULL };
	char *bj, *aj;

	(void)state;
	need_tools();
	t_watchdog_arm(60, "bots play the arena");
	play(aa, ba, &bj, &aj);
	assert_int_equal(jnum(bj, "joins"), 60);
	assert_int_equal(jnum(aj, "rooms"), 2);
	assert_int_equal(jnum(aj, "players_peak"), 60);
	/* One snapshot buffer per tick and room, one send per member. */
	assert_true(jnum(aj, "snap_bufs") <= jnum(aj, "ticks"));
	assert_true(jnum(aj, "snaps_sent") >= jnum(bj, "snapshots"));
	free(bj);
	free(aj);
	t_watchdog_disarm();
}

/* The other engine, threads and handlers, and copy broadcast; inputs
 * at jittered times (two in one tick, none in the next: still every one
 * verified). */
static void test_play_variants(void **state)
{
	const char *aa[] = { "--mode=worker", "--copy-broadcast", "--rings=2",
			     NULL };
	const char *ba[] = {
		"--players=40", "--duration=1500ms", "--ramp=200ms",
		"--chat=300ms", "--drain=1s",	     "--engine=uring",
		"--threads=2",	"--jitter",	     NULL
	};
	const char *ba_epoll[] = { "--players=40", "--duration=1500ms",
				   "--ramp=200ms", "--chat=300ms",
				   "--drain=1s",   "--threads=2",
				   "--jitter",	   NULL };
	char *bj, *aj;

	(void)state;
	need_tools();
	t_watchdog_arm(60, "bots play the arena (variants)");
	play(aa, uring_usable() ? ba : ba_epoll, &bj, &aj);
	/* A copy per member. */
	assert_int_equal(jnum(aj, "snap_bufs"), jnum(aj, "snaps_sent"));
	free(bj);
	free(aj);
	t_watchdog_disarm();
}

static void test_churn(void **state)
{
	const char *aa[] = { "--room-size=10", NULL };
	const char *ba[] = { "--players=60",
			     "--duration=2500ms",
			     "--ramp=200ms",
			     "--chat=200ms",
			     "--churn=300ms",
			     "--drain=1s",
			     NULL };
	char *bj, *aj;

	(void)state;
	need_tools();
	t_watchdog_arm(60, "bots churn");
	play(aa, ba, &bj, &aj);
	assert_true(jnum(bj, "leaves") > 0);
	assert_true(jnum(bj, "reconnects") > 0);
	assert_true(jnum(bj, "joins") > 60);
	assert_true(jnum(aj, "joins") >= jnum(bj, "joins"));
	free(bj);
	free(aj);
	t_watchdog_disarm();
}

/*
 * Bots that stop reading: skipped, then closed; the others unharmed.
 * How soon the arena closes them depends on how fast it fills their
 * buffers, so the bots play until the arena's statistics show the four
 * closed as slow (and a chat line relayed), then are stopped (SIGTERM:
 * the stalled ones read again and must find the close); their
 * --duration is only the bound.  Four bots read: few enough that
 * ao-bots keeps up with them on a loaded machine or under a sanitizer
 * (twenty, with the arena's 4k send buffers, got closed as slow too).
 * The bots ack every 250 ms: the stall bound is well above that.
 */
static void test_stall(void **state)
{
	const char *aa[] = { "--tick-rate=100", "--stall-timeout=1s",
			     "--sndbuf=4k", "--stats=100ms", NULL };
	const char *ba[] = { "--players=8",	    "--stall=4",
			     "--stall-after=100ms", "--duration=60s",
			     "--ramp=100ms",	    "--chat=500ms",
			     "--drain=1s",	    NULL };
	struct child a, b;
	const char *st;
	char *bj, *aj;
	uint16_t port;
	int rc;

	(void)state;
	need_tools();
	t_watchdog_arm(120, "bots stall");
	port = arena_start(&a, aa);
	bots_start(port, ba, &b);
	while (!child_exited(&b)) {
		st = arena_last_stats(&a);
		if (st && jnum(strstr(st, "\"reasons\""), "slow") >= 4 &&
		    jnum(st, "chat_lines") > 0)
			break;
		t_sleep_ns(20000000);
	}
	kill(b.pid, SIGTERM);
	rc = child_wait(&b);
	bj = strdup(slurp(b.out));
	if (rc)
		print_message("ao-bots: exit %d\n%s%s", rc, bj, slurp(b.err));
	child_clean(&b);
	aj = arena_stop(&a);
	child_clean(&a);
	assert_int_equal(rc, 0);
	assert_int_equal(jnum(bj, "failures"), 0);
	assert_true(jnum(bj, "snapshots") > 0);
	assert_true(jnum(bj, "inputs_seen") > 0);
	assert_true(jnum(bj, "chat_lines") > 0);
	assert_int_equal(jnum(bj, "stalled"), 4);
	assert_int_equal(jnum(bj, "stall_closed"), 4);
	/* Skipped, or closed on their acks (the bots ack the snapshots
	 * they read) before their socket buffers filled. */
	assert_true(jnum(aj, "snaps_skipped") + jnum(aj, "ack_slow") > 0);
	/* The arena's reason (in "reasons") and the server's close (in
	 * "closes", the first "slow") are both slow. */
	assert_int_equal(jnum(strstr(aj, "\"reasons\""), "slow"), 4);
	assert_int_equal(jnum(aj, "slow"), 4);
	free(bj);
	free(aj);
	t_watchdog_disarm();
}

/* The same over WebSocket (ao-bots --ws): every check of test_play's,
 * and 24 readers unharmed beside 6 WebSocket bots that stop reading,
 * which the server skips and closes as it does len16 ones. */
static void test_ws(void **state)
{
	const char *aa[] = { NULL };
	const char *ba[] = { "--ws",
			     "--players=60",
			     "--duration=2s",
			     "--ramp=200ms",
			     "--chat=300ms",
			     "--drain=1s",
			     NULL };
	const char *sa[] = { "--tick-rate=100", "--stall-timeout=1s",
			     "--sndbuf=4k", NULL };
	const char *sb[] = { "--ws",
			     "--players=30",
			     "--stall=6",
			     "--stall-after=100ms",
			     "--duration=4s",
			     "--ramp=100ms",
			     "--chat=500ms",
			     "--drain=1s",
			     NULL };
	char *bj, *aj;

	(void)state;
	need_tools();
	t_watchdog_arm(60, "bots over WebSocket");
	play(aa, ba, &bj, &aj);
	assert_non_null(strstr(bj, "\"ws\":true"));
	assert_int_equal(jnum(bj, "joins"), 60);
	assert_int_equal(jnum(aj, "players_peak"), 60);
	assert_true(jnum(bj, "snapshots") > 0);
	free(bj);
	free(aj);
	play(sa, sb, &bj, &aj);
	assert_int_equal(jnum(bj, "stalled"), 6);
	assert_int_equal(jnum(bj, "stall_closed"), 6);
	/* Skipped, or closed on their acks first (see test_stall). */
	assert_true(jnum(aj, "snaps_skipped") + jnum(aj, "ack_slow") > 0);
	assert_int_equal(jnum(strstr(aj, "\"reasons\""), "slow"), 6);
	free(bj);
	free(aj);
	t_watchdog_disarm();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_command_lines),
		cmocka_unit_test(test_no_server),
		cmocka_unit_test(test_play),
		cmocka_unit_test(test_play_variants),
		cmocka_unit_test(test_churn),
		cmocka_unit_test(test_stall),
		cmocka_unit_test(test_ws),
	};
	const char *dir = getenv("AO_TOOLS_DIR");

	if (dir && *dir) {
		snprintf(arena_path, sizeof(arena_path), "%s/arena/ao-arena",
			 dir);
		snprintf(bots_path, sizeof(bots_path), "%s/bots/ao-bots", dir);
		have_tools = access(arena_path, X_OK) == 0 &&
			     access(bots_path, X_OK) == 0;
	}
	if (!have_tools)
		print_message("AO_TOOLS_DIR unset or without ao-arena and "
			      "ao-bots: skipping\n");
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
