// SPDX-License-Identifier: MIT
/*
 * clusterbench: the arena across nodes beside the single-node arena, in
 * one run, on loopback: a nats-server (JetStream, a scratch store) the
 * bench starts, ao-arena nodes on it, ao-bots over them.
 *
 *   single    one ao-arena, --players bots (the baseline);
 *   cluster   three nodes, the same bots spread over them (ao-bots
 *             --servers): most play a room another node owns, so the
 *             input-to-visible latency carries the bus hop;
 *   kill      --cycles cycles (default 20): one of the three nodes
 *             killed (SIGKILL), the next one each cycle, restarted on its
 *             port (a new boot) 1.5 s later, rejoining before the next;
 *   stop      the same with SIGSTOP for 2 s, then SIGCONT.
 *
 * In the cycles: when a survivor declared the node dead (its peers_down,
 * polled with SIGUSR1 every 20 ms), how long players were out of a room
 * (ao-bots' outage: p50, p99, max), the chat lines and inputs lost with a
 * room (counted by the bots, never silent), and rooms with two owners:
 * the bench listens to the nodes' census on the bus (a plain NATS client
 * on a socket) and counts a room claimed by a node while another claimed
 * it less than a census period before.
 *
 * The bots run on one CPU, the servers (the nodes and nats-server) on
 * the others, as arenabench pins its server and bots (--no-pin: not
 * pinned).  The steady cells give the CPU the servers, nats-server alone
 * and the bots use per player-second.
 *
 * Targets: the hop (cluster p50 at most single + 0.3 ms, p99 at most
 * single + 2 ms), delivery at least 99.9% in steady state, zero
 * verification failures, death declared within 1 s, outage p99 at most
 * 3 s, zero rooms with two owners.  --capacity instead searches the most
 * players single and cluster each carry on the arena's targets (p99 at
 * most one tick + 10 ms, 99.9% delivered, no failure); target: the
 * cluster at least 0.75x the single node.  Run it under flock
 * /tmp/bench.lock; compare its ratios, not absolute times across runs.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include "bench.h"
#include "child.h"

#define NODES 3
#define RAMP_S 1.0
#define WARMUP_S 1.0 /* the steady cells: played, not measured */
#define SLACK_S 30.0
#define CYCLE_S 4.0 /* a failover cycle */
#define SETTLE_S 2.0 /* before the first cycle */
#define RESTART_S 1.5 /* a killed node comes back after this */
#define STOP_S 2.0
#define DECLARED_MAX_S 5.0 /* death not seen by then: counted as this */
#define CENSUS_S 0.2 /* the nodes' census period (tools/arena/cluster.c) */

static char arena_path[PATH_MAX], bots_path[PATH_MAX];
static const char *nats_path = "nats-server";
static unsigned int players = 300, cycles = 20;
static bool cycles_set, no_failover, no_pin, capacity;
static int broken;
static cpu_set_t srv_cpus, bots_cpus; /* the servers' CPU, the bots' */
static pid_t nats_pid;
static const char *bus_reader; /* the nodes' --bus-reader, or theirs */

static bool extra(const char *arg)
{
	if (!strncmp(arg, "--players=", 10)) {
		players = (unsigned int)strtoul(arg + 10, NULL, 10);
		return players > 0;
	}
	if (!strncmp(arg, "--cycles=", 9)) {
		cycles = (unsigned int)strtoul(arg + 9, NULL, 10);
		cycles_set = true;
		return cycles > 0;
	}
	if (!strcmp(arg, "--no-failover")) {
		no_failover = true;
		return true;
	}
	if (!strcmp(arg, "--no-pin")) {
		no_pin = true;
		return true;
	}
	if (!strcmp(arg, "--capacity")) {
		capacity = no_failover = true;
		return true;
	}
	if (!strncmp(arg, "--bus-reader=", 13)) {
		bus_reader = arg + 13;
		return !strcmp(bus_reader, "own") ||
		       !strcmp(bus_reader, "cnats");
	}
	if (!strncmp(arg, "--nats-server=", 14)) {
		nats_path = arg + 14;
		return true;
	}
	return false;
}

/* nats_path as execv() needs it: a name is looked up in $PATH. */
static void find_nats(char *out, size_t n)
{
	const char *path = getenv("PATH");
	char *dup, *dir, *save = NULL;

	snprintf(out, n, "%s", nats_path);
	if (strchr(nats_path, '/'))
		return;
	dup = strdup(path ? path : "/usr/bin:/usr/sbin");
	for (dir = dup ? strtok_r(dup, ":", &save) : NULL; dir;
	     dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, n, "%s/%s", dir, nats_path);
		if (!access(out, X_OK))
			break;
		snprintf(out, n, "%s", nats_path);
	}
	free(dup);
}

