// SPDX-License-Identifier: MIT
/*
 * echobench: ao-echo against a plain single-threaded epoll echo server
 * (tools/bench/baseline/epoll_echo_server.c), on 127.0.0.1, both loaded
 * by ao-load, in one run.
 *
 * Servers: the baseline, and ao-echo with the io_uring and epoll backends,
 * each in ring mode (echo straight from the ring thread) and worker mode
 * (strand + worker + send path).  Cells: clients 1, 50, 500, 1000 x
 * payloads of 128 and 512 bytes, raw framing, closed loop with one request
 * in flight per connection, --seconds (10) each.  Every cell starts a
 * fresh server and stops it after the load; the servers of one cell run
 * one after the other, so the ratios compare runs seconds apart.
 *
 * WebSocket: ao-echo --framing=ws (io_uring, ring mode) under ao-load
 * --ws (masked binary frames, every echo checked) beside the same server
 * with len16 framing under ao-load --framing=len16, the framing the
 * WebSocket one replaces.  By default these two run at 100 and 500
 * clients only (a --clients list runs them at every count it names), and
 * the others not at 100; the target is the WebSocket server's CPU per
 * echoed message at most 1.15x len16's.
 *
 * On a 2-core machine the load generator competes with the server for
 * CPU, so requests/s alone says little; the figure that matters is the
 * server's CPU time per request: user + system ticks of the server process
 * (/proc/PID/stat fields 14 and 15, all its threads, in _SC_CLK_TCK) over
 * the load phase, divided by the requests answered in it.  The phase is
 * taken from ao-load's progress lines, one a second from the start of the
 * load, which it prints on stdout before its --json result: the ticks are
 * sampled as the first and the last line arrive and the requests are the
 * per-second rates of the lines in between, each times its interval, so
 * neither the connection set-up nor the teardown counts.  A cell too short
 * for two lines (under 2 s) uses the whole life of ao-load instead (the
 * "whole" figure, also in the JSON of every cell).
 *
 * Pinning: with 2 or more usable CPUs the server gets the first one and
 * ao-load (and echobench itself, which only sleeps in poll()) the others,
 * with one ao-load thread per CPU it has, at most one per connection;
 * --server-cpus, --load-cpus and --load-threads override.  The pinning is
 * done in the child, between fork() and exec().  ao-echo sizes its worker
 * pool from its affinity mask, so on 2 CPUs it runs one ring thread and
 * one worker on CPU 0, like the single-threaded baseline.
 *
 * Children: every child gets PR_SET_PDEATHSIG(SIGKILL) (echobench dying
 * for any reason takes them along), SIGINT/SIGTERM/SIGHUP to echobench
 * kill them first, and every wait is bounded: the port line (10 s),
 * ao-load (--seconds + 25 s), the server's graceful stop (10 s), each
 * followed by SIGKILL.  The soft RLIMIT_NOFILE is raised to the hard
 * limit, which the children inherit, for the 1000-client cells.
 *
 * Exit status: 0 when every cell ran (targets missed or not), 1 when a
 * cell could not run (a server that did not start or crashed, ao-load
 * that could not connect or died, a timeout), 2 for a usage error.
 *
 * The machine is shared: run it as
 *	flock /tmp/bench.lock build/tools/bench/echobench
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench.h"
#include "child.h"

#define MAX_LIST 8
#define MAX_RUNS 16
#define NOTE_LEN 200
#define PORT_TIMEOUT_S 10.0
#define STOP_TIMEOUT_S 10.0
#define LOAD_SLACK_S 25.0 /* connect 5 s + drain 5 s + start and margin */

/* ------------------------------------------------------------------------
 * Servers and options
 */

enum srv_id {
	S_BASE,
	S_URING_RING,
	S_URING_WORKER,
	S_EPOLL_RING,
	S_EPOLL_WORKER,
	S_URING_LEN16,
	S_URING_WS,
	NSRV
};

struct srv_desc {
	const char *name;
	const char *backend; /* ao-echo --backend; NULL: the baseline */
	const char *mode; /* ao-echo --mode */
	const char *framing; /* ao-echo --framing; NULL: raw */
};

static const struct srv_desc srvs[NSRV] = {
	[S_BASE] = { "baseline", NULL, NULL, NULL },
	[S_URING_RING] = { "uring-ring", "uring", "ring", NULL },
	[S_URING_WORKER] = { "uring-worker", "uring", "worker", NULL },
	[S_EPOLL_RING] = { "epoll-ring", "epoll", "ring", NULL },
	[S_EPOLL_WORKER] = { "epoll-worker", "epoll", "worker", NULL },
	[S_URING_LEN16] = { "uring-len16", "uring", "ring", "len16" },
	[S_URING_WS] = { "uring-ws", "uring", "ring", "ws" },
};

/* The framing a server and its ao-load speak. */
static const char *srv_framing(int s)
{
	return srvs[s].framing ? srvs[s].framing : "raw";
}

/* The WebSocket pair (uring-len16, uring-ws) and the rest split the
 * default client counts: the pair at 100 and 500, the rest but at 100. */
static bool ws_pair(int s)
{
	return s == S_URING_LEN16 || s == S_URING_WS;
}

static bool default_cell(int s, unsigned int ci);

static struct bench_opts opts;
static char echo_path[PATH_MAX], load_path[PATH_MAX], base_path[PATH_MAX];
static unsigned int srv_mask = (1u << NSRV) - 1;
static unsigned int clients_list[MAX_LIST] = { 1, 50, 100, 500, 1000 };
static unsigned int nclients = 5;
static bool clients_given;
static unsigned int sizes_list[MAX_LIST] = { 128, 512 };
static unsigned int nsizes = 2;
static bool sizes_given;
static unsigned int load_threads; /* 0: one per load CPU */
static const char *load_engine = "epoll";
static cpu_set_t srv_cpus, load_cpus, our_cpus; /* our: both */
static bool srv_cpus_given, load_cpus_given, no_pin, pinned;
static int retries = 1;
static double noise_max = 0.1;
static long clk_tck;

