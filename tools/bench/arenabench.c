// SPDX-License-Identifier: MIT
/*
 * arenabench: ao-arena under ao-bots on 127.0.0.1, the game server's
 * figures in one run.
 *
 * Cells: rooms of 50 at 20 Hz with 200, 1000, 2000 and 5000 players
 * (--players), --seconds (20; --quick 5) measured each, after a ramp (the
 * bots connect over players / 2000 s, at least 1 s) and a 2 s warm-up.
 * Each player count runs three servers one after the other: the shared
 * broadcast (one snapshot buffer per room and tick, referenced by every
 * send) on one ring thread, the copy broadcast (--copy-broadcast: a copy
 * per member, what a server without refcounted buffers does), and the
 * shared broadcast on two ring threads (--rings=2).  A fresh server for
 * every cell.  At 1000 and 2000 players a fourth: the shared broadcast
 * on one ring with the bots over WebSocket (ao-bots --ws: one arena
 * message per binary message) instead of len16 (--no-ws: none).  Then the
 * stall cell (--stall-seconds, 60): 1000 bots that read and 200 that stop
 * reading a second after they join; and the same over WebSocket.
 *
 * --runs=N (1) runs the player counts' cells N times, in rounds (every
 * cell once, then again), as this VM changes speed from one minute to the
 * next: each round prints its rows, then a row per cell gives the run
 * with the median CPU per player-second, which the targets use, and the
 * copy target takes the median of the rounds' shared / copy ratios, each
 * from two servers run one after the other.
 *
 * Pinning: the server gets the first usable CPU, ao-bots (one thread per
 * CPU it gets) the others; on 2 CPUs that is one each: the server gets
 * about one core, as the bots share the machine.
 *
 * Per cell: the server's CPU time per player-second (user + system ticks
 * of the server from /proc/PID/stat over the measured window, divided by
 * players x seconds), the snapshots the bots got per second and their
 * share of what the ticks owed them (ao-bots' delivered), the input-to-
 * visible latency p50 and p99 (ao-bots), the server's tick lateness p99
 * over the window (ao-arena, reset by SIGUSR2 at its start), snapshots
 * the server skipped in the window, and ao-bots' verification failures.
 * The capacity is the most players of the shared cells whose p99 stays
 * within one tick + 10 ms with at least 99.9% of the snapshots delivered
 * (and no failure).  The stall cell adds the server's memory outside the
 * buffer pool (resident minus the pool arena's resident, from ao-arena's
 * statistics lines) at the window's start and end, and how many stalled
 * bots were closed.
 *
 * Exit status: 0 when every cell ran (targets met or not), 1 when one
 * could not (a program that did not start, crashed or timed out), 2 for
 * a usage error.  The machine is shared: run it as
 *	flock /tmp/bench.lock build/tools/bench/arenabench
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bench.h"
#include "child.h"

#define MAX_LIST 8
#define MAX_RUNS 15
#define TICK_HZ 20
#define ROOM 50
#define WARMUP_S 2.0
#define DRAIN_S 2.0
#define SLACK_S 40.0 /* connect, drain, stop and margin */

enum variant { V_SHARED, V_COPY, V_RINGS2, V_WS, NVAR };

static const char *const var_name[NVAR] = { "shared", "copy", "rings2", "ws" };

static struct bench_opts opts;
static char arena_path[PATH_MAX], bots_path[PATH_MAX];
static unsigned int players[MAX_LIST] = { 200, 1000, 2000, 5000 };
static unsigned int nplayers = 4;
static bool var_on[NVAR] = { true, true, true, true };
static bool stall_on = true;
static double stall_seconds = 60;
static unsigned int stall_readers = 1000, stall_bots = 200;
static unsigned int bots_threads; /* 0: one per bots CPU */
static const char *bots_engine = "epoll";
static bool precise, no_pin;
static int retries = 1; /* re-runs of a cell other processes disturbed */
static double noise_max = 0.15; /* CPUs: above, the cell is disturbed */
static const char *arena_extra[8]; /* --arena-arg= */
static int narena_extra;
static cpu_set_t srv_cpus, bots_cpus;
static long clk_tck;

