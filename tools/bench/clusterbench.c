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
 *   failover  the same, one node killed (SIGKILL) half-way through: how
 *             long its players and its rooms' players were out of a room
 *             (p50, p99, max), and every verification outside that.
 *
 * Targets: the hop (cluster p50 at most single + 0.3 ms, p99 at most
 * single + 2 ms: what the issue asks; the proxy forwards a few ms
 * before the owner's tick, so expect to miss them: docs/PERFORMANCE.md),
 * zero verification failures, outage p99 at most 3 s.  Every timed cell
 * runs under flock /tmp/bench.lock when started by the Makefile's bench
 * rules; compare its ratios, not absolute times across runs.
 */
#include <errno.h>
#include <limits.h>
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
#define SLACK_S 30.0

static char arena_path[PATH_MAX], bots_path[PATH_MAX];
static const char *nats_path = "nats-server";
static unsigned int players = 300;
static int broken;

static bool extra(const char *arg)
{
	if (!strncmp(arg, "--players=", 10)) {
		players = (unsigned int)strtoul(arg + 10, NULL, 10);
		return players > 0;
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

static void nap(double s)
{
	if (s > 0)
		usleep((useconds_t)(s * 1e6));
}

struct result {
	double p50_ms, p99_ms, delivered;
	double failures, room_lost, outage_p50_ms, outage_p99_ms;
	double outage_max_ms, bus_msgs_out, forwarded;
	bool ok;
};

/* One cell: nodes ao-arena processes (0: one, without the bus), bots
 * over them for seconds; kill_at > 0: SIGKILL of the second node then. */
static void cell(const char *url, int nodes, double seconds, double kill_at,
		 struct result *r)
{
	struct child n[NODES], b;
	struct child_args ba = { 0 };
	char servers[256] = "", json[CHILD_LINE_MAX], fin[CHILD_LINE_MAX];
	unsigned int port;
	int count = nodes ? nodes : 1, i;
	double t0;

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
		}
		if (child_spawn(&n[i], aa.v, &(struct child_opts){ 0 }) ||
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
	child_arg(&ba, "%s", bots_path);
	child_arg(&ba, "--servers=%s", servers);
	child_arg(&ba, "--players=%u", players);
	child_arg(&ba, "--duration=%.3fs", seconds);
	child_arg(&ba, "--ramp=%.3fs", RAMP_S);
	child_arg(&ba, "--json");
	child_arg(&ba, "--progress=never");
	t0 = child_now_s();
	if (child_spawn(&b, ba.v, &(struct child_opts){ 0 })) {
		broken = 1;
		for (i = 0; i < count; i++)
			child_close(&n[i]);
		return;
	}
	if (kill_at > 0) {
		nap(t0 + RAMP_S + kill_at - child_now_s());
		child_kill(&n[1]);
	}
	json[0] = 0;
	child_last_json(&b, t0 + RAMP_S + seconds + SLACK_S, "\"status\"", json,
			sizeof(json));
	child_finish(&b, 5);
	for (i = 0; i < count; i++) {
		if (kill_at > 0 && i == 1)
			continue;
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
	r->outage_p50_ms = json_or(json, "outage_p50_ns", 0) / 1e6;
	r->outage_p99_ms = json_or(json, "outage_p99_ns", 0) / 1e6;
	r->outage_max_ms = json_or(json, "outage_max_ns", 0) / 1e6;
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
		bench_json_num("outage_p50_ms", r->outage_p50_ms);
		bench_json_num("outage_p99_ms", r->outage_p99_ms);
		bench_json_num("outage_max_ms", r->outage_max_ms);
		bench_json_num("bus_msgs_out_per_s", r->bus_msgs_out / seconds);
		bench_json_num("players_forwarded", r->forwarded);
		bench_json_end();
		return;
	}
	printf("  %-9s %8.2f %8.2f %9.4f %8.0f %8.0f %9.1f %9.1f %9.0f\n", name,
	       r->p50_ms, r->p99_ms, r->delivered, r->failures, r->room_lost,
	       r->outage_p50_ms, r->outage_p99_ms, r->bus_msgs_out / seconds);
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_run run = { .name = "clusterbench", .width = 14 };
	struct result single, cluster, fail;
	struct child nats;
	struct child_args na = { 0 };
	char dir[] = "/tmp/clusterbench.XXXXXX", url[64], cmd[128];
	char nats_bin[PATH_MAX];
	unsigned int port;
	double seconds;
	int rc;

	bench_parse(argc, argv, &o, 10.0, 1,
		    "  --players=N       bots (default 300)\n"
		    "  --nats-server=P   the nats-server to run\n",
		    extra);
	seconds = o.quick ? 4.0 : o.seconds;
	run.json = o.json;
	bench_default_path(arena_path, sizeof(arena_path), "../arena/ao-arena");
	bench_default_path(bots_path, sizeof(bots_path), "../bots/ao-bots");
	child_guard_signals();
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
			&(struct child_opts){ .keep_stderr = true }) ||
	    wait_listen(port, child_now_s() + 10)) {
		fprintf(stderr, "clusterbench: SKIP: no nats-server (%s)\n",
			nats_path);
		return 0;
	}
	snprintf(url, sizeof(url), "nats://127.0.0.1:%u", port);
	bench_begin(&run);
	if (!o.json)
		printf("clusterbench: %u players, %.0f s a cell, %d nodes on "
		       "%s\n  %-9s %8s %8s %9s %8s %8s %9s %9s %9s\n",
		       players, seconds, NODES, url, "cell", "p50 ms", "p99 ms",
		       "delivered", "failures", "lost", "out p50", "out p99",
		       "bus msg/s");
	cell(url, 0, seconds, 0, &single);
	report(&o, "single", &single, seconds);
	cell(url, NODES, seconds, 0, &cluster);
	report(&o, "cluster", &cluster, seconds);
	cell(url, NODES, seconds, seconds / 2, &fail);
	report(&o, "failover", &fail, seconds);
	kill(nats.pid, SIGTERM);
	child_finish(&nats, 10);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	rc = system(cmd);
	(void)rc;

	bench_goal(&run, "hop p50", cluster.p50_ms <= single.p50_ms + 0.3,
		   cluster.p50_ms - single.p50_ms, 0.3,
		   "cluster p50 %.2f ms vs single %.2f ms (+0.3 ms allowed)",
		   cluster.p50_ms, single.p50_ms);
	bench_goal(&run, "hop p99", cluster.p99_ms <= single.p99_ms + 2,
		   cluster.p99_ms - single.p99_ms, 2,
		   "cluster p99 %.2f ms vs single %.2f ms (+2 ms allowed)",
		   cluster.p99_ms, single.p99_ms);
	bench_goal(&run, "verified", !cluster.failures && !fail.failures,
		   cluster.failures + fail.failures, 0,
		   "verification failures: %.0f steady, %.0f with a kill",
		   cluster.failures, fail.failures);
	bench_goal(&run, "outage p99", fail.outage_p99_ms <= 3000,
		   fail.outage_p99_ms, 3000,
		   "players out of a room after a kill -9: p99 %.0f ms, max "
		   "%.0f ms",
		   fail.outage_p99_ms, fail.outage_max_ms);
	bench_end(&run,
		  &(struct bench_count){ "broken", broken, "cell broken",
					 "cells broken" },
		  1);
	return bench_misses || broken ? 1 : 0;
}