static unsigned int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	unsigned int port = 0;

	if (fd < 0)
		return 0;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static int wait_listen(unsigned int port, double end)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	while (child_now_s() < end) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		int ok = fd >= 0 &&
			 !connect(fd, (struct sockaddr *)&sa, sizeof(sa));

		if (fd >= 0)
			close(fd);
		if (ok)
			return 0;
		usleep(50000);
	}
	return -ETIMEDOUT;
}

/* ao-bots over the nodes (servers: "host:port,..."), for seconds. */
static void bots_args(struct child_args *ba, const char *servers,
		      double seconds)
{
	child_arg(ba, "%s", bots_path);
	child_arg(ba, "--servers=%s", servers);
	child_arg(ba, "--players=%u", players);
	child_arg(ba, "--duration=%.3fs", seconds);
	child_arg(ba, "--ramp=%.3fs", RAMP_S);
	/* The hop is a fraction of a millisecond; without jitter the
	 * latency's p50 rests on --players fixed phases to the tick, drawn
	 * anew in each cell, and moved by +-0.4 ms from cell to cell. */
	child_arg(ba, "--jitter");
	child_arg(ba, "--json");
	child_arg(ba, "--progress=never");
}

static void nap(double s)
{
	if (s > 0)
		usleep((useconds_t)(s * 1e6));
}

/* Where the servers (the nodes and nats-server) and the bots run: apart,
 * one CPU for the bots and the rest for the servers, as arenabench pins
 * its server and its bots; NULL with --no-pin. */
static const struct child_opts *srv_opts(void)
{
	static struct child_opts o;

	o.cpus = no_pin ? NULL : &srv_cpus;
	return &o;
}

static const struct child_opts *bots_opts(void)
{
	static struct child_opts o;

	o.cpus = no_pin ? NULL : &bots_cpus;
	return &o;
}

/*
 * The census watcher: a plain NATS client (the text protocol: CONNECT,
 * SUB, MSG, PING/PONG) on its own thread, subscribed to ao.census.  Each
 * census is "0xce, node index, name length, name, then per own room: u32
 * id, epoch, seats, offset" (tools/arena/cluster.c).  A room listed by
 * node B while node A listed it less than a census period (and a little)
 * before is a room with two owners.  Only this thread touches the table;
 * the counters are read after it stopped.
 */
#define WATCH_ROOMS 4096
#define WATCH_BUF 65536

struct watch {
	int fd;
	pthread_t th;
	int stop; /* atomic */
	uint64_t censuses, two_owners;
	struct {
		uint32_t id;
		uint8_t idx;
		double t;
	} tab[WATCH_ROOMS];
	size_t len;
	char buf[WATCH_BUF];
};

static void watch_census(struct watch *w, const uint8_t *d, size_t n)
{
	double t = child_now_s();
	size_t k;

	if (n < 3 || d[0] != 0xce || 3u + d[2] > n)
		return;
	w->censuses++;
	for (k = 3u + d[2]; k + 16 <= n; k += 16) {
		uint32_t id;
		unsigned int h, probe;

		memcpy(&id, d + k, 4);
		h = (id * 2654435761u) % WATCH_ROOMS;
		for (probe = 0; probe < WATCH_ROOMS; probe++) {
			unsigned int i = (h + probe) % WATCH_ROOMS;

			if (w->tab[i].id && w->tab[i].id != id)
				continue;
			if (w->tab[i].id && w->tab[i].idx != d[1] &&
			    t - w->tab[i].t < CENSUS_S * 1.5)
				w->two_owners++;
			w->tab[i].id = id;
			w->tab[i].idx = d[1];
			w->tab[i].t = t;
			break;
		}
	}
}

/* Whole protocol lines and messages out of w->buf; the rest stays. */
static void watch_parse(struct watch *w)
{
	size_t pos = 0;

	for (;;) {
		char *line = w->buf + pos, *eol;
		size_t avail = w->len - pos, hl, n;
		unsigned long bytes;
		char *sp;

		eol = memmem(line, avail, "\r\n", 2);
		if (!eol)
			break;
		hl = (size_t)(eol - line) + 2;
		if (!strncmp(line, "PING", 4)) {
			if (write(w->fd, "PONG\r\n", 6) != 6)
				break;
		} else if (!strncmp(line, "MSG ", 4)) {
			*eol = 0;
			sp = strrchr(line, ' ');
			bytes = sp ? strtoul(sp + 1, NULL, 10) : 0;
			*eol = '\r';
			n = hl + bytes + 2;
			if (avail < n)
				break;
			watch_census(w, (const uint8_t *)line + hl, bytes);
			hl = n;
		}
		pos += hl;
	}
	memmove(w->buf, w->buf + pos, w->len - pos);
	w->len -= pos;
}