static const char extra_usage[] =
	"  --players=LIST      player counts (default 200,1000,2000,5000)\n"
	"  --no-copy           skip the copy-broadcast cells\n"
	"  --no-rings2         skip the two-ring cells\n"
	"  --no-ws             skip the WebSocket cells (1000 and 2000 players,\n"
	"                      and the stall cell's twin)\n"
	"  --no-stall          skip the stall cells\n"
	"  --stall-seconds=S   the stall cell's length (default 60; --quick 10)\n"
	"  --stall-readers=N   bots that read in it (default 1000)\n"
	"  --stall-bots=N      bots that stop reading in it (default 200)\n"
	"  --bots-threads=N    ao-bots threads (default: one per bots CPU)\n"
	"  --bots-engine=E     epoll or uring (default epoll)\n"
	"  --precise           ticks in the timers' precise mode\n"
	"  --noise=C           a cell during which other processes took more\n"
	"                      than C CPUs is disturbed (default 0.15)\n"
	"  --retries=N         re-run a disturbed cell up to N times, keeping\n"
	"                      the least disturbed run (default 1)\n"
	"  --arena-arg=ARG     one more ao-arena option (up to 8)\n"
	"  --no-pin            do not pin the server and the bots\n"
	"  --arena=PATH, --bots=PATH   the programs (default: next to this\n"
	"                      one, ../arena/ao-arena and ../bots/ao-bots)";

static __attribute__((noreturn)) void bad_value(const char *arg)
{
	fprintf(stderr, "arenabench: bad value in '%s'\n", arg);
	exit(2);
}

