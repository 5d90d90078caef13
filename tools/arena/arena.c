// SPDX-License-Identifier: MIT
/*
 * ao-arena: an example multiplayer game server on aorta (the protocol is
 * tools/arena/PROTOCOL.md, the server room.c).  Players join rooms of
 * --room-size, each ticking at --tick-rate on its own strand and timer;
 * every tick applies the inputs that came and sends one snapshot, the
 * same buffer, to every member.
 *
 * The command line, the output and the signals follow ao-echo: the first
 * line of stdout is port=N once it listens; statistics lines every
 * --stats and a final report (text, or one JSON object per line with
 * --json); SIGINT or SIGTERM stop gracefully, SIGUSR1 prints a line now,
 * SIGUSR2 starts the tick lateness figures afresh (a benchmark's measured
 * phase) and prints a line.
 * Signals are read from a signalfd: nothing runs in a signal handler.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <aorta/config.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/core/timer.h>
#include <aorta/io/server.h>
#include "../common/cli.h"
#include "../common/serve.h"
#include "../common/parse.h"
#include "arena.h"
#include "cluster.h"

#define NS 1000000000ull
#define MS 1000000ull

enum {
	EXIT_OK = 0,
	EXIT_RUNTIME = 1, /* start failed, stop timed out, leak, inconsistent */
	EXIT_USAGE = CLI_EXIT_USAGE,
};

/* --allow-origin may be given this many times. */
#define MAX_ORIGINS 16

struct opts {
	struct arena_opts a;
	struct cluster_opts cl;
	const char *origins[MAX_ORIGINS + 1]; /* NULL-terminated */
	unsigned int n_origins;
	uint64_t stats_ns;
	bool json;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s [options]\n"
		"A multiplayer arena on aorta: rooms of players, a fixed tick, one\n"
		"snapshot per tick broadcast to every member (tools/arena/PROTOCOL.md).\n"
		"\n"
		"Server:\n"
		"  -a, --address=ADDR      bind address, IPv4 or IPv6 (default 127.0.0.1)\n"
		"  -p, --port=PORT         port (default 0: ephemeral; see port=N)\n"
		"  -w, --workers=N         executor workers (default 0: one per CPU)\n"
		"  -r, --rings=N           ring threads (default 1)\n"
		"  -b, --backend=B         uring, epoll or auto (default auto)\n"
		"  -m, --mode=M            ring (default: parse packets on the ring\n"
		"                          thread) or worker (on the connection's strand)\n"
		"      --allow-origin=O    a WebSocket upgrade whose Origin header is\n"
		"                          not one of these (repeat it, up to %u) gets\n"
		"                          403; one without Origin (not a browser) is\n"
		"                          let in (default: any origin)\n"
		"Game:\n"
		"      --tick-rate=HZ      ticks per second of every room (default 20)\n"
		"      --room-size=N       players per room (default 50, at most %u)\n"
		"      --max-players=N     players at once (default 10000)\n"
		"      --stall-timeout=T   close a member skipped for T (default 2s)\n"
		"      --hello-timeout=T   close a connection without hello after T\n"
		"                          (default 5s; 0: never)\n"
		"      --idle-timeout=T    close a player that sent no message for T\n"
		"                          (default 30s; 0: never)\n"
		"      --copy-broadcast    a copy of each snapshot and chat line per\n"
		"                          member, instead of one shared buffer (for\n"
		"                          comparison: what a server without\n"
		"                          refcounted buffers does)\n"
		"      --precise           ticks in the timers' precise mode\n"
		"Cluster (several nodes share the rooms over NATS):\n"
		"      --nats=URL          join the cluster on this NATS server\n"
		"                          (JetStream on); without it, one process\n"
		"      --node=NAME         this node's name (with --nats; default\n"
		"                          the host name and pid)\n"
		"      --bus-reader=R      who reads the bus: own (default: a thread\n"
		"                          of the node's, which runs a free room's\n"
		"                          handler itself) or cnats (cnats' reader\n"
		"                          and delivery threads hand every message\n"
		"                          to a worker: two wake-ups more)\n"
		"Limits:\n"
		"      --buffers=N         buffers in the pool (default 4 per player\n"
		"                          + 1024)\n"
		"      --sndbuf=B          SO_SNDBUF of accepted sockets (default 8k,\n"
		"                          about a second of a room's snapshots: a\n"
		"                          player that stops reading is seen soon, not\n"
		"                          once megabytes of kernel buffer are full;\n"
		"                          0: the system's, autotuned)\n"
		"      --drain-timeout=T   bound of the graceful stop (default 5s)\n"
		"      --spin=T            the workers' idle spin before they park\n"
		"                          (default 0: the executor's, 20us)\n"
		"Output:\n"
		"  -S, --stats=T           a statistics line every T (default 0: never)\n"
		"      --json              statistics lines and the final report as one\n"
		"                          JSON object per line on stdout\n"
		"  -q, --quiet             no banner on stderr\n"
		"  -h, --help              this help\n"
		"  -V, --version           the version\n"
		"\n"
		"The first line of stdout is port=N once it listens.  SIGINT or SIGTERM:\n"
		"graceful stop, then the final report; SIGUSR1: a statistics line now;\n"
		"SIGUSR2: the tick lateness figures start afresh, and a statistics line.\n"
		"\n"
		"Exit status: 0 ok; 1 runtime error (start failed, stop timed out,\n"
		"leaked buffers or connections, rooms inconsistent); 2 usage.\n",
		prog, MAX_ORIGINS, AP_ROOM_SIZE_MAX);
}

