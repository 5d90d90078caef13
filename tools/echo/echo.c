// SPDX-License-Identifier: MIT
/*
 * ao-echo: the aorta echo server.  Every packet that comes in goes back
 * out, whole, on the same connection: the program people run to drive the
 * runtime (with ao-load), and what the echo benchmarks measure.
 *
 * Two modes.  worker (the default) is the runtime's real path: each
 * packet runs on_packet on the connection's strand, on an executor
 * worker, and the reply goes back to the ring through the send path (the
 * mailbox).  ring runs the handler on the ring thread itself
 * (AO_SERVER_RING_HANDLERS): no hop, the raw baseline of the io layer.
 *
 * Signals are blocked in every thread and read from a signalfd by the
 * main thread, so nothing runs in a signal handler: SIGINT/SIGTERM stop
 * the server gracefully (ao_server_stop(), bounded by --drain-timeout) and
 * print the final report; SIGUSR1 prints one statistics line now.  The
 * interface (options, output, exit status) is agreed with the scripts and
 * tests that drive it: see --help and the README's Tools section.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <aorta/config.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/cpu.h>
#include <aorta/core/exec.h>
#include <aorta/io/server.h>
#include <aorta/sync/spinlock.h>
#include "../common/cli.h"
#include "../common/serve.h"
#include "../common/echo_proto.h"
#include "echo.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s [options]\n"
		"Echo every packet back on its connection (the aorta io layer).\n"
		"\n"
		"Server:\n"
		"  -a, --address=ADDR      bind address, IPv4 or IPv6 (default 127.0.0.1;\n"
		"                          :: takes both, [::1] = ::1)\n"
		"  -p, --port=PORT         port (default 0: ephemeral; see port=N)\n"
		"  -w, --workers=N         executor workers (default 0: one per CPU)\n"
		"  -r, --rings=N           ring threads (default 1)\n"
		"  -b, --backend=B         uring, epoll or auto (default auto)\n"
		"  -f, --framing=F         raw, len16, len32 (2/4-byte length prefix\n"
		"                          in network byte order; default raw), as ao-load,\n"
		"                          or ws (WebSocket: each binary or text message\n"
		"                          comes back as one binary message)\n"
		"  -m, --mode=M            worker (default: strand + worker + send path)\n"
		"                          or ring (echo straight from the ring thread)\n"
		"  -x, --discipline=D      executor: shared or steal (default steal)\n"
		"      --no-assist         worker mode: every handler on a worker (no\n"
		"                          AO_SERVER_RING_ASSIST: the ring never runs\n"
		"                          a strand's turn itself)\n"
		"Limits:\n"
		"      --max-packet=B      largest packet (default 65536; k = 1024)\n"
		"      --max-conns=N       connections open at once (default 10000)\n"
		"      --idle-timeout=T    close connections silent for T (ms, s, m;\n"
		"                          default 0: never)\n"
		"      --buffers=N         buffers in the pool (default 4096)\n"
		"      --drain-timeout=T   bound of the graceful stop (default 5s)\n"
		"Output:\n"
		"  -S, --stats=T           a statistics line every T (default 0: never)\n"
		"      --json              statistics lines and the final report as one\n"
		"                          JSON object per line on stdout\n"
		"  -q, --quiet             no banner on stderr\n"
		"  -h, --help              this help\n"
		"  -V, --version           the version\n"
		"\n"
		"The first line of stdout is port=N once it listens.  SIGINT or SIGTERM:\n"
		"graceful stop, then the final report; SIGUSR1: a statistics line now.\n"
		"\n"
		"Exit status: 0 ok; 1 runtime error (start failed, stop timed out,\n"
		"leaked buffers or connections); 2 usage.\n",
		prog);
}

enum {
	OPT_MAX_PACKET = 256,
	OPT_MAX_CONNS,
	OPT_IDLE_TIMEOUT,
	OPT_BUFFERS,
	OPT_DRAIN_TIMEOUT,
	OPT_JSON,
	OPT_NO_ASSIST,
};

static const struct option long_opts[] = {
	{ "address", required_argument, NULL, 'a' },
	{ "port", required_argument, NULL, 'p' },
	{ "workers", required_argument, NULL, 'w' },
	{ "rings", required_argument, NULL, 'r' },
	{ "backend", required_argument, NULL, 'b' },
	{ "framing", required_argument, NULL, 'f' },
	{ "mode", required_argument, NULL, 'm' },
	{ "discipline", required_argument, NULL, 'x' },
	{ "max-packet", required_argument, NULL, OPT_MAX_PACKET },
	{ "max-conns", required_argument, NULL, OPT_MAX_CONNS },
	{ "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
	{ "buffers", required_argument, NULL, OPT_BUFFERS },
	{ "drain-timeout", required_argument, NULL, OPT_DRAIN_TIMEOUT },
	{ "stats", required_argument, NULL, 'S' },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "no-assist", no_argument, NULL, OPT_NO_ASSIST },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

void echo_parse_args(int argc, char **argv, struct echo_opts *o)
{
	int c;

	o->address = "127.0.0.1";
	o->rings = 1;
	o->backend = AO_IO_AUTO;
	o->framing = FRAMING_RAW;
	o->mode = MODE_WORKER;
	o->discipline = AO_EXEC_STEAL;
	o->max_packet = 65536;
	o->max_conns = 10000;
	o->buffers = 4096;
	o->drain_ns = 5 * NS;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":a:p:w:r:b:f:m:x:S:qhV", long_opts,
				NULL)) != -1) {
		switch (c) {
		case 'a':
			o->address = need_address(optarg);
			break;
		case 'p':
			o->port =
				(uint16_t)need_count("port", optarg, 0, 65535);
			break;
		case 'w':
			o->workers = (unsigned int)need_count("workers", optarg,
							      0, MAX_WORKERS);
			break;
		case 'r':
			o->rings = (unsigned int)need_count("rings", optarg, 1,
							    MAX_RINGS);
			break;
		case 'b':
			o->backend = need_backend(optarg);
			break;
		case 'f':
			o->ws = !strcmp(optarg, "ws");
			if (!o->ws && framing_parse(optarg, &o->framing))
				bad_usage("--framing: '%s' is not raw, len16, "
					  "len32 or ws",
					  optarg);
			break;
		case 'm':
			if (!strcmp(optarg, "worker"))
				o->mode = MODE_WORKER;
			else if (!strcmp(optarg, "ring"))
				o->mode = MODE_RING;
			else
				bad_usage("--mode: '%s' is not worker or ring",
					  optarg);
			break;
		case 'x':
			if (!strcmp(optarg, "shared"))
				o->discipline = AO_EXEC_SHARED;
			else if (!strcmp(optarg, "steal"))
				o->discipline = AO_EXEC_STEAL;
			else
				bad_usage("--discipline: '%s' is not shared or "
					  "steal",
					  optarg);
			break;
		case OPT_MAX_PACKET:
			o->max_packet = (uint32_t)need_size(
				"max-packet", optarg, 1, AO_FRAME_LIMIT);
			break;
		case OPT_MAX_CONNS:
			o->max_conns = (uint32_t)need_count("max-conns", optarg,
							    1, MAX_CONNS);
			break;
		case OPT_IDLE_TIMEOUT:
			o->idle_ns = need_duration_in("idle-timeout", optarg, 0,
						      UINT32_MAX / 1000 * NS);
			if (o->idle_ns && o->idle_ns < MS)
				bad_usage("--idle-timeout: '%s' is below 1ms",
					  optarg);
			break;
		case OPT_BUFFERS:
			o->buffers = (uint32_t)need_count("buffers", optarg, 2,
							  AO_BUFPOOL_MAX_COUNT);
			break;
		case OPT_DRAIN_TIMEOUT:
			o->drain_ns = need_duration_in("drain-timeout", optarg,
						       MS,
						       UINT32_MAX / 1000 * NS);
			break;
		case 'S':
			o->stats_ns = need_stats(optarg);
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_NO_ASSIST:
			o->no_assist = true;
			break;
		case 'q':
			o->quiet = true;
			break;
		default: /* -h, -V, errors */
			cli_option(c, argv, usage);
		}
	}
	cli_no_operands(argc, argv);
	if (o->framing == FRAMING_LEN16 && o->max_packet > 0xffff)
		o->max_packet = 0xffff; /* what a 2-byte prefix can say */
}