static const char extra_usage[] =
	"  --servers=LIST       of baseline, uring-ring, uring-worker, "
	"epoll-ring,\n"
	"                       epoll-worker, uring-len16, uring-ws "
	"(default all)\n"
	"  --clients=LIST       connections per cell (1,50,100,500,1000; "
	"by default\n"
	"                       uring-len16 and uring-ws at 100 and 500 "
	"only, the\n"
	"                       others at all but 100)\n"
	"  --sizes=LIST         payload bytes (128,512; --quick: 128)\n"
	"  --echo=PATH          ao-echo (default ../echo/ao-echo next to "
	"this program)\n"
	"  --load=PATH          ao-load (default ../load/ao-load)\n"
	"  --baseline=PATH      the baseline (default "
	"baseline/epoll_echo_server)\n"
	"  --load-threads=N     ao-load threads (default one per load CPU)\n"
	"  --load-engine=E      ao-load engine, epoll or uring (epoll)\n"
	"  --server-cpus=LIST   CPUs of the server (default the first)\n"
	"  --load-cpus=LIST     CPUs of ao-load (default the others)\n"
	"  --no-pin             pin nothing\n"
	"  --retries=N          re-runs of a disturbed cell (default 1)\n"
	"  --noise=C            disturbed: others took more than C CPUs on "
	"ours (0.1)\n"
	"  cells are named SERVER/cCLIENTS/sSIZE for --only (uring-ring/c500/"
	"s128);\n"
	"  --seconds defaults to 10 (--quick: 2)";

static __attribute__((noreturn)) void bad_value(const char *arg)
{
	fprintf(stderr, "echobench: bad value in '%s'\n", arg);
	exit(2);
}

/* "1,50,500": up to MAX_LIST numbers in [1, max]. */
static void parse_list(const char *arg, const char *val, unsigned int *out,
		       unsigned int *n, unsigned long max)
{
	const char *p = val;

	*n = 0;
	while (*p) {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(p, &end, 10);
		if (errno || end == p || !v || v > max || *n == MAX_LIST ||
		    *p == '-' || (*end && *end != ','))
			bad_value(arg);
		out[(*n)++] = (unsigned int)v;
		p = *end ? end + 1 : end;
	}
	if (!*n)
		bad_value(arg);
}

/* "0", "0,2", "1-3". */
static void parse_cpus(const char *arg, const char *val, cpu_set_t *set)
{
	const char *p = val;

	CPU_ZERO(set);
	while (*p) {
		char *end;
		unsigned long a, b;

		errno = 0;
		a = strtoul(p, &end, 10);
		if (errno || end == p || *p == '-' || a >= CPU_SETSIZE)
			bad_value(arg);
		b = a;
		if (*end == '-') {
			p = end + 1;
			b = strtoul(p, &end, 10);
			if (errno || end == p || *p == '-' || b < a ||
			    b >= CPU_SETSIZE)
				bad_value(arg);
		}
		if (*end && *end != ',')
			bad_value(arg);
		for (unsigned long c = a; c <= b; c++)
			CPU_SET(c, set);
		p = *end ? end + 1 : end;
	}
	if (!CPU_COUNT(set))
		bad_value(arg);
}

/* Whether server s runs at client count ci (see ws_pair()). */
static bool default_cell(int s, unsigned int ci)
{
	unsigned int n = clients_list[ci];

	if (clients_given)
		return true;
	return ws_pair(s) ? n == 100 || n == 500 : n != 100;
}

static void set_path(char *dst, const char *arg, const char *val)
{
	if (!*val || strlen(val) >= PATH_MAX)
		bad_value(arg);
	strcpy(dst, val);
}