enum {
	OPT_STALL = 256,
	OPT_COPY,
	OPT_PRECISE,
	OPT_BUFFERS,
	OPT_SNDBUF,
	OPT_DRAIN,
	OPT_SPIN,
	OPT_JSON,
	OPT_HELLO,
	OPT_IDLE,
	OPT_NATS,
	OPT_NODE,
	OPT_BUS_READER,
	OPT_ORIGIN,
};

static const struct option long_opts[] = {
	{ "address", required_argument, NULL, 'a' },
	{ "port", required_argument, NULL, 'p' },
	{ "workers", required_argument, NULL, 'w' },
	{ "rings", required_argument, NULL, 'r' },
	{ "backend", required_argument, NULL, 'b' },
	{ "mode", required_argument, NULL, 'm' },
	{ "allow-origin", required_argument, NULL, OPT_ORIGIN },
	{ "tick-rate", required_argument, NULL, 't' },
	{ "room-size", required_argument, NULL, 's' },
	{ "max-players", required_argument, NULL, 'n' },
	{ "stall-timeout", required_argument, NULL, OPT_STALL },
	{ "hello-timeout", required_argument, NULL, OPT_HELLO },
	{ "idle-timeout", required_argument, NULL, OPT_IDLE },
	{ "copy-broadcast", no_argument, NULL, OPT_COPY },
	{ "precise", no_argument, NULL, OPT_PRECISE },
	{ "nats", required_argument, NULL, OPT_NATS },
	{ "node", required_argument, NULL, OPT_NODE },
	{ "bus-reader", required_argument, NULL, OPT_BUS_READER },
	{ "buffers", required_argument, NULL, OPT_BUFFERS },
	{ "sndbuf", required_argument, NULL, OPT_SNDBUF },
	{ "drain-timeout", required_argument, NULL, OPT_DRAIN },
	{ "spin", required_argument, NULL, OPT_SPIN },
	{ "stats", required_argument, NULL, 'S' },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	struct arena_opts *a = &o->a;
	uint64_t v;
	int c;

	a->address = "127.0.0.1";
	a->rings = 1;
	a->backend = AO_IO_AUTO;
	a->ring_handlers = true;
	a->tick_hz = 20;
	a->room_size = 50;
	a->max_players = 10000;
	a->stall_ns = 2 * NS;
	a->hello_ns = 5 * NS;
	a->idle_ns = 30 * NS;
	a->drain_ns = 5 * NS;
	a->sndbuf = 8 * 1024;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":a:p:w:r:b:m:S:qhV", long_opts,
				NULL)) != -1) {
		switch (c) {
		case 'a':
			a->address = need_address(optarg);
			break;
		case 'p':
			a->port =
				(uint16_t)need_count("port", optarg, 0, 65535);
			break;
		case 'w':
			a->workers = (unsigned int)need_count("workers", optarg,
							      0, 1024);
			break;
		case 'r':
			a->rings = (unsigned int)need_count("rings", optarg, 1,
							    64);
			break;
		case 'b':
			a->backend = need_backend(optarg);
			break;
		case 'm':
			if (!strcmp(optarg, "ring"))
				a->ring_handlers = true;
			else if (!strcmp(optarg, "worker"))
				a->ring_handlers = false;
			else
				bad_usage("--mode: '%s' is not ring or worker",
					  optarg);
			break;
		case 't':
			a->tick_hz = (uint32_t)need_count("tick-rate", optarg,
							  1, 1000);
			break;
		case 's':
			a->room_size = (uint32_t)need_count(
				"room-size", optarg, 1, AP_ROOM_SIZE_MAX);
			break;
		case 'n':
			a->max_players = (uint32_t)need_count(
				"max-players", optarg, 1, 1000000);
			break;
		case OPT_STALL:
			a->stall_ns = need_duration_in("stall-timeout", optarg,
						       MS, 3600 * NS);
			break;
		case OPT_HELLO:
		case OPT_IDLE:
			v = need_duration_in(c == OPT_HELLO ? "hello-timeout" :
							      "idle-timeout",
					     optarg, 0, 3600 * NS);
			if (v && v < MS)
				bad_usage("--%s: '%s' is below 1ms",
					  c == OPT_HELLO ? "hello-timeout" :
							   "idle-timeout",
					  optarg);
			*(c == OPT_HELLO ? &a->hello_ns : &a->idle_ns) =
				v ? v : ARENA_NEVER;
			break;
		case OPT_COPY:
			a->copy_broadcast = true;
			break;
		case OPT_PRECISE:
			a->precise = true;
			break;
		case OPT_ORIGIN:
			if (!*optarg || strpbrk(optarg, " \t\r\n,"))
				bad_usage("--allow-origin: '%s' is not one "
					  "origin (scheme://host[:port])",
					  optarg);
			if (o->n_origins == MAX_ORIGINS)
				bad_usage("--allow-origin: more than %u",
					  MAX_ORIGINS);
			o->origins[o->n_origins++] = optarg;
			a->origins = o->origins;
			break;
		case OPT_NATS:
			o->cl.url = optarg;
			break;
		case OPT_NODE:
			o->cl.node = optarg;
			break;
		case OPT_BUS_READER:
			if (!strcmp(optarg, "own"))
				o->cl.cnats_reader = false;
			else if (!strcmp(optarg, "cnats"))
				o->cl.cnats_reader = true;
			else
				bad_usage("--bus-reader: '%s' is not own or "
					  "cnats",
					  optarg);
			break;
		case OPT_BUFFERS:
			a->buffers = (uint32_t)need_count("buffers", optarg, 16,
							  AO_BUFPOOL_MAX_COUNT);
			break;
		case OPT_SNDBUF:
			if (parse_size(optarg, 0, 64 << 20, &v) ||
			    (v && v < 1024))
				bad_usage(
					"--sndbuf: '%s' is not 0 or a size in "
					"1k..64M",
					optarg);
			a->sndbuf = (int)v;
			break;
		case OPT_SPIN:
			a->spin_ns = (uint32_t)need_duration_in("spin", optarg,
								0, NS / 10);
			if (a->spin_ns && a->spin_ns < 1000)
				bad_usage("--spin: '%s' is below 1us", optarg);
			break;
		case OPT_DRAIN:
			a->drain_ns = need_duration_in("drain-timeout", optarg,
						       MS,
						       UINT32_MAX / 1000 * NS);
			break;
		case 'S':
			o->stats_ns = need_stats(optarg);
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case 'q':
			a->quiet = true;
			break;
		default: /* -h, -V, errors */
			cli_option(c, argv, usage);
		}
	}
	cli_no_operands(argc, argv);
}