/* ------------------------------------------------------------------ */
/* The handler: the whole server. */

static int on_packet(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	(void)arg;
	/* The send takes its own reference on pkt.  A refusal (closing,
	 * slow consumer) closes the connection by itself: nothing to do. */
	ao_conn_send_packet(c, pkt);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Statistics */

struct snap {
	uint64_t t_ns; /* since listening */
	struct ao_io_stats io;
	uint32_t pool_total, pool_in_use;
	uint64_t pool_exhausted;
	struct ao_spin_stats lock; /* the pool's shard locks, summed */
	struct ao_exec_stats ex;
};

static const char *echo_framing_name(const struct echo_opts *o)
{
	return o->ws ? "ws" : framing_name(o->framing);
}

struct echo {
	struct echo_opts o;
	struct ao_server *srv;
	struct ao_exec *exec;
	uint64_t t0;
	/* Kept apart: the final report comes after the server is gone. */
	enum ao_io_backend backend;
	unsigned int rings;
	uint16_t port;
	struct snap last; /* for the rates of the next stats line */
};

static void take_snap(struct echo *e, struct snap *s)
{
	struct ao_bufpool *pool = ao_server_pool(e->srv);
	struct ao_bufpool_stats ps;
	struct ao_bufpool_info info;

	memset(s, 0, sizeof(*s));
	s->t_ns = now_ns() - e->t0;
	ao_server_stats(e->srv, -1, &s->io);
	ao_bufpool_info(pool, &info);
	ao_bufpool_stats(pool, &ps);
	s->pool_total = info.count;
	s->pool_in_use = ps.in_use;
	s->pool_exhausted = ps.exhausted;
	s->lock = ps.sum.lock;
	ao_exec_stats(e->exec, &s->ex);
}

/* The four lock phases as shares of all acquisitions, in %. */
static void lock_shares(const struct ao_spin_stats *l, double pct[4])
{
	double n = (double)(l->fast + l->phase1 + l->phase2 + l->phase3);

	pct[0] = n ? 100.0 * (double)l->fast / n : 0;
	pct[1] = n ? 100.0 * (double)l->phase1 / n : 0;
	pct[2] = n ? 100.0 * (double)l->phase2 / n : 0;
	pct[3] = n ? 100.0 * (double)l->phase3 / n : 0;
}

static uint64_t closes_total(const struct ao_io_stats *st)
{
	uint64_t n = 0;

	for (int i = 0; i < AO_CLOSE_NR; i++)
		n += st->closes[i];
	return n;
}

static const char *mode_name(enum mode m)
{
	return m == MODE_RING ? "ring" : "worker";
}

/* One JSON object: type "stats" (with rates since the last line) or
 * "final" (with status, stop and destroy results). */
static void print_json(struct echo *e, const struct snap *s, bool final,
		       const char *status)
{
	const struct ao_io_stats *io = &s->io;
	double secs = (double)s->t_ns / 1e9, pct[4];
	double dt = (double)(s->t_ns - e->last.t_ns) / 1e9;

	lock_shares(&s->lock, pct);
	if (dt <= 0)
		dt = 1e-9;
	printf("{\"type\":\"%s\",\"tool\":\"ao-echo\",\"version\":\"%s\","
	       "\"elapsed_s\":%.3f,\"backend\":\"%s\",\"mode\":\"%s\","
	       "\"framing\":\"%s\",\"rings\":%u,\"workers\":%u,"
	       "\"discipline\":\"%s\",\"port\":%u,",
	       final ? "final" : "stats", AO_VERSION, secs,
	       ao_io_backend_name(e->backend), mode_name(e->o.mode),
	       echo_framing_name(&e->o), e->rings, s->ex.workers,
	       e->o.discipline == AO_EXEC_SHARED ? "shared" : "steal", e->port);
	printf("\"accepted\":%llu,\"rejected\":%llu,\"open\":%llu,"
	       "\"packets_in\":%llu,\"bytes_in\":%llu,\"packets_out\":%llu,"
	       "\"bytes_out\":%llu,\"pauses\":%llu,\"enobufs\":%llu,"
	       "\"accept_errors\":%llu,\"assisted\":%llu,\"closes\":{",
	       (unsigned long long)io->accepted,
	       (unsigned long long)io->rejected, (unsigned long long)io->open,
	       (unsigned long long)io->packets_in,
	       (unsigned long long)io->bytes_in,
	       (unsigned long long)io->packets_out,
	       (unsigned long long)io->bytes_out,
	       (unsigned long long)io->pauses, (unsigned long long)io->enobufs,
	       (unsigned long long)io->accept_errors,
	       (unsigned long long)io->assisted);
	print_closes_json(io);
	printf("},\"pool_total\":%u,\"pool_in_use\":%u,"
	       "\"pool_exhausted\":%llu,\"lock_fast\":%.2f,\"lock_p1\":%.2f,"
	       "\"lock_p2\":%.2f,\"lock_p3\":%.2f,\"exec_executed\":%llu,"
	       "\"exec_stolen\":%llu,\"exec_parks\":%llu",
	       s->pool_total, s->pool_in_use,
	       (unsigned long long)s->pool_exhausted, pct[0], pct[1], pct[2],
	       pct[3], (unsigned long long)s->ex.executed,
	       (unsigned long long)s->ex.stolen,
	       (unsigned long long)s->ex.parks);
	if (final)
		printf(",\"packets_per_s\":%.1f,\"status\":\"%s\"}\n",
		       secs > 0 ? (double)io->packets_in / secs : 0.0, status);
	else
		printf(",\"packets_per_s\":%.1f}\n",
		       (double)(io->packets_in - e->last.io.packets_in) / dt);
	fflush(stdout);
}

static void print_line(struct echo *e, const struct snap *s)
{
	const struct ao_io_stats *io = &s->io;
	double dt = (double)(s->t_ns - e->last.t_ns) / 1e9;

	if (dt <= 0)
		dt = 1e-9;
	printf("%8.1fs  open %llu  accepted %llu  packets/s %.0f  "
	       "in %llu  out %llu  closed %llu  pool %u/%u in use\n",
	       (double)s->t_ns / 1e9, (unsigned long long)io->open,
	       (unsigned long long)io->accepted,
	       (double)(io->packets_in - e->last.io.packets_in) / dt,
	       (unsigned long long)io->packets_in,
	       (unsigned long long)io->packets_out,
	       (unsigned long long)closes_total(io), s->pool_in_use,
	       s->pool_total);
	fflush(stdout);
}

static void print_final_text(struct echo *e, const struct snap *s,
			     const char *status)
{
	const struct ao_io_stats *io = &s->io;
	double secs = (double)s->t_ns / 1e9, pct[4];

	lock_shares(&s->lock, pct);
	printf("%s: final statistics after %.2f s (%s, %s mode, %s framing, "
	       "%u ring%s, %u workers %s)\n",
	       prog, secs, ao_io_backend_name(e->backend), mode_name(e->o.mode),
	       echo_framing_name(&e->o), e->rings, e->rings > 1 ? "s" : "",
	       s->ex.workers,
	       e->o.discipline == AO_EXEC_SHARED ? "shared" : "steal");
	printf("  connections   accepted %llu, rejected %llu, open %llu, "
	       "accept errors %llu\n",
	       (unsigned long long)io->accepted,
	       (unsigned long long)io->rejected, (unsigned long long)io->open,
	       (unsigned long long)io->accept_errors);
	printf("  packets       in %llu (%llu bytes), out %llu (%llu bytes), "
	       "%.0f/s\n",
	       (unsigned long long)io->packets_in,
	       (unsigned long long)io->bytes_in,
	       (unsigned long long)io->packets_out,
	       (unsigned long long)io->bytes_out,
	       secs > 0 ? (double)io->packets_in / secs : 0.0);
	printf("  flow control  %llu recv pauses, %llu receives without a "
	       "buffer\n",
	       (unsigned long long)io->pauses, (unsigned long long)io->enobufs);
	printf("  closes        ");
	print_closes_text(io);
	printf("  buffer pool   %u buffers, %u in use, %llu gets refused "
	       "(exhausted)\n",
	       s->pool_total, s->pool_in_use,
	       (unsigned long long)s->pool_exhausted);
	printf("  pool locks    fast %.2f%%, spin %.2f%%, yield %.2f%%, "
	       "sleep %.2f%%\n",
	       pct[0], pct[1], pct[2], pct[3]);
	printf("  executor      %llu executed, %llu stolen, %llu parks; "
	       "%llu run by the rings (assist)\n",
	       (unsigned long long)s->ex.executed,
	       (unsigned long long)s->ex.stolen,
	       (unsigned long long)s->ex.parks,
	       (unsigned long long)io->assisted);
	printf("  stop          %s\n", status);
	fflush(stdout);
}

static void stats_now(void *arg)
{
	struct echo *e = arg;
	struct snap s;

	take_snap(e, &s);
	if (e->o.json)
		print_json(e, &s, false, NULL);
	else
		print_line(e, &s);
	e->last = s;
}

/* ------------------------------------------------------------------ */

static int start(struct echo *e)
{
	struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;
	struct ao_server_config cfg = AO_SERVER_CONFIG_INIT;
	const struct echo_opts *o = &e->o;
	int err;

	ec.kind = o->discipline;
	ec.workers = o->workers;
	ec.name = "ao-w";
	err = ao_exec_create(&ec, &e->exec);
	if (err) {
		fprintf(stderr, "%s: cannot create the executor: %s\n", prog,
			strerror(-err));
		return err;
	}
	cfg.address = o->address;
	cfg.port = o->port;
	cfg.rings = o->rings;
	cfg.backend = o->backend;
	cfg.exec = e->exec;
	cfg.pool_buffers = o->buffers;
	cfg.framing.kind = o->framing == FRAMING_LEN16 ? AO_FRAME_LEN16 :
			   o->framing == FRAMING_LEN32 ? AO_FRAME_LEN32 :
							 AO_FRAME_RAW;
	if (o->ws)
		cfg.framing.kind = AO_FRAME_WS;
	cfg.framing.max_packet = o->max_packet;
	cfg.max_conns = o->max_conns;
	cfg.idle_timeout_ms = (uint32_t)(o->idle_ns / MS);
	cfg.drain_timeout_ms = (uint32_t)(o->drain_ns / MS);
	/* The banner is ours (below), not the library's. */
	cfg.flags = AO_SERVER_QUIET;
	if (o->mode == MODE_RING)
		cfg.flags |= AO_SERVER_RING_HANDLERS;
	else if (!o->no_assist)
		cfg.flags |= AO_SERVER_RING_ASSIST; /* see the top */
	cfg.handlers.on_packet = on_packet;
	err = ao_server_create(&cfg, &e->srv);
	if (err) {
		fprintf(stderr, "%s: cannot create the server: %s\n", prog,
			strerror(-err));
		ao_exec_destroy(e->exec);
		return err;
	}
	err = ao_server_start(e->srv);
	if (err) {
		if (err == -EOPNOTSUPP)
			fprintf(stderr,
				"%s: --backend=uring: io_uring is not usable "
				"here\n",
				prog);
		else
			fprintf(stderr, "%s: cannot listen on %s port %u: %s\n",
				prog, o->address, o->port, strerror(-err));
		ao_server_destroy(e->srv);
		ao_exec_destroy(e->exec);
		return err;
	}
	return 0;
}

int echo_main(int argc, char **argv)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGUSR1, 0 };
	static struct echo e;
	struct snap fin;
	uint64_t next_stats;
	const char *status = "ok";
	int sfd, sig, err, rc = EXIT_OK;

	cli_set_prog("ao-echo", argv[0]);
	echo_parse_args(argc, argv, &e.o);

	/* Blocked before any thread exists, so every thread inherits the
	 * mask and the signals wait for the signalfd. */
	sfd = cli_signalfd(sigs);
	if (sfd < 0)
		return EXIT_RUNTIME;

	if (start(&e))
		return EXIT_RUNTIME;
	e.t0 = now_ns();
	e.backend = ao_server_backend(e.srv);
	e.rings = ao_server_rings(e.srv);
	e.port = ao_server_port(e.srv);
	printf("port=%u\n", ao_server_port(e.srv));
	fflush(stdout);
	if (!e.o.quiet)
		fprintf(stderr,
			"%s: listening on %s port %u: %s (flags 0x%x), %s "
			"mode, %s framing, %u ring%s, %u worker%s (%s)\n",
			prog, e.o.address, ao_server_port(e.srv),
			ao_io_backend_name(ao_server_backend(e.srv)),
			ao_server_ring_flags(e.srv), mode_name(e.o.mode),
			echo_framing_name(&e.o), ao_server_rings(e.srv),
			ao_server_rings(e.srv) > 1 ? "s" : "",
			ao_exec_workers(e.exec),
			ao_exec_workers(e.exec) > 1 ? "s" : "",
			e.o.discipline == AO_EXEC_SHARED ? "shared" : "steal");
	take_snap(&e, &e.last);
	next_stats = e.o.stats_ns ? e.t0 + e.o.stats_ns : 0;

	while ((sig = serve_wait_signal(sfd, &next_stats, e.o.stats_ns,
					stats_now, &e)) == SIGUSR1)
		stats_now(&e);
	if (sig < 0)
		rc = EXIT_RUNTIME;

	if (!e.o.quiet)
		fprintf(stderr, "%s: stopping (drain up to %llu ms)\n", prog,
			(unsigned long long)(e.o.drain_ns / MS));
	err = ao_server_stop(e.srv);
	if (err) {
		status = err == -ETIMEDOUT ? "stop timed out" : "stop failed";
		rc = EXIT_RUNTIME;
	}
	/* Counters once everything is back (the pool dies with the
	 * server), then the leak check. */
	take_snap(&e, &fin);
	err = ao_server_destroy(e.srv);
	if (err) {
		/* Nothing was freed: the executor stays too. */
		status = "leaked buffers or connections";
		rc = EXIT_RUNTIME;
	} else {
		ao_exec_destroy(e.exec);
	}
	if (e.o.json)
		print_json(&e, &fin, true, status);
	else
		print_final_text(&e, &fin, status);
	close(sfd);
	return rc;
}