static bool parse_extra(const char *a)
{
	unsigned int v[MAX_LIST], n;

	if (!strncmp(a, "--servers=", 10)) {
		char buf[256], *save, *tok;

		if (strlen(a + 10) >= sizeof(buf))
			bad_value(a);
		strcpy(buf, a + 10);
		srv_mask = 0;
		for (tok = strtok_r(buf, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			int s;

			for (s = 0; s < NSRV; s++)
				if (!strcmp(tok, srvs[s].name))
					break;
			if (s == NSRV)
				bad_value(a);
			srv_mask |= 1u << s;
		}
		if (!srv_mask)
			bad_value(a);
	} else if (!strncmp(a, "--clients=", 10)) {
		parse_list(a, a + 10, clients_list, &nclients, 100000);
		clients_given = true;
	} else if (!strncmp(a, "--sizes=", 8)) {
		parse_list(a, a + 8, sizes_list, &nsizes, 1u << 20);
		sizes_given = true;
	} else if (!strncmp(a, "--echo=", 7)) {
		set_path(echo_path, a, a + 7);
	} else if (!strncmp(a, "--load=", 7)) {
		set_path(load_path, a, a + 7);
	} else if (!strncmp(a, "--baseline=", 11)) {
		set_path(base_path, a, a + 11);
	} else if (!strncmp(a, "--load-threads=", 15)) {
		parse_list(a, a + 15, v, &n, 1024);
		if (n != 1)
			bad_value(a);
		load_threads = v[0];
	} else if (!strncmp(a, "--load-engine=", 14)) {
		load_engine = a + 14;
		if (strcmp(load_engine, "epoll") &&
		    strcmp(load_engine, "uring"))
			bad_value(a);
	} else if (!strncmp(a, "--server-cpus=", 14)) {
		parse_cpus(a, a + 14, &srv_cpus);
		srv_cpus_given = true;
	} else if (!strncmp(a, "--load-cpus=", 12)) {
		parse_cpus(a, a + 12, &load_cpus);
		load_cpus_given = true;
	} else if (!strcmp(a, "--no-pin")) {
		no_pin = true;
	} else if (!strncmp(a, "--retries=", 10)) {
		char *end;

		errno = 0;
		retries = (int)strtol(a + 10, &end, 10);
		if (errno || end == a + 10 || *end || retries < 0 ||
		    retries > 10)
			bad_value(a);
	} else if (!strncmp(a, "--noise=", 8)) {
		char *end;

		noise_max = strtod(a + 8, &end);
		if (end == a + 8 || *end || !(noise_max >= 0))
			bad_value(a);
	} else {
		return false;
	}
	return true;
}

/* The default paths, relative to this program's own folder. */
static void default_paths(void)
{
	bench_default_path(echo_path, sizeof(echo_path), "../echo/ao-echo");
	bench_default_path(load_path, sizeof(load_path), "../load/ao-load");
	bench_default_path(base_path, sizeof(base_path),
			   "baseline/epoll_echo_server");
}

static void cpus_str(const cpu_set_t *s, char *buf, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (int c = 0; c < CPU_SETSIZE && len + 8 < n; c++)
		if (CPU_ISSET(c, s))
			len += (size_t)snprintf(buf + len, n - len, "%s%d",
						len ? "," : "", c);
}

/* Which CPUs the server and ao-load get (see the top of the file). */
static int plan_cpus(void)
{
	cpu_set_t allowed, tmp;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return -errno;
	if (no_pin)
		return 0;
	if (srv_cpus_given) {
		CPU_AND(&tmp, &srv_cpus, &allowed);
		if (!CPU_EQUAL(&tmp, &srv_cpus))
			return -EINVAL;
	}
	if (load_cpus_given) {
		CPU_AND(&tmp, &load_cpus, &allowed);
		if (!CPU_EQUAL(&tmp, &load_cpus))
			return -EINVAL;
	}
	if (!srv_cpus_given && !load_cpus_given &&
	    !bench_split_cpus(&srv_cpus, &load_cpus))
		return 0; /* one CPU: nothing to separate */
	if (!srv_cpus_given && load_cpus_given) {
		CPU_XOR(&srv_cpus, &allowed, &load_cpus);
		CPU_AND(&srv_cpus, &srv_cpus, &allowed);
		if (!CPU_COUNT(&srv_cpus))
			srv_cpus = allowed;
	}
	if (!load_cpus_given) {
		CPU_XOR(&load_cpus, &allowed, &srv_cpus);
		CPU_AND(&load_cpus, &load_cpus, &allowed);
		if (!CPU_COUNT(&load_cpus))
			load_cpus = allowed;
	}
	CPU_OR(&our_cpus, &srv_cpus, &load_cpus);
	pinned = true;
	return 0;
}

/* ------------------------------------------------------------------------
 * What is measured
 */

/*
 * How long the threads of a process sat runnable without a CPU, in ns: the
 * sum of /proc/PID/task/TID/schedstat's second field (over a cell: how much
 * its own threads, other processes or ao-load got in the server's way),
 * and in *slices the third, how many times they were put on a CPU (about
 * the context switches: wake-ups per request).
 */
static long long proc_run_delay_ns(pid_t pid, long long *slices)
{
	char path[300];
	struct dirent *e;
	long long sum = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		unsigned long long run, wait, cnt;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.32s/schedstat",
			 (int)pid, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%llu %llu %llu", &run, &wait, &cnt) == 3) {
			sum += (long long)wait;
			*slices += (long long)cnt;
		}
		fclose(f);
	}
	closedir(d);
	return sum;
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

/* What is sampled at the edges of the load phase. */
struct snap {
	double t; /* s */
	long long srv, srv_user; /* server ticks: user + system, user */
	long long load; /* ao-load ticks (-1 before it runs) */
	long long delay, slices; /* server run delay (ns), time slices */
	long long busy; /* busy ticks of our CPUs */
};

static void take_snap(struct snap *sn, pid_t srv, pid_t load)
{
	sn->t = child_now_s();
	sn->srv = child_cpu_ticks(srv, &sn->srv_user);
	sn->load = load > 0 ? child_cpu_ticks(load, NULL) : -1;
	sn->slices = 0;
	sn->delay = proc_run_delay_ns(srv, &sn->slices);
	/* Minus the server's and ao-load's own ticks, what is left over a
	 * cell is the CPU other processes took on their CPUs. */
	sn->busy = bench_busy_ticks(pinned ? &our_cpus : NULL);
}

static bool snap_valid(const struct snap *a, const struct snap *b)
{
	return a->srv >= 0 && b->srv >= a->srv && a->delay >= 0 &&
	       b->delay >= a->delay && a->busy >= 0 && b->busy >= a->busy &&
	       b->t > a->t;
}

/* ------------------------------------------------------------------------
 * One cell: start the server, load it, stop it.
 */

struct sample {
	double rps; /* ao-load: requests / its load phase */
	double p50_ns, p99_ns, p999_ns, max_ns;
	double cpu_us; /* server CPU us per request (window, else whole) */
	double cpu_us_whole; /* over the whole life of ao-load */
	double window_s; /* 0: no window, whole */
	double srv_util, load_util; /* CPUs used over the window */
	double srv_wait; /* server threads runnable without a CPU, in CPUs */
	double others; /* CPUs other processes used on ours, over the window */
	double user_share; /* of the server's CPU, user time */
	double slices_per_req; /* server threads put on a CPU, per request */
	long long requests, errors, mismatches; /* errors: not mismatches */
	long long conn_errors, timeouts;
	int srv_rc; /* the server's exit status after SIGTERM, or 128+sig */
	double srv_accepted, srv_enobufs, srv_pool_exhausted; /* -1 */
};

struct cell {
	int runs, ok, failed, stop_bad, retried;
	struct sample s[MAX_RUNS]; /* the ok ones */
	long long errors, mismatches; /* over the ok runs */
	char note[NOTE_LEN];
	/* medians, by summarise() */
	double rps, p99_ns, cpu_us, cpu_us_whole, window_s, srv_util, load_util,
		srv_wait, others, user_share, slices_per_req;
};

static struct cell cells[NSRV][MAX_LIST][MAX_LIST];
static int failed_runs;

static __attribute__((format(printf, 2, 3))) void note(struct cell *c,
						       const char *fmt, ...)
{
	size_t n = strlen(c->note);
	va_list ap;

	/* The first note is the cause; later ones follow it. */
	if (n && n + 3 < sizeof(c->note)) {
		strcpy(c->note + n, "; ");
		n += 2;
	}
	va_start(ap, fmt);
	vsnprintf(c->note + n, sizeof(c->note) - n, fmt, ap);
	va_end(ap);
}

static int server_start(int s, struct child *c, unsigned int *port,
			struct cell *cl)
{
	struct child_args a = { .n = 0 };
	char st[32], tail[256];
	int r;