/* ------------------------------------------------------------------ */
/* Statistics */

struct snap {
	uint64_t t_ns;
	struct arena_stats ar;
	struct ao_io_stats io;
	struct ao_exec_stats ex;
	struct cluster_stats cl;
	struct ao_timers_stats tm;
	uint32_t pool_total, pool_in_use;
	uint64_t pool_exhausted;
	uint64_t rss_kb, pool_rss_kb;
	double cpu_user_s, cpu_sys_s;
};

struct state {
	struct opts o;
	struct arena *a;
	uint64_t t0;
	enum ao_io_backend backend;
	unsigned int rings;
	uint16_t port;
	void *pool_arena; /* for its resident size */
	size_t pool_len;
	struct snap last;
};

/* The process's resident memory and the pool arena's share of it (kB),
 * from /proc/self/smaps_rollup and /proc/self/smaps. */
static void memory_kb(const struct state *s, uint64_t *rss, uint64_t *pool)
{
	char line[256];
	unsigned long lo, hi;
	bool in_pool = false;
	FILE *f;

	*rss = *pool = 0;
	f = fopen("/proc/self/status", "r");
	if (f) {
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "VmRSS:", 6))
				*rss = strtoull(line + 6, NULL, 10);
		fclose(f);
	}
	f = fopen("/proc/self/smaps", "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			uintptr_t p = (uintptr_t)s->pool_arena;

			in_pool = p >= lo && p < hi;
			continue;
		}
		if (in_pool && !strncmp(line, "Rss:", 4))
			*pool += strtoull(line + 4, NULL, 10);
	}
	fclose(f);
}