static void *watch_fn(void *arg)
{
	struct watch *w = arg;

	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd pfd = { .fd = w->fd, .events = POLLIN };
		ssize_t got;

		if (poll(&pfd, 1, 50) <= 0)
			continue;
		if (w->len == sizeof(w->buf))
			w->len = 0; /* a line longer than the buffer: dropped */
		got = read(w->fd, w->buf + w->len, sizeof(w->buf) - w->len);
		if (got <= 0)
			break;
		w->len += (size_t)got;
		watch_parse(w);
	}
	return NULL;
}

static int watch_start(struct watch *w, unsigned int port)
{
	static const char hello[] =
		"CONNECT {\"verbose\":false,\"pedantic\":false,"
		"\"name\":\"clusterbench\"}\r\nSUB ao.census 1\r\n";
	struct sockaddr_in sa = { .sin_family = AF_INET };

	memset(w, 0, sizeof(*w));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	w->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (w->fd < 0)
		return -errno;
	if (connect(w->fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(w->fd, hello, sizeof(hello) - 1) !=
		    (ssize_t)(sizeof(hello) - 1) ||
	    pthread_create(&w->th, NULL, watch_fn, w)) {
		close(w->fd);
		return -EIO;
	}
	return 0;
}

static void watch_stop(struct watch *w)
{
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
	pthread_join(w->th, NULL);
	close(w->fd);
}

struct result {
	double p50_ms, p99_ms, delivered;
	double failures, room_lost, outage_p50_ms, outage_p99_ms;
	double outage_max_ms, bus_msgs_out, forwarded, room_full;
	double srv_us, nats_us, bots_us; /* CPU µs per player-second */
	bool ok;
};

/* The cell's arena targets: p99 at most one tick + 10 ms, 99.9% of the
 * snapshots delivered, nothing failed verification. */
static bool on_target(const struct result *r)
{
	return r->ok && r->p99_ms <= 60 && r->delivered >= 0.999 &&
	       !r->failures;
}

/* CPU ticks over s seconds as µs per player-second. */
static double per_player_us(long long ticks, double s)
{
	return (double)ticks / (double)bench_clk_tck() * 1e6 / (players * s);
}

/* One cell: nodes ao-arena processes (0: one, without the bus), bots
 * over them for seconds. */
static void cell(const char *url, int nodes, double seconds, struct result *r)
{
	struct child n[NODES], b;
	struct child_args ba = { 0 };
	char servers[256] = "", json[CHILD_LINE_MAX], fin[CHILD_LINE_MAX];
	unsigned int port;
	int count = nodes ? nodes : 1, i;
	long long srv0 = 0, srv1 = 0, nats0, nats1, bots0, bots1;
	double t0, t_on;

	memset(r, 0, sizeof(*r));
	for (i = 0; i < count; i++) {
		struct child_args aa = { 0 };

		child_arg(&aa, "%s", arena_path);
		child_arg(&aa, "--port=0");
		child_arg(&aa, "--json");
		child_arg(&aa, "--quiet");
		child_arg(&aa, "--workers=1");
		if (nodes) {
			child_arg(&aa, "--nats=%s", url);
			child_arg(&aa, "--node=n%d", i + 1);
			if (bus_reader)
				child_arg(&aa, "--bus-reader=%s", bus_reader);
		}
		if (child_spawn(&n[i], aa.v, srv_opts()) ||
		    child_port(&n[i], child_now_s() + 30, &port)) {
			fprintf(stderr, "clusterbench: a node did not start\n");
			while (i >= 0)
				child_close(&n[i--]);
			broken = 1;
			return;
		}
		snprintf(servers + strlen(servers),
			 sizeof(servers) - strlen(servers), "%s127.0.0.1:%u",
			 i ? "," : "", port);
		nap(0.3); /* its census, before the next one joins */
	}
	bots_args(&ba, servers, seconds);
	child_arg(&ba, "--warmup=%.3fs", WARMUP_S);
	t0 = child_now_s();
	if (child_spawn(&b, ba.v, bots_opts())) {
		broken = 1;
		for (i = 0; i < count; i++)
			child_close(&n[i]);
		return;
	}
	/* CPU over the measured window, after the ramp and warm-up. */
	t_on = t0 + RAMP_S + WARMUP_S + 0.05;
	nap(t_on - child_now_s());
	for (i = 0; i < count; i++)
		srv0 += child_cpu_ticks(n[i].pid, NULL);
	nats0 = child_cpu_ticks(nats_pid, NULL);
	bots0 = child_cpu_ticks(b.pid, NULL);
	nap(t_on + seconds - 0.1 - child_now_s());
	for (i = 0; i < count; i++)
		srv1 += child_cpu_ticks(n[i].pid, NULL);
	nats1 = child_cpu_ticks(nats_pid, NULL);
	bots1 = child_cpu_ticks(b.pid, NULL);
	if (nodes) {
		srv0 += nats0;
		srv1 += nats1;
		r->nats_us = per_player_us(nats1 - nats0, seconds - 0.1);
	}
	r->srv_us = per_player_us(srv1 - srv0, seconds - 0.1);
	r->bots_us = per_player_us(bots1 - bots0, seconds - 0.1);
	json[0] = 0;
	child_last_json(&b, t0 + RAMP_S + WARMUP_S + seconds + SLACK_S,
			"\"status\"", json, sizeof(json));
	child_finish(&b, 5);
	for (i = 0; i < count; i++) {
		kill(n[i].pid, SIGTERM);
		fin[0] = 0;
		child_last_json(&n[i], child_now_s() + 30, "\"final\"", fin,
				sizeof(fin));
		child_finish(&n[i], 5);
		r->bus_msgs_out += json_or(fin, "msgs_out", 0);
		r->forwarded += json_or(fin, "players_forwarded", 0);
	}
	for (i = 0; i < count; i++)
		child_close(&n[i]);
	if (!json[0]) {
		broken = 1;
		return;
	}
	r->ok = true;
	r->p50_ms = json_or(json, "latency_p50_ns", 0) / 1e6;
	r->p99_ms = json_or(json, "latency_p99_ns", 0) / 1e6;
	r->delivered = json_or(json, "delivered", 0);
	r->failures = json_or(json, "failures", 0);
	r->room_lost = json_or(json, "room_lost", 0);
	r->room_full = json_or(json, "room_full", 0);
	r->outage_p50_ms = json_or(json, "outage_p50_ns", 0) / 1e6;
	r->outage_p99_ms = json_or(json, "outage_p99_ns", 0) / 1e6;
	r->outage_max_ms = json_or(json, "outage_max_ns", 0) / 1e6;
}

/* ao-arena node name on url (--port=port; 0: any); 0 and *got, or -1. */
static int node_spawn(struct child *n, const char *url, const char *name,
		      unsigned int port, unsigned int *got)
{
	struct child_args aa = { 0 };

	child_arg(&aa, "%s", arena_path);
	child_arg(&aa, "--port=%u", port);
	child_arg(&aa, "--json");
	child_arg(&aa, "--quiet");
	child_arg(&aa, "--workers=1");
	child_arg(&aa, "--nats=%s", url);
	child_arg(&aa, "--node=%s", name);
	if (bus_reader)
		child_arg(&aa, "--bus-reader=%s", bus_reader);
	if (child_spawn(n, aa.v, srv_opts()) ||
	    child_port(n, child_now_s() + 30, got)) {
		fprintf(stderr, "clusterbench: node %s did not start\n", name);
		child_close(n);
		return -1;
	}
	return 0;
}

/* A survivor's peers_down now (a statistics line on SIGUSR1); -1. */
static double peers_down(struct child *n, double end)
{
	if (kill(n->pid, SIGUSR1) ||
	    child_next_json(n, end, "\"peers_down\"") != 1)
		return -1;
	return json_or(n->line, "peers_down", -1);
}

struct cyc_result {
	double declared_p50_s, declared_max_s;
	unsigned int declared_late; /* over 1 s */
	double outage_p50_ms, outage_p99_ms, outage_max_ms, outages;
	double room_lost, lost_in_flight, failures, delivered;
	double takeovers, evicted, stale, fenced;
	uint64_t two_owners, censuses;
	bool ok;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* n cycles of SIGKILL (stop false) or SIGSTOP for STOP_S of one node of
 * three, the next one each cycle, with the bots playing all along. */
static void failover_cycles(const char *url, unsigned int nats_port, bool stop,
			    unsigned int n, struct cyc_result *r)
{
	static struct child nodes[NODES], b;
	struct child_args ba = { 0 };
	struct watch *w = calloc(1, sizeof(*w));
	unsigned int port[NODES], boot[NODES] = { 0 }, c;
	char servers[256] = "", name[32], json[CHILD_LINE_MAX];
	char fin[CHILD_LINE_MAX];
	double *declared = calloc(n, sizeof(double));
	double t0, seconds = SETTLE_S + n * CYCLE_S + 1.0;
	int i;

	memset(r, 0, sizeof(*r));
	if (!w || !declared || watch_start(w, nats_port)) {
		fprintf(stderr, "clusterbench: no census watcher\n");
		free(w);
		free(declared);
		broken = 1;
		return;
	}
	for (i = 0; i < NODES; i++) {
		snprintf(name, sizeof(name), "n%d", i + 1);
		if (node_spawn(&nodes[i], url, name, 0, &port[i])) {
			while (--i >= 0)
				child_close(&nodes[i]);
			goto out;
		}
		snprintf(servers + strlen(servers),
			 sizeof(servers) - strlen(servers), "%s127.0.0.1:%u",
			 i ? "," : "", port[i]);
		nap(0.3);
	}
	bots_args(&ba, servers, seconds);
	t0 = child_now_s();
	if (child_spawn(&b, ba.v, bots_opts())) {
		for (i = 0; i < NODES; i++)
			child_close(&nodes[i]);
		goto out;
	}
	nap(t0 + RAMP_S + SETTLE_S - child_now_s());
	for (c = 0; c < n; c++) {
		double start = t0 + RAMP_S + SETTLE_S + c * CYCLE_S, t;
		int v = (int)(c % NODES), s = (v + 1) % NODES;
		double base;

		nap(start - child_now_s());
		base = peers_down(&nodes[s], child_now_s() + 2);
		t = child_now_s();
		kill(nodes[v].pid, stop ? SIGSTOP : SIGKILL);
		declared[c] = DECLARED_MAX_S;
		while (child_now_s() - t < DECLARED_MAX_S) {
			double pd = peers_down(&nodes[s], child_now_s() + 1);

			if (pd > base && base >= 0) {
				declared[c] = child_now_s() - t;
				break;
			}
			nap(0.02);
		}
		if (declared[c] > 1.0)
			r->declared_late++;
		if (stop) {
			nap(t + STOP_S - child_now_s());
			kill(nodes[v].pid, SIGCONT);
			continue;
		}
		child_finish(&nodes[v], 5);
		child_close(&nodes[v]);
		nap(t + RESTART_S - child_now_s());
		snprintf(name, sizeof(name), "n%dr%u", v + 1, ++boot[v]);
		if (node_spawn(&nodes[v], url, name, port[v], &port[v])) {
			broken = 1;
			break;
		}
	}
	json[0] = 0;
	child_last_json(&b, t0 + RAMP_S + seconds + SLACK_S, "\"status\"", json,
			sizeof(json));
	child_finish(&b, 5);
	for (i = 0; i < NODES; i++) {
		if (nodes[i].reaped)
			continue;
		kill(nodes[i].pid, SIGCONT);
		kill(nodes[i].pid, SIGTERM);
		fin[0] = 0;
		child_last_json(&nodes[i], child_now_s() + 30, "\"final\"", fin,
				sizeof(fin));
		if (child_finish(&nodes[i], 5) || !fin[0]) {
			char st[64];

			fprintf(stderr, "clusterbench: node %d: %s\n", i + 1,
				child_status(&nodes[i], st, sizeof(st)));
			broken = 1;
		}
		r->takeovers += json_or(fin, "takeovers", 0);
		r->evicted += json_or(fin, "evicted", 0);
		r->stale += json_or(fin, "stale_dropped", 0);
		r->fenced += json_or(fin, "fenced_ticks", 0);
	}
	for (i = 0; i < NODES; i++)
		child_close(&nodes[i]);
	if (!json[0]) {
		broken = 1;
		goto out;
	}
	qsort(declared, c, sizeof(double), cmp_double);
	r->ok = c == n;
	r->declared_p50_s = c ? declared[c / 2] : 0;
	r->declared_max_s = c ? declared[c - 1] : 0;
	r->delivered = json_or(json, "delivered", 0);
	r->failures = json_or(json, "failures", 0);
	if (r->failures) /* which checks failed */
		fprintf(stderr, "clusterbench: %s: %s\n",
			stop ? "stop" : "kill",
			strstr(json, "\"fail\"") ? strstr(json, "\"fail\"") :
						   json);
	r->room_lost = json_or(json, "room_lost", 0);
	r->lost_in_flight = json_or(json, "lost_in_flight", 0);
	r->outages = json_or(json, "outages", 0);
	r->outage_p50_ms = json_or(json, "outage_p50_ns", 0) / 1e6;
	r->outage_p99_ms = json_or(json, "outage_p99_ns", 0) / 1e6;
	r->outage_max_ms = json_or(json, "outage_max_ns", 0) / 1e6;
out:
	watch_stop(w);
	r->two_owners = w->two_owners;
	r->censuses = w->censuses;
	free(w);
	free(declared);
}

static void report_cycles(const struct bench_opts *o, const char *name,
			  const struct cyc_result *r, unsigned int n)
{
	if (o->json) {
		bench_json_begin("clusterbench");
		bench_json_str("cell", name);
		bench_json_int("players", players);
		bench_json_int("cycles", n);
		bench_json_num("declared_p50_s", r->declared_p50_s);
		bench_json_num("declared_max_s", r->declared_max_s);
		bench_json_int("declared_late", r->declared_late);
		bench_json_num("outages", r->outages);
		bench_json_num("outage_p50_ms", r->outage_p50_ms);
		bench_json_num("outage_p99_ms", r->outage_p99_ms);
		bench_json_num("outage_max_ms", r->outage_max_ms);
		bench_json_num("room_lost", r->room_lost);
		bench_json_num("lost_in_flight", r->lost_in_flight);
		bench_json_num("failures", r->failures);
		bench_json_num("delivered", r->delivered);
		bench_json_int("two_owners", r->two_owners);
		bench_json_int("censuses", r->censuses);
		bench_json_num("takeovers", r->takeovers);
		bench_json_num("evicted", r->evicted);
		bench_json_num("stale_dropped", r->stale);
		bench_json_end();
		return;
	}
	printf("  %-5s %3u %7.0f %7.0f %4u %7.0f %8.0f %8.0f %8.0f %6.0f "
	       "%6.0f %5.0f %5llu\n",
	       name, n, r->declared_p50_s * 1e3, r->declared_max_s * 1e3,
	       r->declared_late, r->outages, r->outage_p50_ms, r->outage_p99_ms,
	       r->outage_max_ms, r->room_lost, r->lost_in_flight, r->failures,
	       (unsigned long long)r->two_owners);
}

static void report(const struct bench_opts *o, const char *name,
		   const struct result *r, double seconds)
{
	if (o->json) {
		bench_json_begin("clusterbench");
		bench_json_str("cell", name);
		bench_json_int("players", players);
		bench_json_num("latency_p50_ms", r->p50_ms);
		bench_json_num("latency_p99_ms", r->p99_ms);
		bench_json_num("delivered", r->delivered);
		bench_json_num("failures", r->failures);
		bench_json_num("room_lost", r->room_lost);
		bench_json_num("room_full", r->room_full);
		bench_json_num("outage_p50_ms", r->outage_p50_ms);
		bench_json_num("outage_p99_ms", r->outage_p99_ms);
		bench_json_num("outage_max_ms", r->outage_max_ms);
		bench_json_num("bus_msgs_out_per_s", r->bus_msgs_out / seconds);
		bench_json_num("players_forwarded", r->forwarded);
		bench_json_num("server_cpu_us_per_player_s", r->srv_us);
		bench_json_num("nats_cpu_us_per_player_s", r->nats_us);
		bench_json_num("bots_cpu_us_per_player_s", r->bots_us);
		bench_json_end();
		return;
	}
	printf("  %-9s %5u %8.2f %8.2f %9.4f %5.0f %5.0f %5.0f %9.0f %6.1f "
	       "%6.1f %6.1f\n",
	       name, players, r->p50_ms, r->p99_ms, r->delivered, r->failures,
	       r->room_lost, r->room_full, r->bus_msgs_out / seconds, r->srv_us,
	       r->nats_us, r->bots_us);
}

/*
 * The most players a cell carries on the arena's targets: up by a quarter
 * from start while on target, then halving the gap between the last count
 * on target and the first off it, down to 5% of the count (at most 10
 * cells).  Every cell is printed; 0 if not even a fifth of start holds.
 */
static unsigned int capacity_of(const struct bench_opts *o, const char *url,
				int nodes, const char *name, double seconds,
				unsigned int start)
{
	unsigned int good = 0, bad = 0, n = start;
	struct result r;

	for (int step = 0; step < 10 && n >= start / 5 && !broken; step++) {
		players = n;
		cell(url, nodes, seconds, &r);
		report(o, name, &r, seconds);
		if (on_target(&r))
			good = n;
		else
			bad = n;
		if (bad && bad - good <= (good / 20 > 25 ? good / 20 : 25))
			break;
		n = !bad ? n + n / 4 : good ? (good + bad) / 2 : n * 2 / 3;
	}
	return good;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_run run = { .name = "clusterbench", .width = 14 };
	struct result single = { 0 }, cluster = { 0 };
	struct cyc_result ck, cs;
	struct child nats;
	struct child_args na = { 0 };
	char dir[] = "/tmp/clusterbench.XXXXXX", url[64], cmd[128];
	char nats_bin[PATH_MAX];
	unsigned int port;
	double seconds;
	unsigned int cap_single = 0, cap_cluster = 0;
	bool ran_single = false, ran_cluster = false, ran_kill = false;
	bool ran_stop = false, steady_ok, cycles_ok;
	int nbroken;
	int rc;

	/* 30 s steady cells: the hop is the difference of two medians of a
	 * wait spread over a whole tick (0-50 ms); with 300 players a 10 s
	 * cell's median moves by about 0.1 ms from the sampling alone, as
	 * much as a third of the hop's target. */
	bench_parse(argc, argv, &o, 30.0, 1,
		    "  --players=N       bots (default 300)\n"
		    "  --cycles=N        failover cycles of each kind "
		    "(default 20, 3 with --quick)\n"
		    "  --no-failover     the steady cells only (a capacity "
		    "step)\n"
		    "  --capacity        search the most players each of "
		    "single and cluster\n"
		    "                    carries on target, from --players "
		    "up (no failover)\n"
		    "  --no-pin          do not pin the bots apart from the "
		    "servers\n"
		    "  --bus-reader=R    the nodes' --bus-reader (own or "
		    "cnats; default theirs)\n"
		    "  --nats-server=P   the nats-server to run\n",
		    extra);
	seconds = o.quick ? 4.0 : o.seconds;
	if (o.quick && !cycles_set)
		cycles = 3;
	run.json = o.json;
	bench_default_path(arena_path, sizeof(arena_path), "../arena/ao-arena");
	bench_default_path(bots_path, sizeof(bots_path), "../bots/ao-bots");
	child_guard_signals();
	if (!no_pin && !bench_split_cpus(&bots_cpus, &srv_cpus))
		no_pin = true; /* one CPU: nothing to pin apart */
	if (!mkdtemp(dir) || !(port = free_port())) {
		fprintf(stderr, "clusterbench: no scratch dir or port\n");
		return 1;
	}
	find_nats(nats_bin, sizeof(nats_bin));
	child_arg(&na, "%s", nats_bin);
	child_arg(&na, "-a");
	child_arg(&na, "127.0.0.1");
	child_arg(&na, "-p");
	child_arg(&na, "%u", port);
	child_arg(&na, "-js");
	child_arg(&na, "-sd");
	child_arg(&na, "%s", dir);
	if (child_spawn(&nats, na.v,
			&(struct child_opts){ .keep_stderr = true,
					      .cpus = srv_opts()->cpus }) ||
	    wait_listen(port, child_now_s() + 10)) {
		fprintf(stderr, "clusterbench: SKIP: no nats-server (%s)\n",
			nats_path);
		return 0;
	}
	nats_pid = nats.pid;
	snprintf(url, sizeof(url), "nats://127.0.0.1:%u", port);
	bench_begin(&run);
	if (!o.json)
		printf("clusterbench: %u players, %.0f s a cell, %d nodes on "
		       "%s, %s\n  CPU: user + system µs per player-second "
		       "(server: the nodes and nats-server)\n"
		       "  %-9s %5s %8s %8s %9s %5s %5s %5s %9s %6s %6s %6s\n",
		       players, seconds, NODES, url,
		       no_pin ? "not pinned" :
				"the bots on one CPU, the servers on the rest",
		       "cell", "bots", "p50 ms", "p99 ms", "delivered", "fail",
		       "lost", "full", "bus msg/s", "server", "nats", "bots");
	/* Cells left out by --only count as passed, with zeros. */
	memset(&single, 0, sizeof(single));
	memset(&cluster, 0, sizeof(cluster));
	cluster.delivered = 1;
	memset(&ck, 0, sizeof(ck));
	memset(&cs, 0, sizeof(cs));
	ck.ok = cs.ok = true;
	if (capacity) {
		cap_single =
			capacity_of(&o, url, 0, "single", seconds, players);
		cap_cluster = capacity_of(&o, url, NODES, "cluster", seconds,
					  cap_single * 3 / 4 > 100 ?
						  cap_single * 3 / 4 :
						  players);
	} else if (bench_selected(&o, "single")) {
		cell(url, 0, seconds, &single);
		report(&o, "single", &single, seconds);
		ran_single = true;
	}
	if (!capacity && bench_selected(&o, "cluster")) {
		cell(url, NODES, seconds, &cluster);
		report(&o, "cluster", &cluster, seconds);
		ran_cluster = true;
	}
	if (!o.json && !no_failover)
		printf("  failover cycles: declared dead (ms, p50 and max, over "
		       "1 s), players out of a room\n  (ms), room_lost, inputs "
		       "and chat lines lost with a room, failures, rooms with "
		       "two owners\n  %-5s %3s %7s %7s %4s %7s %8s %8s %8s %6s "
		       "%6s %5s %5s\n",
		       "cell", "n", "decl50", "declmax", ">1s", "outages",
		       "out p50", "out p99", "out max", "lost", "inflt", "fail",
		       "2own");
	if (!no_failover && bench_selected(&o, "kill")) {
		failover_cycles(url, port, false, cycles, &ck);
		report_cycles(&o, "kill", &ck, cycles);
		ran_kill = true;
	}
	if (!no_failover && bench_selected(&o, "stop")) {
		failover_cycles(url, port, true, cycles, &cs);
		report_cycles(&o, "stop", &cs, cycles);
		ran_stop = true;
	}
	kill(nats.pid, SIGTERM);
	child_finish(&nats, 10);
	if (!ck.ok || !cs.ok)
		broken = 1;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	rc = system(cmd);
	(void)rc;

	/* A goal is judged only on the cells it stands on, when they ran;
	 * a broken cell's zeros meet nothing. */
	steady_ok = single.ok && cluster.ok;
	cycles_ok = ck.ok && cs.ok; /* true unless a cycle cell broke */
	nbroken = (ran_single && !single.ok) + (ran_cluster && !cluster.ok) +
		  !ck.ok + !cs.ok;
	if (!nbroken && broken)
		nbroken = 1;
	if (capacity) {
		bench_goal(&run, "capacity", cap_cluster >= 0.75 * cap_single,
			   cap_single ? (double)cap_cluster / cap_single : 0,
			   0.75,
			   "on target: cluster %u players, single %u: %.2fx "
			   "(at least 0.75x)",
			   cap_cluster, cap_single,
			   cap_single ? (double)cap_cluster / cap_single : 0);
		goto end;
	}
	if (!ran_single || !ran_cluster)
		goto cycles;
	bench_goal(&run, "hop p50",
		   steady_ok && cluster.p50_ms <= single.p50_ms + 0.3,
		   cluster.p50_ms - single.p50_ms, 0.3,
		   "cluster p50 %.2f ms vs single %.2f ms (+0.3 ms allowed)",
		   cluster.p50_ms, single.p50_ms);
	bench_goal(&run, "hop p99",
		   steady_ok && cluster.p99_ms <= single.p99_ms + 2,
		   cluster.p99_ms - single.p99_ms, 2,
		   "cluster p99 %.2f ms vs single %.2f ms (+2 ms allowed)",
		   cluster.p99_ms, single.p99_ms);
	bench_goal(&run, "delivered", steady_ok && cluster.delivered >= 0.999,
		   cluster.delivered, 0.999,
		   "cluster delivered %.4f of the snapshots (single %.4f)",
		   cluster.delivered, single.delivered);
cycles:
	bench_goal(&run, "verified",
		   !nbroken && !cluster.failures && !ck.failures &&
			   !cs.failures,
		   cluster.failures + ck.failures + cs.failures, 0,
		   "verification failures: %.0f steady, %.0f kill, %.0f stop",
		   cluster.failures, ck.failures, cs.failures);
	if (!ran_kill && !ran_stop)
		goto end;
	bench_goal(&run, "declared",
		   cycles_ok && !ck.declared_late && !cs.declared_late,
		   fmax(ck.declared_max_s, cs.declared_max_s), 1.0,
		   "death declared: max %.0f ms (kill), %.0f ms (stop); "
		   "%u cycles over 1 s",
		   ck.declared_max_s * 1e3, cs.declared_max_s * 1e3,
		   ck.declared_late + cs.declared_late);
	bench_goal(&run, "outage p99",
		   cycles_ok && ck.outage_p99_ms <= 3000 &&
			   cs.outage_p99_ms <= 3000,
		   fmax(ck.outage_p99_ms, cs.outage_p99_ms), 3000,
		   "players out of a room: p99 %.0f ms (kill), %.0f ms (stop)",
		   ck.outage_p99_ms, cs.outage_p99_ms);
	bench_goal(&run, "one owner",
		   cycles_ok && !ck.two_owners && !cs.two_owners,
		   (double)(ck.two_owners + cs.two_owners), 0,
		   "rooms claimed by two nodes at once: %llu (kill), %llu "
		   "(stop), in %llu censuses",
		   (unsigned long long)ck.two_owners,
		   (unsigned long long)cs.two_owners,
		   (unsigned long long)(ck.censuses + cs.censuses));
end:
	bench_end(&run,
		  &(struct bench_count){ "broken", nbroken, "cell broken",
					 "cells broken" },
		  1);
	return bench_misses || nbroken ? 1 : 0;
}
