/* SPDX-License-Identifier: MIT */
/*
 * ao-arena: a small multiplayer game server on aorta, the reference
 * embedding (see tools/arena/PROTOCOL.md for the protocol and room.c for
 * the design).  It uses the installed headers only.
 *
 * room.c is the server (players, rooms, ticks) behind this interface, so
 * that the tests can run it in their own process, on a test clock;
 * arena.c is the program (options, signals, statistics).
 */
#ifndef AO_ARENA_H
#define AO_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <aorta/core/exec.h>
#include <aorta/io/server.h>
#include "../common/arena_proto.h"
#include "../common/hist.h"

struct arena_opts {
	const char *address; /* NULL: 127.0.0.1 */
	uint16_t port; /* 0: ephemeral */
	unsigned int workers; /* 0: ao_cpu_count() */
	uint32_t spin_ns; /* the workers' idle spin; 0: the executor's */
	unsigned int rings; /* 0: 1 */
	enum ao_io_backend backend;
	bool ring_handlers; /* parse packets on the ring thread (default) */
	uint32_t tick_hz; /* 0: 20 */
	uint32_t room_size; /* 0: 50 */
	uint32_t max_players; /* 0: 10000 */
	uint32_t buffers; /* 0: 4 per player + 1024 */
	uint64_t stall_ns; /* a member skipped this long is closed; 0: 2 s */
	uint64_t hello_ns; /* no hello this long after connect: closed;
			    * 0: 5 s, ARENA_NEVER: never */
	uint64_t idle_ns; /* no complete message this long after hello:
			   * closed; 0: 30 s, ARENA_NEVER: never */
	uint64_t drain_ns; /* ao_server_stop()'s bound; 0: 5 s */
	int sndbuf; /* SO_SNDBUF of accepted sockets; 0: the system's */
	const char *const *origins; /* Origins a WebSocket upgrade may come
				     * from, NULL-terminated; NULL: any */
	bool copy_broadcast; /* a copy of each broadcast per member */
	bool precise; /* AO_TIMER_PRECISE ticks */
	bool test_clock; /* ticks only with arena_advance() (tests) */
	bool quiet;
	bool defer_listen; /* arena_start() does not listen: arena_listen() */
};

#define ARENA_NEVER UINT64_MAX

/* Why the arena closed a connection (its own reasons, beyond the
 * server's): the protocol errors of PROTOCOL.md, and stalls. */
enum arena_close {
	AC_BAD_TYPE,
	AC_MALFORMED,
	AC_ORDER,
	AC_CHAT_LONG,
	AC_FLOOD,
	AC_SERVER_FULL,
	AC_HELLO_TIMEOUT, /* no hello within hello_ns */
	AC_IDLE, /* no complete message for idle_ns */
	AC_SLOW, /* skipped for stall_ns, acked ticks over stall_ns
		  * behind, or its send queue over its bound: closed
		  * abortively as a slow consumer */
	AC_NOBUF, /* --copy-broadcast: no buffer for its copy of a chat
		   * line (closed as a slow consumer rather than miss it) */
	AC_NR
};

const char *arena_close_name(enum arena_close why);

struct arena_stats {
	uint64_t players; /* connected now (hello or not) */
	uint64_t players_peak;
	uint64_t in_rooms; /* members of rooms now */
	uint64_t spectators; /* watching a room now */
	uint64_t watches; /* watches applied */
	uint64_t rooms;
	uint64_t ticks; /* room ticks run */
	uint64_t ticks_skipped; /* late ticks the timers skipped */
	uint64_t late_p50_ns, late_p99_ns, late_max_ns; /* tick lateness */
	uint64_t work_p50_ns, work_p99_ns, work_max_ns; /* a tick's run */
	uint64_t snaps_sent; /* snapshot sends (one per member) */
	uint64_t snaps_skipped; /* members skipped: previous one queued */
	uint64_t snap_bufs; /* buffers built for snapshots */
	uint64_t snap_nobuf; /* snapshots lost to an empty pool */
	uint64_t chat_lines; /* chat lines broadcast */
	uint64_t chats_deferred; /* to the next tick: no buffer for them */
	uint64_t inputs; /* inputs applied */
	uint64_t joins, leaves; /* applied */
	uint64_t joins_deferred; /* to a later tick (tick order) */
	uint64_t refused_drops; /* inputs, chats, leaves after a refused
				 * join (sent before the refusal came) */
	uint64_t acks; /* ack messages taken */
	uint64_t ack_slow; /* members closed as slow for their acks */
	uint64_t closes[AC_NR];
	bool consistent; /* members of rooms = players in a room */
};

struct arena;

/* Create (exec, timers, pool, server) and listen (not with defer_listen);
 * *out is set.  0, or a negative errno (a message on stderr says where). */
int arena_start(const struct arena_opts *o, struct arena **out);
/* Listen, after arena_start() with defer_listen (a node joins its cluster
 * first: a hello before that would get an id outside the node's range).
 * 0 or a negative errno, said on stderr. */
int arena_listen(struct arena *a);
/* Stop: the server stops (connections close), the ticks stop, every
 * player is freed.  0, or -ETIMEDOUT (the server's drain timed out). */
int arena_stop(struct arena *a);
/* Free what arena_start() made; 0, or -EBUSY if buffers or connections
 * leaked (then nothing is freed). */
int arena_destroy(struct arena *a);

struct ao_server *arena_server(const struct arena *a);
struct ao_exec *arena_exec(const struct arena *a);
struct ao_timers *arena_timers(const struct arena *a);
uint64_t arena_period_ns(const struct arena *a);
void arena_stats(struct arena *a, struct arena_stats *st);
/* Start the tick lateness and work histograms afresh. */
void arena_reset_ticks(struct arena *a);
/* The lateness histogram of the ticks (a copy). */
void arena_late_hist(struct arena *a, struct hist *h);

/* ---- HTTP (web.c) and metrics (metrics.c) ---- */

struct ao_metrics;
struct ao_http_request;

/* A file served over HTTP: embedded at build time from tools/arena/viewer/
 * (embed.sh); the table ends with a NULL path. */
struct arena_file {
	const char *path; /* "/index.html" */
	const char *type; /* its Content-Type */
	const unsigned char *data;
	size_t len;
};
extern const struct arena_file arena_files[];
extern const unsigned int arena_nfiles;

/* The server's on_http (arg: the arena): GET /metrics, / and the
 * embedded files, 404 for anything else. */
void arena_on_http(struct ao_conn *c, const struct ao_http_request *req,
		   void *arg);
/* The server's aorta_* metrics, then the arena's arena_* ones; 0 or
 * -ENOMEM. */
int arena_metrics(struct arena *a, struct ao_metrics *m);
/* The WebSocket subprotocol ("aorta-arena.v1"; optional for a client). */
#define ARENA_WS_PROTOCOL "aorta-arena.v1"

#endif /* AO_ARENA_H */