static void take_snap(struct state *s, struct snap *sn)
{
	struct ao_server *srv = arena_server(s->a);
	struct ao_bufpool *pool = ao_server_pool(srv);
	struct ao_bufpool_stats ps;
	struct ao_bufpool_info info;
	struct rusage ru;

	memset(sn, 0, sizeof(*sn));
	sn->t_ns = now_ns() - s->t0;
	arena_stats(s->a, &sn->ar);
	cluster_stats(s->a, &sn->cl);
	ao_server_stats(srv, -1, &sn->io);
	ao_exec_stats(arena_exec(s->a), &sn->ex);
	ao_timers_stats(arena_timers(s->a), &sn->tm);
	ao_bufpool_info(pool, &info);
	ao_bufpool_stats(pool, &ps);
	sn->pool_total = info.count;
	sn->pool_in_use = ps.in_use;
	sn->pool_exhausted = ps.exhausted;
	memory_kb(s, &sn->rss_kb, &sn->pool_rss_kb);
	if (!getrusage(RUSAGE_SELF, &ru)) {
		sn->cpu_user_s = (double)ru.ru_utime.tv_sec +
				 (double)ru.ru_utime.tv_usec / 1e6;
		sn->cpu_sys_s = (double)ru.ru_stime.tv_sec +
				(double)ru.ru_stime.tv_usec / 1e6;
	}
}

static void print_bus_json(const struct cluster_stats *b)
{
	printf(",\"bus\":{\"connected\":%s,\"msgs_in\":%llu,"
	       "\"bytes_in\":%llu,\"msgs_out\":%llu,\"bytes_out\":%llu,"
	       "\"pub_dropped\":%llu,\"in_dropped\":%llu,\"requests\":%llu,"
	       "\"timeouts\":%llu,\"no_responders\":%llu,"
	       "\"disconnects\":%llu,\"reconnects\":%llu,\"peers\":%llu,"
	       "\"peers_down\":%llu,\"rooms_owned\":%llu,\"proxies\":%llu,"
	       "\"players_forwarded\":%llu,\"ghost_joins\":%llu,"
	       "\"stale_dropped\":%llu,\"room_lost\":%llu,"
	       "\"takeovers\":%llu,\"evicted\":%llu,\"fenced_ticks\":%llu,"
	       "\"rooms_lost\":%llu,\"rooms_reclaimed\":%llu,"
	       "\"rooms_spare\":%llu,"
	       "\"bus_snaps_out\":%llu,\"bus_snaps_in\":%llu,"
	       "\"kv_ops\":%llu,\"kv_conflicts\":%llu,\"kv_errors\":%llu}",
	       b->connected ? "true" : "false", (unsigned long long)b->msgs_in,
	       (unsigned long long)b->bytes_in, (unsigned long long)b->msgs_out,
	       (unsigned long long)b->bytes_out,
	       (unsigned long long)b->pub_dropped,
	       (unsigned long long)b->in_dropped,
	       (unsigned long long)b->requests, (unsigned long long)b->timeouts,
	       (unsigned long long)b->no_responders,
	       (unsigned long long)b->disconnects,
	       (unsigned long long)b->reconnects, (unsigned long long)b->peers,
	       (unsigned long long)b->peers_down,
	       (unsigned long long)b->rooms_owned,
	       (unsigned long long)b->proxies, (unsigned long long)b->forwarded,
	       (unsigned long long)b->ghosts, (unsigned long long)b->stale,
	       (unsigned long long)b->room_lost,
	       (unsigned long long)b->takeovers, (unsigned long long)b->evicted,
	       (unsigned long long)b->fenced_ticks,
	       (unsigned long long)b->rooms_lost,
	       (unsigned long long)b->reclaimed,
	       (unsigned long long)b->rooms_spare,
	       (unsigned long long)b->snaps_out,
	       (unsigned long long)b->snaps_in, (unsigned long long)b->kv_ops,
	       (unsigned long long)b->kv_conflicts,
	       (unsigned long long)b->kv_errors);
}