	if (s == S_BASE) {
		child_arg(&a, "%s", base_path);
		child_arg(&a, "--port=0");
		child_arg(&a, "--framing=raw");
	} else {
		child_arg(&a, "%s", echo_path);
		child_arg(&a, "--port=0");
		child_arg(&a, "--framing=%s", srv_framing(s));
		child_arg(&a, "--backend=%s", srvs[s].backend);
		child_arg(&a, "--mode=%s", srvs[s].mode);
		child_arg(&a, "--drain-timeout=2s");
		child_arg(&a, "--quiet");
		child_arg(&a, "--json");
	}
	r = child_spawn(c, a.v,
			&(struct child_opts){ .cpus = pinned ? &srv_cpus : NULL,
					      .keep_stderr = true });
	if (r) {
		note(cl, "cannot start %s: %s", a.v[0], strerror(-r));
		return r;
	}
	r = child_port(c, child_now_s() + PORT_TIMEOUT_S, port);
	if (!r)
		return 0;
	if (r == -ETIMEDOUT) {
		child_kill(c);
		note(cl, "server: no port line in %.0f s (%s)", PORT_TIMEOUT_S,
		     child_stderr_tail(c, tail, sizeof(tail)));
	} else {
		child_wait(c, 1.0);
		child_kill(c);
		note(cl, "server did not start (%s): %s",
		     child_status(c, st, sizeof(st)),
		     child_stderr_tail(c, tail, sizeof(tail)));
	}
	return -EIO;
}

/* SIGTERM, the final report (ao-echo --json), the exit status. */
static void server_stop(struct child *c, struct sample *sm, struct cell *cl)
{
	double end = child_now_s() + STOP_TIMEOUT_S, left;
	static char final[CHILD_LINE_MAX];
	char st[32], tail[256];

	kill(c->pid, SIGTERM);
	child_last_json(c, end, "\"final\"", final, sizeof(final));
	sm->srv_accepted = json_or(final, "accepted", -1);
	sm->srv_enobufs = json_or(final, "enobufs", -1);
	sm->srv_pool_exhausted = json_or(final, "pool_exhausted", -1);
	left = end - child_now_s();
	if (child_wait(c, left > 0 ? left : 0)) {
		child_kill(c);
		note(cl, "server did not stop within %.0f s of SIGTERM",
		     STOP_TIMEOUT_S);
		sm->srv_rc = 128 + SIGKILL;
		cl->stop_bad++;
		return;
	}
	sm->srv_rc = WIFEXITED(c->status) ? WEXITSTATUS(c->status) :
					    128 + WTERMSIG(c->status);
	if (sm->srv_rc) {
		cl->stop_bad++;
		note(cl, "server %s after SIGTERM: %s",
		     child_status(c, st, sizeof(st)),
		     child_stderr_tail(c, tail, sizeof(tail)));
	}
}

/* ao-load threads for a cell: --load-threads, else one per load CPU. */
static unsigned int threads_for(unsigned int clients)
{
	unsigned int t = load_threads;

	if (!t)
		t = pinned ? (unsigned int)CPU_COUNT(&load_cpus) : 1;
	return t < clients ? t : clients;
}