static bool parse_extra(const char *a)
{
	const char *v = strchr(a, '=');
	char *end;

	v = v ? v + 1 : "";
	if (!strncmp(a, "--players=", 10)) {
		char buf[256], *tok, *save;

		snprintf(buf, sizeof(buf), "%s", v);
		nplayers = 0;
		for (tok = strtok_r(buf, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			unsigned long n = strtoul(tok, &end, 10);

			if (*end || !n || n > 100000 || nplayers == MAX_LIST)
				bad_value(a);
			players[nplayers++] = (unsigned int)n;
		}
		if (!nplayers)
			bad_value(a);
	} else if (!strcmp(a, "--no-copy")) {
		var_on[V_COPY] = false;
	} else if (!strcmp(a, "--no-ws")) {
		var_on[V_WS] = false;
	} else if (!strcmp(a, "--no-rings2")) {
		var_on[V_RINGS2] = false;
	} else if (!strcmp(a, "--no-stall")) {
		stall_on = false;
	} else if (!strncmp(a, "--stall-seconds=", 16)) {
		stall_seconds = strtod(v, &end);
		if (*end || stall_seconds <= 0)
			bad_value(a);
	} else if (!strncmp(a, "--stall-readers=", 16)) {
		stall_readers = (unsigned int)strtoul(v, &end, 10);
		if (*end || !stall_readers)
			bad_value(a);
	} else if (!strncmp(a, "--stall-bots=", 13)) {
		stall_bots = (unsigned int)strtoul(v, &end, 10);
		if (*end)
			bad_value(a);
	} else if (!strncmp(a, "--bots-threads=", 15)) {
		bots_threads = (unsigned int)strtoul(v, &end, 10);
		if (*end || !bots_threads || bots_threads > 64)
			bad_value(a);
	} else if (!strncmp(a, "--bots-engine=", 14)) {
		if (strcmp(v, "epoll") && strcmp(v, "uring"))
			bad_value(a);
		bots_engine = v;
	} else if (!strncmp(a, "--arena-arg=", 12)) {
		if (narena_extra == 8)
			bad_value(a);
		arena_extra[narena_extra++] = v;
	} else if (!strncmp(a, "--retries=", 10)) {
		retries = (int)strtol(v, &end, 10);
		if (*end || retries < 0 || retries > 10)
			bad_value(a);
	} else if (!strncmp(a, "--noise=", 8)) {
		noise_max = strtod(v, &end);
		if (*end || noise_max <= 0)
			bad_value(a);
	} else if (!strcmp(a, "--precise")) {
		precise = true;
	} else if (!strcmp(a, "--no-pin")) {
		no_pin = true;
	} else if (!strncmp(a, "--arena=", 8)) {
		snprintf(arena_path, sizeof(arena_path), "%s", v);
	} else if (!strncmp(a, "--bots=", 7)) {
		snprintf(bots_path, sizeof(bots_path), "%s", v);
	} else {
		return false;
	}
	return true;
}

static void default_paths(void)
{
	bench_default_path(arena_path, sizeof(arena_path), "../arena/ao-arena");
	bench_default_path(bots_path, sizeof(bots_path), "../bots/ao-bots");
}

/* The server on the first usable CPU, the bots on the others. */
static void plan_cpus(void)
{
	if (!bench_split_cpus(&srv_cpus, &bots_cpus)) {
		no_pin = true;
		return;
	}
	if (!bots_threads)
		bots_threads = (unsigned int)CPU_COUNT(&bots_cpus);
}

static void nap(double s)
{
	struct timespec ts = { (time_t)s,
			       (long)((s - (double)(time_t)s) * 1e9) };

	while (s > 0 && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static double jval(const char *json, const char *key)
{
	return json_or(json, key, -1);
}

/* ------------------------------------------------------------------ */
/* Cells */

struct result {
	bool ran;
	char note[200];
	unsigned int players, stalled;
	enum variant var;
	double seconds;
	double cpu_us; /* server CPU per player-second */
	double user_us; /* ... of it in user space */
	double snaps_per_s, delivered, lat_p50_ms, lat_p99_ms, late_p99_ms;
	double skipped, failures, server_share;
	double mem_start_kb, mem_end_kb; /* outside the pool */
	double stall_closed, stalled_seen, arena_stalled;
	double load;
	double others; /* CPUs other processes took in the window */
};

static struct result results[MAX_LIST][NVAR];
static struct result rounds[MAX_LIST][NVAR][MAX_RUNS];
static struct result stall_result, stall_ws_result;
static int broken;

/* The arena's statistics line after a signal (SIGUSR1 or SIGUSR2). */
static bool arena_line(struct child *a, int sig, char *out, size_t n)
{
	kill(a->pid, sig);
	if (child_next_json(a, child_now_s() + 10, "\"type\":\"stats\"") != 1)
		return false;
	snprintf(out, n, "%s", a->line);
	return true;
}

static void run_cell(struct result *r, unsigned int n, enum variant v,
		     unsigned int stalled, double seconds)
{
	struct child a, b;
	struct child_args aa = { .n = 0 }, ba = { .n = 0 };
	static char start_line[CHILD_LINE_MAX], end_line[CHILD_LINE_MAX],
		bots_json[CHILD_LINE_MAX];
	double ramp = n / 2000.0 < 1 ? 1 : n / 2000.0, t0, t_on;
	long long ticks0, ticks1, user0 = 0, user1 = 0;
	long long busy0, busy1, bots0, bots1;
	unsigned int port = 0;
	int rc;

	memset(r, 0, sizeof(*r));
	r->players = n;
	r->stalled = stalled;
	r->var = v;
	r->load = bench_loadavg();
	child_arg(&aa, "%s", arena_path);
	child_arg(&aa, "--port=0");
	child_arg(&aa, "--json");
	child_arg(&aa, "--quiet");
	child_arg(&aa, "--tick-rate=%d", TICK_HZ);
	child_arg(&aa, "--room-size=%d", ROOM);
	child_arg(&aa, "--max-players=%u", n + stalled + 100);
	child_arg(&aa, "--rings=%d", v == V_RINGS2 ? 2 : 1);
	if (v == V_COPY)
		child_arg(&aa, "--copy-broadcast");
	if (precise)
		child_arg(&aa, "--precise");
	for (int i = 0; i < narena_extra; i++)
		child_arg(&aa, "%s", arena_extra[i]);
	if (child_spawn(&a, aa.v,
			&(struct child_opts){ .cpus = no_pin ? NULL :
							       &srv_cpus })) {
		snprintf(r->note, sizeof(r->note), "cannot start ao-arena");
		broken = 1;
		return;
	}
	if (child_port(&a, child_now_s() + 10, &port)) {
		snprintf(r->note, sizeof(r->note), "ao-arena gave no port");
		child_finish(&a, 0);
		broken = 1;
		return;
	}
	child_arg(&ba, "%s", bots_path);
	child_arg(&ba, "--port=%u", port);
	child_arg(&ba, "--players=%u", n + stalled);
	child_arg(&ba, "--duration=%.3fs", seconds);
	child_arg(&ba, "--ramp=%.3fs", ramp);
	child_arg(&ba, "--warmup=%.3fs", WARMUP_S);
	child_arg(&ba, "--drain=%.3fs", DRAIN_S);
	child_arg(&ba, "--threads=%u", bots_threads ? bots_threads : 1);
	child_arg(&ba, "--engine=%s", bots_engine);
	child_arg(&ba, "--json");
	child_arg(&ba, "--quiet");
	if (v == V_WS)
		child_arg(&ba, "--ws");
	if (stalled)
		child_arg(&ba, "--stall=%u", stalled);
	t0 = child_now_s();
	if (child_spawn(&b, ba.v,
			&(struct child_opts){ .cpus = no_pin ? NULL :
							       &bots_cpus })) {
		snprintf(r->note, sizeof(r->note), "cannot start ao-bots");
		child_close(&a);
		broken = 1;
		return;
	}
	/* The window: after the ramp and the warm-up, for seconds. */
	t_on = t0 + ramp + WARMUP_S + 0.05;
	nap(t_on - child_now_s());
	ticks0 = child_cpu_ticks(a.pid, &user0);
	bots0 = child_cpu_ticks(b.pid, NULL);
	busy0 = bench_busy_ticks(NULL);
	if (!arena_line(&a, SIGUSR2, start_line, sizeof(start_line)))
		start_line[0] = '\0';
	nap(t_on + seconds - child_now_s());
	ticks1 = child_cpu_ticks(a.pid, &user1);
	bots1 = child_cpu_ticks(b.pid, NULL);
	busy1 = bench_busy_ticks(NULL);
	if (!arena_line(&a, SIGUSR1, end_line, sizeof(end_line)))
		end_line[0] = '\0';
	child_last_json(&b, t0 + ramp + WARMUP_S + seconds + SLACK_S, NULL,
			bots_json, sizeof(bots_json));
	rc = child_finish(&b, 5);
	kill(a.pid, SIGTERM);
	child_finish(&a, 25);
	if (!bots_json[0] || !start_line[0] || !end_line[0] || ticks0 < 0 ||
	    ticks1 < 0) {
		snprintf(r->note, sizeof(r->note),
			 "no result (ao-bots exit %d)", rc);
		broken = 1;
		return;
	}
	r->ran = true;
	r->seconds = jval(bots_json, "seconds");
	r->cpu_us = (double)(ticks1 - ticks0) / (double)clk_tck * 1e6 /
		    ((double)n * seconds);
	r->others = busy0 < 0 || busy1 < 0 || bots0 < 0 || bots1 < 0 ?
			    -1 :
			    (double)((busy1 - busy0) - (ticks1 - ticks0) -
				     (bots1 - bots0)) /
				    (double)clk_tck / seconds;
	r->user_us = (double)(user1 - user0) / (double)clk_tck * 1e6 /
		     ((double)n * seconds);
	r->snaps_per_s = jval(bots_json, "snapshots_per_s");
	r->delivered = jval(bots_json, "delivered");
	r->lat_p50_ms = jval(bots_json, "latency_p50_ns") / 1e6;
	r->lat_p99_ms = jval(bots_json, "latency_p99_ns") / 1e6;
	r->late_p99_ms = jval(end_line, "tick_late_p99_ns") / 1e6;
	r->skipped = jval(end_line, "snaps_skipped") -
		     jval(start_line, "snaps_skipped");
	{
		double sent = jval(end_line, "snaps_sent") -
			      jval(start_line, "snaps_sent");

		r->server_share =
			sent + r->skipped > 0 ? sent / (sent + r->skipped) : 0;
	}
	r->failures = jval(bots_json, "failures");
	r->mem_start_kb =
		jval(start_line, "rss_kb") - jval(start_line, "pool_rss_kb");
	r->mem_end_kb =
		jval(end_line, "rss_kb") - jval(end_line, "pool_rss_kb");
	r->stall_closed = jval(bots_json, "stall_closed");
	r->stalled_seen = jval(bots_json, "stalled");
	{
		const char *reasons = strstr(end_line, "\"reasons\":");

		r->arena_stalled = reasons ? jval(reasons, "slow") : 0;
	}
	if (rc && rc != 1)
		snprintf(r->note, sizeof(r->note), "ao-bots exit %d", rc);
}

/* A cell, re-run while other processes disturbed it (up to --retries):
 * the least disturbed run is kept, flagged when it still was. */
static void run_cell_retry(struct result *r, unsigned int n, enum variant v,
			   unsigned int stalled, double seconds)
{
	static struct result again;

	run_cell(r, n, v, stalled, seconds);
	for (int k = 0; k < retries && r->ran && r->others > noise_max; k++) {
		run_cell(&again, n, v, stalled, seconds);
		if (again.ran && again.others < r->others)
			*r = again;
	}
	if (r->ran && r->others > noise_max && !r->note[0])
		snprintf(r->note, sizeof(r->note),
			 "noisy: others took %.2f CPUs", r->others);
}

/* ------------------------------------------------------------------ */
/* Output */

static void print_json(const struct result *r, const char *cell)
{
	bench_json_begin("arenabench");
	bench_json_str("cell", cell);
	bench_json_str("broadcast", r->var == V_COPY ? "copy" : "shared");
	bench_json_str("transport", r->var == V_WS ? "ws" : "len16");
	bench_json_int("rings", r->var == V_RINGS2 ? 2 : 1);
	bench_json_int("players", r->players);
	bench_json_int("stalled_bots", r->stalled);
	bench_json_int("ran", r->ran);
	bench_json_num("seconds", r->seconds);
	bench_json_num("server_cpu_us_per_player_s", r->cpu_us);
	bench_json_num("server_user_us_per_player_s", r->user_us);
	bench_json_num("snapshots_per_s", r->snaps_per_s);
	bench_json_num("delivered", r->delivered);
	bench_json_num("server_sent_share", r->server_share);
	bench_json_num("latency_p50_ms", r->lat_p50_ms);
	bench_json_num("latency_p99_ms", r->lat_p99_ms);
	bench_json_num("tick_late_p99_ms", r->late_p99_ms);
	bench_json_num("snaps_skipped", r->skipped);
	bench_json_num("failures", r->failures);
	bench_json_num("mem_outside_pool_start_kb", r->mem_start_kb);
	bench_json_num("mem_outside_pool_end_kb", r->mem_end_kb);
	bench_json_num("stall_closed", r->stall_closed);
	bench_json_num("loadavg", r->load);
	bench_json_num("others_cpus", r->others);
	bench_json_str("note", r->note);
	bench_json_end();
}

static void print_row(const struct result *r, const char *cell)
{
	if (!r->ran) {
		printf("%-14s %s\n", cell, r->note);
		return;
	}
	printf("%-14s %6u %9.1f %6.1f %9.0f %9.5f %7.1f %7.1f %8.3f %8.0f "
	       "%6.0f %6.2f%s%s\n",
	       cell, r->players, r->cpu_us, r->user_us, r->snaps_per_s,
	       r->delivered, r->lat_p50_ms, r->lat_p99_ms, r->late_p99_ms,
	       r->skipped, r->failures, r->others, r->note[0] ? "  " : "",
	       r->note);
}

/* The run of a cell with the median CPU per player-second (the lower
 * middle one for an even count); not ran if no round ran it. */
static void median_run(struct result *out, const struct result *runs)
{
	double cpu[MAX_RUNS];
	int n = 0;

	out->ran = false;
	for (int k = 0; k < opts.runs; k++)
		if (runs[k].ran)
			cpu[n++] = runs[k].cpu_us;
	if (!n)
		return;
	bench_sort_double(cpu, (size_t)n);
	for (int k = 0; k < opts.runs; k++) {
		if (runs[k].ran && runs[k].cpu_us == cpu[(n - 1) / 2]) {
			*out = runs[k];
			return;
		}
	}
}

/* The median over the rounds of variant a's CPU / variant b's for
 * players[i] (the rounds where both ran). */
static double pair_ratio(unsigned int i, enum variant a, enum variant b)
{
	double q[MAX_RUNS];
	int n = 0;

	for (int k = 0; k < opts.runs; k++) {
		const struct result *s = &rounds[i][a][k];
		const struct result *c = &rounds[i][b][k];

		if (s->ran && c->ran && c->cpu_us > 0)
			q[n++] = s->cpu_us / c->cpu_us;
	}
	return bench_median(q, (size_t)n);
}

static bool fits(const struct result *r)
{
	return r->ran && !r->failures &&
	       r->lat_p99_ms <= 1000.0 / TICK_HZ + 10 && r->delivered >= 0.999;
}

int main(int argc, char **argv)
{
	unsigned int capacity = 0;
	bool zero_fail = true, capacity_done = false, shared_ran = false;
	char cell[64];

	bench_parse(argc, argv, &opts, 20, 1, extra_usage, parse_extra);
	if (opts.runs < 1 || opts.runs > MAX_RUNS) {
		fprintf(stderr, "arenabench: --runs must be 1..%d\n", MAX_RUNS);
		return 2;
	}
	if (opts.quick) {
		opts.seconds = opts.seconds < 5 ? opts.seconds : 5;
		if (stall_seconds > 10)
			stall_seconds = 10;
	}
	default_paths();
	if (access(arena_path, X_OK) || access(bots_path, X_OK)) {
		fprintf(stderr,
			"arenabench: needs %s and %s (make tools, or "
			"--arena= --bots=)\n",
			arena_path, bots_path);
		return 1;
	}
	clk_tck = bench_clk_tck();
	plan_cpus();
	child_guard_signals();
	bench_raise_nofile();
	if (!opts.json)
		printf("arenabench: rooms of %d at %d Hz, %.0f s a cell "
		       "(+ ramp and %.0f s warm-up), load average %.2f, %s\n"
		       "%-14s %6s %9s %6s %9s %9s %7s %7s %8s %8s %6s %6s\n",
		       ROOM, TICK_HZ, opts.seconds, WARMUP_S, bench_loadavg(),
		       no_pin ? "not pinned" :
				"server on the first CPU, bots on the others",
		       "cell", "players", "cpu us/ps", "user", "snaps/s",
		       "delivered", "p50 ms", "p99 ms", "late p99", "skipped",
		       "fails", "others");
	fflush(stdout);
	for (int k = 0; k < opts.runs; k++) {
		for (unsigned int i = 0; i < nplayers; i++) {
			for (int v = 0; v < NVAR; v++) {
				struct result *r = &rounds[i][v][k];

				snprintf(cell, sizeof(cell), "%s/%u",
					 var_name[v], players[i]);
				if (!var_on[v] || !bench_selected(&opts, cell))
					continue;
				if (v == V_WS && players[i] != 1000 &&
				    players[i] != 2000)
					continue;
				run_cell_retry(r, players[i], (enum variant)v,
					       0, opts.seconds);
				if (opts.runs > 1)
					snprintf(cell + strlen(cell),
						 sizeof(cell) - strlen(cell),
						 "#%d", k + 1);
				if (opts.json)
					print_json(r, cell);
				else
					print_row(r, cell);
				fflush(stdout);
				if (r->ran && r->failures)
					zero_fail = false;
			}
		}
	}
	if (opts.runs > 1 && !opts.json)
		printf("medians of %d rounds (the run with the median CPU per "
		       "player-second):\n",
		       opts.runs);
	for (unsigned int i = 0; i < nplayers; i++) {
		for (int v = 0; v < NVAR; v++) {
			struct result *r = &results[i][v];

			median_run(r, rounds[i][v]);
			if (!r->ran)
				continue;
			shared_ran |= v == V_SHARED;
			/* The capacity: every count up to it fits. */
			if (v == V_SHARED && !capacity_done) {
				if (fits(r))
					capacity = players[i];
				else
					capacity_done = true;
			}
			if (opts.runs == 1)
				continue;
			snprintf(cell, sizeof(cell), "%s/%u", var_name[v],
				 players[i]);
			if (opts.json)
				print_json(r, cell);
			else
				print_row(r, cell);
		}
	}
	for (int w = 0; w < 2; w++) {
		struct result *r = w ? &stall_ws_result : &stall_result;

		snprintf(cell, sizeof(cell), "%s/%u+%u",
			 w ? "stall-ws" : "stall", stall_readers, stall_bots);
		if (!stall_on || (w && !var_on[V_WS]) ||
		    !bench_selected(&opts, cell))
			continue;
		run_cell_retry(r, stall_readers, w ? V_WS : V_SHARED,
			       stall_bots, stall_seconds);
		if (opts.json)
			print_json(r, cell);
		else
			print_row(r, cell);
		if (r->ran && r->failures)
			zero_fail = false;
	}

	if (!opts.json) {
		const struct result *k = NULL, *s2 = NULL, *c2 = NULL;
		unsigned int i2 = 0;

		for (unsigned int i = 0; i < nplayers; i++) {
			if (players[i] == 1000)
				k = &results[i][V_SHARED];
			if (players[i] == 2000) {
				s2 = &results[i][V_SHARED];
				c2 = &results[i][V_COPY];
				i2 = i;
			}
		}
		printf("\ntargets:\n");
		if (shared_ran)
			bench_target(
				capacity >= 2000,
				"capacity (p99 <= %d ms, >= 99.9%% delivered, "
				"shared, 1 ring): %u players (target >= 2000)",
				1000 / TICK_HZ + 10, capacity);
		if (k && k->ran) {
			bench_target(k->lat_p99_ms <= 60,
				     "1000 players: p99 input to visible "
				     "%.1f ms (<= 60)",
				     k->lat_p99_ms);
			bench_target(k->delivered >= 0.999,
				     "1000 players: %.3f%% of snapshots "
				     "delivered (>= 99.9%%)",
				     k->delivered * 100);
			bench_target(k->late_p99_ms <= 1,
				     "1000 players: tick lateness p99 %.3f "
				     "ms (<= 1)",
				     k->late_p99_ms);
		}
		if (s2 && c2 && s2->ran && c2->ran) {
			double q = pair_ratio(i2, V_SHARED, V_COPY);

			bench_target(q <= 0.8,
				     "2000 players: shared / copy server CPU "
				     "%.2f / %.2f us per player-second, "
				     "%.2fx%s (<= 0.8x)",
				     s2->cpu_us, c2->cpu_us, q,
				     opts.runs > 1 ? " (median of the rounds' "
						     "ratios)" :
						     "");
		}
		for (unsigned int i = 0; i < nplayers; i++) {
			const struct result *w = &results[i][V_WS];
			const struct result *s = &results[i][V_SHARED];
			double q;

			if (!w->ran)
				continue;
			bench_target(fits(w),
				     "%u players over WebSocket: p99 %.1f ms "
				     "(<= %d), %.3f%% delivered (>= 99.9%%), "
				     "%.0f failures",
				     players[i], w->lat_p99_ms,
				     1000 / TICK_HZ + 10, w->delivered * 100,
				     w->failures);
			if (!s->ran)
				continue;
			q = pair_ratio(i, V_WS, V_SHARED);
			bench_target(q <= 1.15,
				     "%u players: WebSocket / len16 server "
				     "CPU %.2f / %.2f us per player-second, "
				     "%.2fx%s (<= 1.15x)%s",
				     players[i], w->cpu_us, s->cpu_us, q,
				     opts.runs > 1 ? " (median of the rounds' "
						     "ratios)" :
						     "",
				     w->others > noise_max ||
						     s->others > noise_max ?
					     " noisy" :
					     "");
		}
		for (int t = 0; t < 2; t++) {
			const struct result *r = t ? &stall_ws_result :
						     &stall_result;
			const char *sn = t ? "stall-ws" : "stall";
			double grow;

			if (!stall_on || !r->ran)
				continue;
			grow = (r->mem_end_kb - r->mem_start_kb) / 1024;
			bench_target(grow <= 16,
				     "%s: server memory outside the pool "
				     "%+.1f MiB (%.1f -> %.1f; <= 16)",
				     sn, grow, r->mem_start_kb / 1024,
				     r->mem_end_kb / 1024);
			bench_target(r->lat_p99_ms <= 60 &&
					     r->delivered >= 0.999,
				     "%s: readers p99 %.1f ms (<= 60), "
				     "%.3f%% delivered (>= 99.9%%)",
				     sn, r->lat_p99_ms, r->delivered * 100);
			bench_target(r->stall_closed >= stall_bots &&
					     r->arena_stalled >= stall_bots &&
					     r->skipped > 0,
				     "%s: %.0f of %u stalled bots closed "
				     "(the server closed %.0f as stalled, "
				     "skipped %.0f snapshots in the window)",
				     sn, r->stall_closed, stall_bots,
				     r->arena_stalled, r->skipped);
		}
		bench_target(zero_fail, "zero verification failures in "
					"every cell");
	}
	return broken;
}