static void print_json(struct state *s, const struct snap *sn, bool final,
		       const char *status)
{
	const struct arena_stats *ar = &sn->ar;
	const struct ao_io_stats *io = &sn->io;
	double dt = (double)(sn->t_ns - s->last.t_ns) / 1e9;
	int i;

	if (dt <= 0)
		dt = 1e-9;
	printf("{\"type\":\"%s\",\"tool\":\"ao-arena\",\"version\":\"%s\","
	       "\"elapsed_s\":%.3f,\"backend\":\"%s\",\"rings\":%u,"
	       "\"workers\":%u,\"mode\":\"%s\",\"port\":%u,\"tick_hz\":%u,"
	       "\"room_size\":%u,\"broadcast\":\"%s\",\"precise\":%s,",
	       final ? "final" : "stats", AO_VERSION, (double)sn->t_ns / 1e9,
	       ao_io_backend_name(s->backend), s->rings, sn->ex.workers,
	       s->o.a.ring_handlers ? "ring" : "worker", s->port,
	       s->o.a.tick_hz, s->o.a.room_size,
	       s->o.a.copy_broadcast ? "copy" : "shared",
	       s->o.a.precise ? "true" : "false");
	printf("\"players\":%llu,\"players_peak\":%llu,\"in_rooms\":%llu,"
	       "\"rooms\":%llu,\"consistent\":%s,\"ticks\":%llu,"
	       "\"ticks_skipped\":%llu,\"tick_late_p50_ns\":%llu,"
	       "\"tick_late_p99_ns\":%llu,\"tick_late_max_ns\":%llu,"
	       "\"tick_work_p50_ns\":%llu,\"tick_work_p99_ns\":%llu,"
	       "\"tick_work_max_ns\":%llu,",
	       (unsigned long long)ar->players,
	       (unsigned long long)ar->players_peak,
	       (unsigned long long)ar->in_rooms, (unsigned long long)ar->rooms,
	       ar->consistent ? "true" : "false", (unsigned long long)ar->ticks,
	       (unsigned long long)ar->ticks_skipped,
	       (unsigned long long)ar->late_p50_ns,
	       (unsigned long long)ar->late_p99_ns,
	       (unsigned long long)ar->late_max_ns,
	       (unsigned long long)ar->work_p50_ns,
	       (unsigned long long)ar->work_p99_ns,
	       (unsigned long long)ar->work_max_ns);
	printf("\"snaps_sent\":%llu,\"snaps_skipped\":%llu,\"snap_bufs\":%llu,"
	       "\"snap_nobuf\":%llu,\"chat_lines\":%llu,"
	       "\"chats_deferred\":%llu,\"inputs\":%llu,"
	       "\"joins\":%llu,\"leaves\":%llu,\"joins_deferred\":%llu,"
	       "\"refused_drops\":%llu,\"acks\":%llu,\"ack_slow\":%llu,"
	       "\"spectators\":%llu,\"watches\":%llu,"
	       "\"accepted\":%llu,\"rejected\":%llu,\"packets_in\":%llu,"
	       "\"bytes_in\":%llu,\"packets_out\":%llu,\"bytes_out\":%llu,"
	       "\"closes\":{",
	       (unsigned long long)ar->snaps_sent,
	       (unsigned long long)ar->snaps_skipped,
	       (unsigned long long)ar->snap_bufs,
	       (unsigned long long)ar->snap_nobuf,
	       (unsigned long long)ar->chat_lines,
	       (unsigned long long)ar->chats_deferred,
	       (unsigned long long)ar->inputs, (unsigned long long)ar->joins,
	       (unsigned long long)ar->leaves,
	       (unsigned long long)ar->joins_deferred,
	       (unsigned long long)ar->refused_drops,
	       (unsigned long long)ar->acks, (unsigned long long)ar->ack_slow,
	       (unsigned long long)ar->spectators,
	       (unsigned long long)ar->watches,
	       (unsigned long long)io->accepted,
	       (unsigned long long)io->rejected,
	       (unsigned long long)io->packets_in,
	       (unsigned long long)io->bytes_in,
	       (unsigned long long)io->packets_out,
	       (unsigned long long)io->bytes_out);
	print_closes_json(io);
	printf("},\"reasons\":{");
	for (i = 0; i < AC_NR; i++)
		printf("%s\"%s\":%llu", i ? "," : "", arena_close_name(i),
		       (unsigned long long)ar->closes[i]);
	printf("},\"pool_total\":%u,\"pool_in_use\":%u,\"pool_exhausted\":%llu,"
	       "\"exec_executed\":%llu,\"exec_stolen\":%llu,"
	       "\"exec_parks\":%llu,\"timer_fired\":%llu,"
	       "\"timer_skipped\":%llu,\"timer_spins\":%llu,"
	       "\"rss_kb\":%llu,\"pool_rss_kb\":%llu,\"cpu_user_s\":%.3f,"
	       "\"cpu_sys_s\":%.3f,\"snaps_per_s\":%.1f",
	       sn->pool_total, sn->pool_in_use,
	       (unsigned long long)sn->pool_exhausted,
	       (unsigned long long)sn->ex.executed,
	       (unsigned long long)sn->ex.stolen,
	       (unsigned long long)sn->ex.parks,
	       (unsigned long long)sn->tm.fired,
	       (unsigned long long)sn->tm.skipped,
	       (unsigned long long)sn->tm.spins, (unsigned long long)sn->rss_kb,
	       (unsigned long long)sn->pool_rss_kb, sn->cpu_user_s,
	       sn->cpu_sys_s,
	       (double)(ar->snaps_sent - s->last.ar.snaps_sent) / dt);
	if (s->o.cl.url)
		print_bus_json(&sn->cl);
	if (final)
		printf(",\"status\":\"%s\"}\n", status);
	else
		printf("}\n");
	fflush(stdout);
}