/* Load the server on port: fills sm; 0, or -1 if the load did not run. */
static int load_run(int s, pid_t srv, unsigned int port, unsigned int clients,
		    unsigned int size, struct sample *sm, struct cell *cl)
{
	struct child_args a = { .n = 0 };
	struct child ld;
	unsigned int threads = threads_for(clients);
	long long ms = (long long)(opts.seconds * 1000 + 0.5);
	struct snap before, after, now, w0 = { 0 }, w1 = { 0 };
	double t_prev = 0, w_req = 0, span;
	static char json[CHILD_LINE_MAX];
	double v, load_cpu_s, end;
	int nlines = 0, r, rc;
	char st[32], tail[256];

	child_arg(&a, "%s", load_path);
	child_arg(&a, "--port=%u", port);
	child_arg(&a, "--connections=%u", clients);
	child_arg(&a, "--size=%u", size);
	child_arg(&a, "--duration=%lldms", ms > 0 ? ms : 1);
	child_arg(&a, "--threads=%u", threads);
	child_arg(&a, "--engine=%s", load_engine);
	if (s == S_URING_WS)
		child_arg(&a, "--ws");
	else
		child_arg(&a, "--framing=%s", srv_framing(s));
	child_arg(&a, "--timeout=5s");
	child_arg(&a, "--json");
	child_arg(&a, "--progress=always");

	json[0] = '\0';
	take_snap(&before, srv, -1);
	r = child_spawn(&ld, a.v,
			&(struct child_opts){ .cpus = pinned ? &load_cpus :
							       NULL,
					      .keep_stderr = true });
	if (r) {
		note(cl, "cannot start %s: %s", a.v[0], strerror(-r));
		return -1;
	}
	end = child_now_s() + opts.seconds + LOAD_SLACK_S;
	while ((r = child_line(&ld, end)) == 1) {
		const char *l = ld.line;
		double el, rate;

		if (l[0] == '{') {
			snprintf(json, sizeof(json), "%s", l);
			continue;
		}
		if (sscanf(l, " %lfs %lf req/s", &el, &rate) != 2)
			continue;
		/* A progress line: ao-load printed it just now. */
		take_snap(&now, srv, ld.pid);
		if (!nlines)
			w0 = now;
		else
			w_req += rate * (now.t - t_prev);
		w1 = now;
		t_prev = now.t;
		nlines++;
	}
	take_snap(&after, srv, -1);
	if (r == -ETIMEDOUT) {
		child_close(&ld);
		note(cl, "ao-load did not finish in %.0f s",
		     opts.seconds + LOAD_SLACK_S);
		return -1;
	}
	if (child_wait(&ld, 5.0)) {
		child_close(&ld);
		note(cl, "ao-load did not exit after closing its stdout");
		return -1;
	}
	rc = WIFEXITED(ld.status) ? WEXITSTATUS(ld.status) : -1;
	if ((rc != 0 && rc != 1) || !json[0] ||
	    !json_get(json, "requests", &v)) {
		/* 2: usage, 3: could not connect, 1 without a result: a
		 * fatal error; a signal: a crash. */
		note(cl, "ao-load %s%s: %s", child_status(&ld, st, sizeof(st)),
		     rc == 3 ? " (could not connect)" : "",
		     child_stderr_tail(&ld, tail, sizeof(tail)));
		child_close(&ld);
		return -1;
	}
	sm->requests = (long long)v;
	if (json_get(json, "mismatches", &v))
		sm->mismatches = (long long)v;
	if (json_get(json, "errors", &v))
		sm->errors = (long long)v - sm->mismatches;
	if (json_get(json, "conn_errors", &v))
		sm->conn_errors = (long long)v;
	if (json_get(json, "timeouts", &v))
		sm->timeouts = (long long)v;
	json_get(json, "requests_per_sec", &sm->rps);
	json_get(json, "p50_ns", &sm->p50_ns);
	json_get(json, "p99_ns", &sm->p99_ns);
	json_get(json, "p99.9_ns", &sm->p999_ns);
	json_get(json, "max_ns", &sm->max_ns);
	load_cpu_s =
		(double)(ld.ru.ru_utime.tv_sec + ld.ru.ru_stime.tv_sec) +
		(double)(ld.ru.ru_utime.tv_usec + ld.ru.ru_stime.tv_usec) / 1e6;
	if (snap_valid(&before, &after) && sm->requests > 0)
		sm->cpu_us_whole = (double)(after.srv - before.srv) /
				   (double)clk_tck * 1e6 / (double)sm->requests;
	if (nlines >= 2 && w_req > 0 && snap_valid(&w0, &w1) && w0.load >= 0 &&
	    w1.load >= w0.load) {
		/* The load phase: from the first progress line to the last. */
		span = w1.t - w0.t;
		sm->window_s = span;
		sm->cpu_us = (double)(w1.srv - w0.srv) / (double)clk_tck * 1e6 /
			     w_req;
		sm->srv_util =
			(double)(w1.srv - w0.srv) / (double)clk_tck / span;
		sm->load_util =
			(double)(w1.load - w0.load) / (double)clk_tck / span;
		sm->srv_wait = (double)(w1.delay - w0.delay) / 1e9 / span;
		sm->others = (double)((w1.busy - w0.busy) - (w1.srv - w0.srv) -
				      (w1.load - w0.load)) /
			     (double)clk_tck / span;
		sm->user_share = ratio((double)(w1.srv_user - w0.srv_user),
				       (double)(w1.srv - w0.srv));
		sm->slices_per_req = (double)(w1.slices - w0.slices) / w_req;
	} else if (snap_valid(&before, &after)) {
		/* Too short for two lines: the whole life of ao-load (its
		 * CPU from wait4()). */
		span = after.t - before.t;
		sm->cpu_us = sm->cpu_us_whole;
		sm->srv_util = (double)(after.srv - before.srv) /
			       (double)clk_tck / span;
		sm->load_util = load_cpu_s / span;
		sm->srv_wait =
			(double)(after.delay - before.delay) / 1e9 / span;
		sm->others = ((double)((after.busy - before.busy) -
				       (after.srv - before.srv)) /
				      (double)clk_tck -
			      load_cpu_s) /
			     span;
		sm->user_share =
			ratio((double)(after.srv_user - before.srv_user),
			      (double)(after.srv - before.srv));
		if (sm->requests > 0)
			sm->slices_per_req =
				(double)(after.slices - before.slices) /
				(double)sm->requests;
	}
	if (sm->others < 0)
		sm->others = 0; /* tick rounding */
	if (rc == 1 && !sm->errors && !sm->mismatches)
		note(cl, "ao-load exit 1: %s",
		     child_stderr_tail(&ld, tail, sizeof(tail)));
	child_close(&ld);
	return 0;
}

static void cell_name(int s, unsigned int ci, unsigned int si, char *buf,
		      size_t n)
{
	snprintf(buf, n, "%s/c%u/s%u", srvs[s].name, clients_list[ci],
		 sizes_list[si]);
}

/* Start the server, load it, stop it: 0, or -1 if that failed. */
static int run_once(int s, unsigned int ci, unsigned int si, struct sample *sm)
{
	struct cell *cl = &cells[s][ci][si];
	struct child srv;
	unsigned int port = 0;
	char st[32], tail[256];
	int r;

	memset(sm, 0, sizeof(*sm));
	if (server_start(s, &srv, &port, cl)) {
		child_close(&srv);
		return -1;
	}
	r = load_run(s, srv.pid, port, clients_list[ci], sizes_list[si], sm,
		     cl);
	if (child_gone(&srv)) {
		/* It died under the load (a crash, or it gave up). */
		note(cl, "server died during the load: %s: %s",
		     child_status(&srv, st, sizeof(st)),
		     child_stderr_tail(&srv, tail, sizeof(tail)));
		child_close(&srv);
		return -1;
	}
	server_stop(&srv, sm, cl);
	child_close(&srv);
	return r;
}

/*
 * One run of a cell.  A run during which other processes took more than
 * --noise CPUs on ours is repeated, up to --retries times, and the least
 * disturbed attempt kept: on a shared machine a neighbour's build halves
 * a cell's requests/s and changes its batching (so its CPU per request).
 */
static void run_cell(int s, unsigned int ci, unsigned int si)
{
	struct cell *cl = &cells[s][ci][si];
	struct sample sm, best;

	cl->runs++;
	for (int attempt = 0;; attempt++) {
		if (run_once(s, ci, si, &sm))
			goto failed;
		if (!attempt || sm.others < best.others)
			best = sm;
		if (best.others <= noise_max || attempt >= retries)
			break;
		cl->retried++;
	}
	cl->s[cl->ok++] = best;
	cl->errors += best.errors;
	cl->mismatches += best.mismatches;
	return;
failed:
	cl->failed++;
	failed_runs++;
	if (!opts.json) {
		char name[64];

		cell_name(s, ci, si, name, sizeof(name));
		fprintf(stderr, "\rechobench: %s: %s\n", name, cl->note);
	}
}

/* ------------------------------------------------------------------------
 * Report
 */

