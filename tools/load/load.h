/* SPDX-License-Identifier: MIT */
/*
 * ao-load's shared state: the options, the connections and the per-thread
 * workers, and the request logic the two engines (tools/common/) share.
 *
 * Each connection keeps its requests in flight in a ring of P frames (P =
 * --pipeline).  Three stream counters drive it: frames queued (n_queued),
 * bytes sent (tx) and bytes echoed back and checked (rx), with
 * rx <= tx <= n_queued * frame_len.  Echoed bytes are compared with the
 * ring, in order; a frame is complete when its last byte is back.
 *
 * With --ws the ring holds masked WebSocket frames (tx_len bytes each)
 * and echo the payloads they carry (frame_len = the payload's size): the
 * server's frames are decoded (struct load_ws) and their payload bytes
 * compared with echo, so rx counts payload bytes and tx frame bytes.
 */
#ifndef AO_LOAD_H
#define AO_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include "../common/cli.h"
#include "../common/engine.h"
#include "../common/hist.h"
#include "../common/echo_proto.h"
#include "../common/ws_client.h"

enum engine { ENGINE_EPOLL, ENGINE_URING };

#define MAX_CONNS 1000000u
#define MAX_PIPELINE 65536u
#define MAX_THREADS 1024u

enum {
	EXIT_OK = 0,
	EXIT_ERRORS = 1, /* errors or mismatches during the run, or fatal */
	EXIT_USAGE = CLI_EXIT_USAGE,
	EXIT_CONNECT = 3,
};

struct load_opts {
	const char *addr;
	uint16_t port;
	uint32_t conns; /* -c */
	uint32_t pipeline; /* -P: requests in flight per connection */
	uint32_t threads; /* -t */
	uint64_t rate; /* -R: total requests/s; 0 = closed loop */
	uint64_t duration_ns; /* -d; 0 = until --requests are done */
	uint64_t requests; /* -n; 0 = until --duration */
	uint64_t ramp_ns; /* connections opened evenly over this */
	uint64_t timeout_ns; /* connect, request and final drain */
	size_t size; /* payload bytes */
	enum framing framing;
	bool ws; /* --ws: WebSocket frames after an HTTP upgrade */
	const char *ws_path; /* the upgrade's request target */
	enum engine engine;
	bool json;
	int progress; /* -1: when stdout is a terminal, 0 never, 1 always */
	const char *hist_path;
};

/* A WebSocket connection's own state (--ws). */
struct load_ws {
	struct wsc_dec dec;
	uint8_t ctl[WSC_HDR_MAX + WSC_CTL_MAX]; /* a pong or close to send */
	uint8_t ctl_len, ctl_off;
	bool ctl_inflight; /* conn_unsent() offered ctl, not the ring */
};

struct conn {
	union { /* the engine's part: fd, dead, dirty, rxbuf, ... */
		struct eng_conn ec;
		struct {
			ENG_CONN_MEMBERS
		};
	};
	uint32_t id; /* 0..conns-1 over all threads */
	uint32_t idx; /* in its worker */
	bool bad; /* the frame being received has a wrong byte */
	uint8_t *ring; /* pipeline frames */
	uint8_t *echo; /* what comes back: ring, or the payloads (--ws) */
	struct load_ws *ws; /* --ws, else NULL */
	uint64_t *t_start; /* per ring slot: latency measured from here */
	uint64_t n_queued; /* frames built */
	uint64_t n_due; /* open loop: frames whose intended time has come */
	uint64_t tx, rx; /* stream bytes sent, received and checked */
	uint64_t last_progress; /* ns: last byte back, or first in flight */
};

/* Counters a worker publishes (relaxed atomics) for the progress line. */
struct wstats {
	uint64_t completed;
	uint64_t mismatches;
	uint64_t conn_errors;
	uint64_t timeouts;
	uint64_t tx_bytes, rx_bytes;
	uint64_t unsent; /* open loop: due but never sent (at the end) */
};

struct load_ctx;

struct worker {
	union { /* the engine's state: flush list, epfd, ring, err, ... */
		struct eng eng;
		struct {
			ENG_MEMBERS
		};
	};
	struct load_ctx *ctx;
	unsigned int tid;
	uint32_t nconns;
	struct conn *conns;
	uint32_t alive;
	uint64_t quota; /* --requests share; UINT64_MAX without */
	uint64_t issued;
	uint64_t sched_j; /* open loop: next request of the thread schedule */
	uint8_t *pattern;
	size_t frame_len; /* bytes echoed per request */
	size_t tx_len; /* bytes sent per request (frame_len but --ws) */
	uint64_t rng; /* --ws: keys and masks */
	bool stopping; /* no new requests */
	uint64_t drain_deadline;
	uint64_t last_check;
	uint64_t t_end; /* when this worker finished */
	int connect_err; /* errno of the first failed connect, or 0 */
	uint32_t connected;
	struct wstats st;
	struct hist hist;
};

struct load_ctx {
	struct load_opts o;
	struct sockaddr_storage sa;
	socklen_t salen;
	uint64_t t0; /* load starts (after the connections are up) */
	uint64_t deadline; /* t0 + --duration, or UINT64_MAX */
	int stop; /* atomic: stop issuing requests */
	unsigned int ready; /* atomic: workers done connecting */
	unsigned int done; /* atomic: workers finished */
	struct worker *workers;
};

/* The shared request logic (load.c). */
void conn_fill(struct worker *w, struct conn *c, uint64_t now);
/* Bytes echoed back: check them, complete frames, queue new requests. */
void conn_on_data(struct worker *w, struct conn *c, const uint8_t *p, size_t n,
		  uint64_t now);
/* Sent bytes: advance tx. */
void conn_on_sent(struct worker *w, struct conn *c, size_t n);
/* --ws: bytes of the server's frames (decoded, checked, answered). */
void conn_on_ws_data(struct worker *w, struct conn *c, const uint8_t *p,
		     size_t n, uint64_t now);
/* A connection error (err: positive errno, 0 for EOF, -1 for protocol). */
void conn_fail(struct worker *w, struct conn *c, int err);
/* The unsent bytes as up to two iovecs; returns the count (0: none). */
int conn_unsent(struct worker *w, struct conn *c, struct iovec *iov);
uint32_t conn_inflight(const struct worker *w, const struct conn *c);
/*
 * Once per loop iteration, after the events: the open-loop schedule, the
 * stop flag, request timeouts.  Returns the ns to wait at most for the
 * next event, or 0 when the worker is done.
 */
uint64_t worker_tick(struct worker *w, uint64_t now);
void worker_error(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void conn_log(struct worker *w, struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The engines (engine.c, over the shared ones in tools/common/): run the
 * worker's connections to the end; 0 or -1 (err). */
int engine_epoll_run(struct worker *w);
int engine_uring_run(struct worker *w);
/* Before the load starts, on the worker's thread: 0 or -1 (err). */
int engine_uring_setup(struct worker *w);
/* Safe to call whether or not the ring was set up. */
void engine_uring_free(struct worker *w);
/* 0 if the io_uring engine can run here; -ENOSYS when it is not compiled
 * in (no liburing at build time), or why the kernel refused a ring. */
int engine_uring_probe(void);

/* The command line into ctx (options, address), or a usage error. */
void load_parse_args(int argc, char **argv, struct load_ctx *ctx);
/* The whole program: its exit status. */
int load_main(int argc, char **argv);

#endif /* AO_LOAD_H */