static void print_line(struct state *s, const struct snap *sn)
{
	const struct arena_stats *ar = &sn->ar;
	double dt = (double)(sn->t_ns - s->last.t_ns) / 1e9;

	if (dt <= 0)
		dt = 1e-9;
	printf("%8.1fs  players %llu  rooms %llu  ticks/s %.0f  snaps/s %.0f "
	       " skipped %llu  late p99 %.3f ms  pool %u/%u\n",
	       (double)sn->t_ns / 1e9, (unsigned long long)ar->players,
	       (unsigned long long)ar->rooms,
	       (double)(ar->ticks - s->last.ar.ticks) / dt,
	       (double)(ar->snaps_sent - s->last.ar.snaps_sent) / dt,
	       (unsigned long long)ar->snaps_skipped,
	       (double)ar->late_p99_ns / 1e6, sn->pool_in_use, sn->pool_total);
	fflush(stdout);
}

static void print_final_text(struct state *s, const struct snap *sn,
			     const char *status)
{
	const struct arena_stats *ar = &sn->ar;
	const struct ao_io_stats *io = &sn->io;
	double secs = (double)sn->t_ns / 1e9;
	bool any = false;
	int i;

	printf("%s: final statistics after %.2f s (%s, %u ring%s, %u workers, "
	       "%s handlers, %u Hz, rooms of %u, %s broadcast%s)\n",
	       prog, secs, ao_io_backend_name(s->backend), s->rings,
	       s->rings > 1 ? "s" : "", sn->ex.workers,
	       s->o.a.ring_handlers ? "ring" : "worker", s->o.a.tick_hz,
	       s->o.a.room_size, s->o.a.copy_broadcast ? "copy" : "shared",
	       s->o.a.precise ? ", precise ticks" : "");
	printf("  players      peak %llu, %llu connections accepted, %llu "
	       "rejected\n",
	       (unsigned long long)ar->players_peak,
	       (unsigned long long)io->accepted,
	       (unsigned long long)io->rejected);
	printf("  rooms        %llu; %llu joins, %llu leaves, %llu joins "
	       "deferred a tick, %llu messages dropped after a refused "
	       "join; %s\n",
	       (unsigned long long)ar->rooms, (unsigned long long)ar->joins,
	       (unsigned long long)ar->leaves,
	       (unsigned long long)ar->joins_deferred,
	       (unsigned long long)ar->refused_drops,
	       ar->consistent ? "consistent" : "INCONSISTENT");
	printf("  ticks        %llu run, %llu skipped; lateness p50 %.3f  p99 "
	       "%.3f  max %.3f ms; work p99 %.3f ms\n",
	       (unsigned long long)ar->ticks,
	       (unsigned long long)ar->ticks_skipped,
	       (double)ar->late_p50_ns / 1e6, (double)ar->late_p99_ns / 1e6,
	       (double)ar->late_max_ns / 1e6, (double)ar->work_p99_ns / 1e6);
	printf("  snapshots    %llu sent, %llu skipped (previous one still "
	       "queued), %llu buffers, %llu lost to an empty pool\n",
	       (unsigned long long)ar->snaps_sent,
	       (unsigned long long)ar->snaps_skipped,
	       (unsigned long long)ar->snap_bufs,
	       (unsigned long long)ar->snap_nobuf);
	printf("  acks         %llu taken, %llu members closed as slow "
	       "for them; %llu spectators' watches\n",
	       (unsigned long long)ar->acks, (unsigned long long)ar->ack_slow,
	       (unsigned long long)ar->watches);
	printf("  traffic      %llu inputs, %llu chat lines (%llu waited a "
	       "tick for a buffer); %llu bytes in, %llu bytes out\n",
	       (unsigned long long)ar->inputs,
	       (unsigned long long)ar->chat_lines,
	       (unsigned long long)ar->chats_deferred,
	       (unsigned long long)io->bytes_in,
	       (unsigned long long)io->bytes_out);
	printf("  closes       ");
	print_closes_text(io);
	printf("  why (arena)  ");
	for (i = 0; i < AC_NR; i++) {
		if (!ar->closes[i])
			continue;
		printf("%s%s %llu", any ? ", " : "", arena_close_name(i),
		       (unsigned long long)ar->closes[i]);
		any = true;
	}
	printf("%s\n", any ? "" : "none");
	printf("  buffer pool  %u buffers, %u in use, %llu gets refused\n",
	       sn->pool_total, sn->pool_in_use,
	       (unsigned long long)sn->pool_exhausted);
	printf("  executor     %llu executed, %llu stolen, %llu parks; timers "
	       "%llu fired\n",
	       (unsigned long long)sn->ex.executed,
	       (unsigned long long)sn->ex.stolen,
	       (unsigned long long)sn->ex.parks,
	       (unsigned long long)sn->tm.fired);
	printf("  memory       %llu kB resident, %llu kB of it the pool; CPU "
	       "%.2f s user, %.2f s system\n",
	       (unsigned long long)sn->rss_kb,
	       (unsigned long long)sn->pool_rss_kb, sn->cpu_user_s,
	       sn->cpu_sys_s);
	if (s->o.cl.url) {
		const struct cluster_stats *b = &sn->cl;

		printf("  bus          %llu msgs in (%llu bytes), %llu out (%llu "
		       "bytes), %llu publishes dropped; %llu requests, %llu "
		       "timeouts, %llu no-responders; %llu disconnects, %llu "
		       "reconnects\n",
		       (unsigned long long)b->msgs_in,
		       (unsigned long long)b->bytes_in,
		       (unsigned long long)b->msgs_out,
		       (unsigned long long)b->bytes_out,
		       (unsigned long long)b->pub_dropped,
		       (unsigned long long)b->requests,
		       (unsigned long long)b->timeouts,
		       (unsigned long long)b->no_responders,
		       (unsigned long long)b->disconnects,
		       (unsigned long long)b->reconnects);
		printf("  snapshots    %llu published on the bus (one per room "
		       "and tick with players elsewhere), %llu received (one per "
		       "room elsewhere with players here and tick)\n",
		       (unsigned long long)b->snaps_out,
		       (unsigned long long)b->snaps_in);
		printf("  cluster      %llu peers (%llu declared dead), %llu rooms "
		       "owned, %llu of other nodes; %llu players forwarded, "
		       "%llu of other nodes applied here; %llu stale messages "
		       "dropped, %llu room_lost sent, %llu rooms taken over, "
		       "%llu given away, %llu ticks fenced; %llu lost rooms "
		       "held, %llu given up, %llu spare\n",
		       (unsigned long long)b->peers,
		       (unsigned long long)b->peers_down,
		       (unsigned long long)b->rooms_owned,
		       (unsigned long long)b->proxies,
		       (unsigned long long)b->forwarded,
		       (unsigned long long)b->ghosts,
		       (unsigned long long)b->stale,
		       (unsigned long long)b->room_lost,
		       (unsigned long long)b->takeovers,
		       (unsigned long long)b->evicted,
		       (unsigned long long)b->fenced_ticks,
		       (unsigned long long)b->rooms_lost,
		       (unsigned long long)b->reclaimed,
		       (unsigned long long)b->rooms_spare);
	}
	printf("  stop         %s\n", status);
	fflush(stdout);
}