static double med(const struct cell *c, size_t off)
{
	double v[MAX_RUNS];

	for (int i = 0; i < c->ok; i++)
		v[i] = *(const double *)((const char *)&c->s[i] + off);
	return bench_median(v, (size_t)c->ok);
}

static void summarise(struct cell *c)
{
	if (!c->ok)
		return;
	c->rps = med(c, offsetof(struct sample, rps));
	c->p99_ns = med(c, offsetof(struct sample, p99_ns));
	c->cpu_us = med(c, offsetof(struct sample, cpu_us));
	c->cpu_us_whole = med(c, offsetof(struct sample, cpu_us_whole));
	c->window_s = med(c, offsetof(struct sample, window_s));
	c->srv_util = med(c, offsetof(struct sample, srv_util));
	c->load_util = med(c, offsetof(struct sample, load_util));
	c->srv_wait = med(c, offsetof(struct sample, srv_wait));
	c->others = med(c, offsetof(struct sample, others));
	c->user_share = med(c, offsetof(struct sample, user_share));
	c->slices_per_req = med(c, offsetof(struct sample, slices_per_req));
}

static bool ok(int s, unsigned int ci, unsigned int si)
{
	return cells[s][ci][si].ok > 0;
}

static void print_cell_json(int s, unsigned int ci, unsigned int si)
{
	const struct cell *c = &cells[s][ci][si];
	const struct cell *b = &cells[S_BASE][ci][si];
	const struct sample *last = c->ok ? &c->s[c->ok - 1] : NULL;
	char name[64];

	cell_name(s, ci, si, name, sizeof(name));
	bench_json_begin("echobench");
	bench_json_str("cell", name);
	bench_json_str("server", srvs[s].name);
	bench_json_str("backend", srvs[s].backend ? srvs[s].backend : "epoll");
	bench_json_str("mode", srvs[s].mode ? srvs[s].mode : "baseline");
	bench_json_int("clients", clients_list[ci]);
	bench_json_int("size", sizes_list[si]);
	bench_json_str("framing", srv_framing(s));
	bench_json_num("seconds", opts.seconds);
	bench_json_int("load_threads", threads_for(clients_list[ci]));
	bench_json_str("load_engine", load_engine);
	bench_json_int("runs", c->runs);
	bench_json_int("ok", c->ok);
	bench_json_int("failed", c->failed);
	bench_json_int("errors", c->errors);
	bench_json_int("mismatches", c->mismatches);
	if (c->ok) {
		long long req = 0;

		for (int i = 0; i < c->ok; i++)
			req += c->s[i].requests;
		bench_json_int("requests", req);
		bench_json_num("requests_per_sec", c->rps);
		bench_json_num("p99_ns", c->p99_ns);
		bench_json_num("p50_ns", last->p50_ns);
		bench_json_num("p999_ns", last->p999_ns);
		bench_json_num("max_ns", last->max_ns);
		bench_json_num("server_cpu_us_per_req", c->cpu_us);
		bench_json_num("server_cpu_us_per_req_whole", c->cpu_us_whole);
		bench_json_num("cpu_window_s", c->window_s);
		bench_json_num("server_cpus_used", c->srv_util);
		bench_json_num("load_cpus_used", c->load_util);
		bench_json_num("server_cpu_wait", c->srv_wait);
		bench_json_num("others_cpus", c->others);
		bench_json_num("server_user_share", c->user_share);
		bench_json_num("server_slices_per_req", c->slices_per_req);
		bench_json_int("retried", c->retried);
		if (s != S_BASE && b->ok) {
			bench_json_num("cpu_vs_baseline",
				       ratio(c->cpu_us, b->cpu_us));
			bench_json_num("rps_vs_baseline",
				       ratio(c->rps, b->rps));
		}
		if (s == S_URING_WS && cells[S_URING_LEN16][ci][si].ok)
			bench_json_num(
				"cpu_vs_len16",
				ratio(c->cpu_us,
				      cells[S_URING_LEN16][ci][si].cpu_us));
		if (last->srv_accepted >= 0)
			bench_json_num("server_accepted", last->srv_accepted);
		if (last->srv_enobufs >= 0)
			bench_json_num("server_enobufs", last->srv_enobufs);
		if (last->srv_pool_exhausted >= 0)
			bench_json_num("server_pool_exhausted",
				       last->srv_pool_exhausted);
		bench_json_int("server_exit", last->srv_rc);
	}
	if (c->note[0])
		bench_json_str("note", c->note);
	bench_json_end();
}

static void print_header(unsigned int size)
{
	printf("\n%u-byte payload\n"
	       "%-12s %7s %8s %6s %8s %7s %6s %7s %7s %7s %6s %6s %4s  %s\n",
	       size, "server", "clients", "req/s", "x-base", "p99-us", "cpu-us",
	       "x-base", "srv-cpu", "ld-cpu", "srv-wt", "others", "errors",
	       "mism", "notes");
}

static void print_row(int s, unsigned int ci, unsigned int si)
{
	const struct cell *c = &cells[s][ci][si];
	const struct cell *b = &cells[S_BASE][ci][si];
	char xr[16] = "", xc[16] = "";

	printf("%-12s %7u", srvs[s].name, clients_list[ci]);
	if (!c->ok) {
		printf(" %8s %6s %8s %7s %6s %7s %7s %7s %6s %6s %4s  failed: "
		       "%s\n",
		       "-", "", "-", "-", "", "", "", "", "", "", "", c->note);
		return;
	}
	if (b->ok) {
		snprintf(xr, sizeof(xr), "%.2fx", ratio(c->rps, b->rps));
		snprintf(xc, sizeof(xc), "%.2fx", ratio(c->cpu_us, b->cpu_us));
	}
	printf(" %8.0f %6s %8.1f %7.2f %6s %7.2f %7.2f %7.2f %6.2f %6lld "
	       "%4lld ",
	       c->rps, xr, c->p99_ns / 1e3, c->cpu_us, xc, c->srv_util,
	       c->load_util, c->srv_wait, c->others, c->errors, c->mismatches);
	if (c->window_s <= 0)
		printf(" whole-run cpu");
	if (c->retried)
		printf(" retried %d", c->retried);
	if (c->failed)
		printf(" %d of %d runs failed", c->failed, c->runs);
	if (c->note[0])
		printf(" %s", c->note);
	putchar('\n');
}