static void stats_now(void *arg)
{
	struct state *s = arg;
	struct snap sn;

	take_snap(s, &sn);
	if (s->o.json)
		print_json(s, &sn, false, NULL);
	else
		print_line(s, &sn);
	s->last = sn;
}

int main(int argc, char **argv)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGUSR1, SIGUSR2, 0 };
	static struct state s;
	struct ao_bufpool_info info;
	struct snap fin;
	uint64_t next_stats;
	const char *status = "ok";
	int sfd, sig, err, rc = EXIT_OK;

	cli_set_prog("ao-arena", argv[0]);
	parse_args(argc, argv, &s.o);

	/* As ao-echo: blocked before any thread exists. */
	sfd = cli_signalfd(sigs);
	if (sfd < 0)
		return EXIT_RUNTIME;

	if (s.o.cl.node && !s.o.cl.url)
		bad_usage("--node needs --nats");
	if (s.o.cl.cnats_reader && !s.o.cl.url)
		bad_usage("--bus-reader needs --nats");
	/* A node listens once it is in its cluster: its player ids come
	 * from the index the directory gives it. */
	s.o.a.defer_listen = s.o.cl.url != NULL;
	if (arena_start(&s.o.a, &s.a))
		return EXIT_RUNTIME;
	if (s.o.cl.url) {
		static char host[80];

		if (!s.o.cl.node) {
			gethostname(host, 40);
			host[40] = 0;
			snprintf(host + strlen(host), 40, "-%d", (int)getpid());
			s.o.cl.node = host;
		}
		if (cluster_start(s.a, &s.o.cl)) {
			arena_stop(s.a);
			arena_destroy(s.a);
			return EXIT_RUNTIME;
		}
		if (arena_listen(s.a)) {
			cluster_stop(s.a);
			arena_stop(s.a);
			arena_destroy(s.a);
			return EXIT_RUNTIME;
		}
	}
	s.t0 = now_ns();
	s.backend = ao_server_backend(arena_server(s.a));
	s.rings = ao_server_rings(arena_server(s.a));
	s.port = ao_server_port(arena_server(s.a));
	ao_bufpool_info(ao_server_pool(arena_server(s.a)), &info);
	s.pool_arena = info.arena;
	s.pool_len = info.arena_len;
	printf("port=%u\n", s.port);
	fflush(stdout);
	if (!s.o.a.quiet)
		fprintf(stderr,
			"%s: listening on %s port %u: %s, %u ring%s, %u "
			"workers, %u Hz, rooms of %u, %s broadcast\n",
			prog, s.o.a.address, s.port,
			ao_io_backend_name(s.backend), s.rings,
			s.rings > 1 ? "s" : "",
			ao_exec_workers(arena_exec(s.a)), s.o.a.tick_hz,
			s.o.a.room_size,
			s.o.a.copy_broadcast ? "copy" : "shared");
	take_snap(&s, &s.last);
	next_stats = s.o.stats_ns ? s.t0 + s.o.stats_ns : 0;

	for (;;) {
		sig = serve_wait_signal(sfd, &next_stats, s.o.stats_ns,
					stats_now, &s);
		if (sig < 0)
			rc = EXIT_RUNTIME;
		if (sig != SIGUSR1 && sig != SIGUSR2)
			break;
		if (sig == SIGUSR2)
			arena_reset_ticks(s.a); /* a measured phase starts */
		stats_now(&s);
	}

	if (!s.o.a.quiet)
		fprintf(stderr, "%s: stopping\n", prog);
	cluster_stop(s.a);
	err = arena_stop(s.a);
	if (err) {
		status = err == -ETIMEDOUT ? "stop timed out" : "stop failed";
		rc = EXIT_RUNTIME;
	}
	take_snap(&s, &fin);
	if (!fin.ar.consistent || fin.ar.in_rooms || fin.ar.players) {
		status = "rooms inconsistent after the stop";
		rc = EXIT_RUNTIME;
	}
	cluster_destroy(s.a);
	err = arena_destroy(s.a);
	if (err) {
		status = "leaked buffers or connections";
		rc = EXIT_RUNTIME;
	}
	if (s.o.json)
		print_json(&s, &fin, true, status);
	else
		print_final_text(&s, &fin, status);
	close(sfd);
	return rc;
}