static void print_tables(void)
{
	for (unsigned int si = 0; si < nsizes; si++) {
		bool header = false;

		for (unsigned int ci = 0; ci < nclients; ci++) {
			bool any = false;

			for (int s = 0; s < NSRV; s++) {
				if (!cells[s][ci][si].runs)
					continue;
				if (!header)
					print_header(sizes_list[si]);
				else if (!any)
					putchar('\n');
				header = any = true;
				print_row(s, ci, si);
			}
		}
	}
}

/* ------------------------------------------------------------------------
 * Targets, against this run's baseline: ring mode's CPU and rate, and
 * worker mode's CPU (io_uring's worker mode within 1.25x its ring mode's;
 * the epoll backend's worker mode within 1.1x the baseline's)
 */

static struct bench_run run = { .name = "echobench",
				.seconds_key = "seconds_total" };

/* The CPU targets hold at 50 clients and more: with one client the server
 * mostly sleeps and wakes per request, which no design avoids. */
static bool loaded(unsigned int ci)
{
	return clients_list[ci] >= 50;
}

/* " noisy: ..." when other processes disturbed either cell of a ratio. */
static const char *noisy(const struct cell *a, const struct cell *b, char *buf,
			 size_t n)
{
	double o = a->others > b->others ? a->others : b->others;

	buf[0] = '\0';
	if (o > noise_max)
		snprintf(buf, n, " noisy: others took %.2f CPUs", o);
	return buf;
}

static void cpu_target(int s, int ref, unsigned int ci, unsigned int si,
		       double limit)
{
	const struct cell *c = &cells[s][ci][si], *r = &cells[ref][ci][si];
	char nz[64];
	double x;

	if (!ok(s, ci, si) || !ok(ref, ci, si))
		return;
	x = ratio(c->cpu_us, r->cpu_us);
	bench_goal(&run, NULL, x <= limit, NAN, NAN,
		   "%-12s c%-4u s%-3u CPU/request %.2fx %s's (<= %g; %.2f vs "
		   "%.2f us)%s",
		   srvs[s].name, clients_list[ci], sizes_list[si], x,
		   srvs[ref].name, limit, c->cpu_us, r->cpu_us,
		   noisy(c, r, nz, sizeof(nz)));
}

static void targets(void)
{
	long long mism = 0;
	int cells_ok = 0, bad_cells = 0;
	char nz[64];
	char bad[128] = "";

	if (!opts.json)
		printf("\nTargets, against this run's baseline "
		       "(CPU targets at 50+ clients):\n");
	for (unsigned int si = 0; si < nsizes; si++)
		for (unsigned int ci = 0; ci < nclients; ci++) {
			const struct cell *c = &cells[S_URING_RING][ci][si];
			const struct cell *b = &cells[S_BASE][ci][si];
			double x;

			if (!loaded(ci))
				continue;
			cpu_target(S_URING_RING, S_BASE, ci, si, 0.7);
			if (!ok(S_URING_RING, ci, si) || !ok(S_BASE, ci, si))
				continue;
			x = ratio(c->rps, b->rps);
			bench_goal(
				&run, NULL, x >= 1.0, NAN, NAN,
				"%-12s c%-4u s%-3u requests/s %.2fx baseline's "
				"(>= 1; %.0f vs %.0f)%s",
				srvs[S_URING_RING].name, clients_list[ci],
				sizes_list[si], x, c->rps, b->rps,
				noisy(c, b, nz, sizeof(nz)));
		}
	for (unsigned int si = 0; si < nsizes; si++)
		for (unsigned int ci = 0; ci < nclients; ci++)
			if (loaded(ci))
				cpu_target(S_URING_WORKER, S_URING_RING, ci, si,
					   1.25);
	for (unsigned int si = 0; si < nsizes; si++)
		for (unsigned int ci = 0; ci < nclients; ci++) {
			if (!loaded(ci))
				continue;
			cpu_target(S_EPOLL_RING, S_BASE, ci, si, 1.1);
			cpu_target(S_EPOLL_WORKER, S_BASE, ci, si, 1.1);
		}

	for (int s = 0; s < NSRV; s++)
		for (unsigned int ci = 0; ci < nclients; ci++)
			for (unsigned int si = 0; si < nsizes; si++) {
				const struct cell *c = &cells[s][ci][si];

				if (!c->ok)
					continue;
				cells_ok++;
				mism += c->mismatches;
				if (c->mismatches && bad_cells++ < 3) {
					size_t n = strlen(bad);

					snprintf(bad + n, sizeof(bad) - n,
						 " %s/c%u/s%u", srvs[s].name,
						 clients_list[ci],
						 sizes_list[si]);
				}
			}
	if (cells_ok && !mism)
		bench_goal(&run, NULL, true, NAN, NAN,
			   "zero mismatches: none in %d cells", cells_ok);
	else if (cells_ok)
		bench_goal(&run, NULL, false, NAN, NAN,
			   "zero mismatches: %lld in %d of %d cells:%s", mism,
			   bad_cells, cells_ok, bad);

	/* WebSocket against len16, at every count both ran (100 and 500 by
	 * default). */
	for (unsigned int si = 0; si < nsizes; si++)
		for (unsigned int ci = 0; ci < nclients; ci++)
			if (loaded(ci))
				cpu_target(S_URING_WS, S_URING_LEN16, ci, si,
					   1.15);

	for (unsigned int ci = 0; ci < nclients; ci++) {
		if (clients_list[ci] != 1000)
			continue;
		for (int s = 0; s < NSRV; s++) {
			long long errs = 0;
			int runs = 0, failed = 0;

			for (unsigned int si = 0; si < nsizes; si++) {
				const struct cell *c = &cells[s][ci][si];

				runs += c->runs;
				failed += c->failed;
				errs += c->errors + c->mismatches;
			}
			if (!runs)
				continue;
			bench_goal(&run, NULL, !errs && !failed, NAN, NAN,
				   "%-12s 1000 clients served without errors: "
				   "%lld errors, %d of %d runs failed",
				   srvs[s].name, errs, failed, runs);
		}
	}
}

static int need(const char *path, const char *what, const char *hint)
{
	if (!access(path, X_OK))
		return 0;
	fprintf(stderr, "echobench: %s not found at %s (%s)\n", what, path,
		hint);
	return -1;
}

int main(int argc, char **argv)
{
	unsigned long long nofile;
	bool quick = false, progress;
	char scpus[64] = "-", lcpus[64] = "-", noisy1[64], noisy2[64];
	int r, stop_bad = 0, noisy_cells = 0;

	bench_begin(&run);

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--quick"))
			quick = true;
	bench_parse(argc, argv, &opts, quick ? 2.0 : 10.0, 1, extra_usage,
		    parse_extra);
	if (opts.runs > MAX_RUNS) {
		fprintf(stderr, "echobench: --runs must be <= %d\n", MAX_RUNS);
		return 2;
	}
	if (opts.quick && !sizes_given) {
		sizes_list[0] = 128;
		nsizes = 1;
	}
	run.json = opts.json;
	clk_tck = bench_clk_tck();
	default_paths();
	if (need(load_path, "ao-load", "make tools, or --load=PATH") ||
	    ((srv_mask & (1u << S_BASE)) &&
	     need(base_path, "the baseline",
		  "make bench, or --baseline=PATH")) ||
	    ((srv_mask & ~(1u << S_BASE)) &&
	     need(echo_path, "ao-echo",
		  "make tools, --echo=PATH, or --servers=baseline")))
		return 1;
	r = plan_cpus();
	if (r) {
		fprintf(stderr, "echobench: bad CPU sets: %s\n", strerror(-r));
		return 2;
	}
	if (pinned) {
		cpus_str(&srv_cpus, scpus, sizeof(scpus));
		cpus_str(&load_cpus, lcpus, sizeof(lcpus));
		/* echobench only sleeps in poll(): keep it off the server's
		 * CPUs all the same. */
		sched_setaffinity(0, sizeof(load_cpus), &load_cpus);
	}
	/* For the 1000-client cells: the children inherit it. */
	nofile = bench_raise_nofile();
	for (unsigned int ci = 0; ci < nclients; ci++)
		if (nofile != RLIM_INFINITY &&
		    nofile < clients_list[ci] + 64ull)
			fprintf(stderr,
				"echobench: warning: RLIMIT_NOFILE %llu is too "
				"low for %u clients\n",
				nofile, clients_list[ci]);
	child_guard_signals();

	if (!opts.json) {
		printf("echobench: ao-echo (uring, epoll x ring, worker) and "
		       "the epoll baseline on 127.0.0.1,\n"
		       "raw framing (uring-len16: len16, uring-ws: WebSocket), "
		       "closed loop (1 request in\n"
		       "flight per connection), %.1f s per cell, %d run%s\n",
		       opts.seconds, opts.runs, opts.runs == 1 ? "" : "s");
		unsigned int t = threads_for(UINT_MAX);

		if (pinned)
			printf("server on CPU %s, ao-load on CPU %s", scpus,
			       lcpus);
		else
			printf("server and ao-load not pinned");
		printf(" (%s engine, up to %u thread%s)", load_engine, t,
		       t == 1 ? "" : "s");
		printf("; RLIMIT_NOFILE %llu; load average %.2f\n"
		       "cpu-us: server user+system CPU per request over the "
		       "load phase (ao-load's first to\n"
		       "  last progress line); x-base: against the baseline "
		       "of the same cell (req/s: higher\n"
		       "  is better, cpu-us: lower); srv-cpu, ld-cpu: CPUs "
		       "the server, ao-load used over that\n"
		       "  phase (1.00 = one); srv-wt: the server's threads "
		       "runnable without a CPU (in CPUs);\n"
		       "  others: CPUs other processes took on ours (noise; "
		       "a cell above %.2f is re-run up to\n"
		       "  %d time%s, the least disturbed run kept)\n",
		       nofile, run.load0, noise_max, retries,
		       retries == 1 ? "" : "s");
		fflush(stdout);
	}
	progress = !opts.json && isatty(STDERR_FILENO);
	for (int k = 0; k < opts.runs; k++)
		for (unsigned int si = 0; si < nsizes; si++)
			for (unsigned int ci = 0; ci < nclients; ci++)
				for (int s = 0; s < NSRV; s++) {
					char name[64];

					if (!(srv_mask & (1u << s)))
						continue;
					if (!default_cell(s, ci))
						continue;
					cell_name(s, ci, si, name,
						  sizeof(name));
					if (!bench_selected(&opts, name))
						continue;
					if (progress)
						fprintf(stderr,
							"\r  run %d/%d %-24s",
							k + 1, opts.runs, name);
					run_cell(s, ci, si);
				}
	if (progress)
		fprintf(stderr, "\r%40s\r", "");

	for (int s = 0; s < NSRV; s++)
		for (unsigned int ci = 0; ci < nclients; ci++)
			for (unsigned int si = 0; si < nsizes; si++) {
				summarise(&cells[s][ci][si]);
				stop_bad += cells[s][ci][si].stop_bad;
				noisy_cells += cells[s][ci][si].ok &&
					       cells[s][ci][si].others >
						       noise_max;
			}
	if (opts.json) {
		for (unsigned int si = 0; si < nsizes; si++)
			for (unsigned int ci = 0; ci < nclients; ci++)
				for (int s = 0; s < NSRV; s++)
					if (cells[s][ci][si].runs)
						print_cell_json(s, ci, si);
	} else {
		print_tables();
	}
	targets();
	snprintf(noisy1, sizeof(noisy1), "noisy cell (others > %.2f CPUs)",
		 noise_max);
	snprintf(noisy2, sizeof(noisy2), "noisy cells (others > %.2f CPUs)",
		 noise_max);
	bench_end(&run,
		  (const struct bench_count[]){
			  { "failed_runs", failed_runs, "run failed to run",
			    "runs failed to run" },
			  { "unclean_stops", stop_bad, "unclean server stop",
			    "unclean server stops" },
			  { "noisy_cells", noisy_cells, noisy1, noisy2 } },
		  3);
	return failed_runs ? 1 : 0;
}
