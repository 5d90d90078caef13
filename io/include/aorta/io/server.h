/* SPDX-License-Identifier: MIT */
/*
 * The server: TCP listeners on one or more ring threads, turning byte
 * streams into packets for handlers that run on an executor.
 *
 *	struct ao_server_config cfg = AO_SERVER_CONFIG_INIT;
 *	cfg.framing.kind = AO_FRAME_LEN16;
 *	cfg.handlers.on_packet = echo;		(ao_conn_send_packet(c, pkt))
 *	struct ao_server *srv;
 *	ao_server_create(&cfg, &srv);
 *	ao_server_start(srv);			ao_server_port(srv)
 *	...
 *	ao_server_stop(srv);			drain, close, join
 *	ao_server_destroy(srv);
 *
 * Backends: io_uring (multishot accept, multishot recv on a provided-buffer
 * ring fed from the buffer pool) or epoll, chosen at start: the config's
 * backend, else AO_IO_BACKEND=uring|epoll from the environment, else
 * io_uring when the kernel allows it.  See io/server.c for the design.
 */
#ifndef AORTA_IO_SERVER_H
#define AORTA_IO_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <aorta/compiler.h>
#include <aorta/io/conn.h>
#include <aorta/io/framer.h>

struct ao_buf;
struct ao_bufpool;
struct ao_exec;
struct ao_server;

enum ao_io_backend {
	AO_IO_AUTO = 0, /* environment, else io_uring if usable, else epoll */
	AO_IO_URING = 1, /* io_uring (fails to start without it) */
	AO_IO_EPOLL = 2, /* epoll */
};

/* A plain HTTP request (see on_http). */
struct ao_http_request {
	const char *path; /* request target in origin-form ("/p?q"; of an
			   * absolute-form, "http://h/p?q", the same), not
			   * NUL-terminated; valid during on_http */
	size_t path_len;
	bool head; /* HEAD, not GET: answer as for GET, ao_http_reply()
		    * sends the head (Content-Length too) but no body */
};

/* Handlers; each runs on the connection's strand (on the ring thread with
 * AO_SERVER_RING_HANDLERS).  arg is handlers.arg. */
struct ao_server_handlers {
	/* A connection was accepted (before any of its packets). */
	void (*on_open)(struct ao_conn *c, void *arg);
	/* One packet, payload only (pkt->data, pkt->len).  pkt is lent for
	 * the call: ao_buf_ref() it to keep it, or send it (a send takes its
	 * own reference).  A negative return closes the connection with
	 * AO_CLOSE_PROTOCOL: nothing more is read, the packets already
	 * queued still run, and what was sent goes out before the FIN, as
	 * for ao_conn_close(). */
	int (*on_packet)(struct ao_conn *c, struct ao_buf *pkt, void *arg);
	/* The connection closed; the last handler it gets. */
	void (*on_close)(struct ao_conn *c, enum ao_close_reason why,
			 void *arg);
	/* A plain HTTP GET or HEAD (AO_FRAME_WS or AO_SERVER_HTTP): answer
	 * it with ao_http_reply(), during the call or later from any thread;
	 * the connection closes after the answer (no keep-alive).  NULL:
	 * every plain request gets 404.  on_open/on_close are NOT called
	 * for plain HTTP connections. */
	void (*on_http)(struct ao_conn *c, const struct ao_http_request *req,
			void *arg);
	void *arg;
};

/* Flags for struct ao_server_config. */
#define AO_SERVER_QUIET 0x1u /* do not log the backend to stderr */
#define AO_SERVER_RING_HANDLERS 0x2u /* handlers on the ring thread */
#define AO_SERVER_RING_ASSIST 0x4u /* the ring runs strand turns itself */
#define AO_SERVER_HTTP \
	0x8u /* also HTTP (WebSocket upgrades and plain
			     * GETs) on a byte-framed port */

/* Flags for struct ao_ws_config. */
#define AO_WS_TEXT 0x1u /* send text frames (the default: binary) */

/*
 * WebSocket and HTTP (framing.kind AO_FRAME_WS: a pure WebSocket server;
 * or a byte framing with AO_SERVER_HTTP: a connection whose first bytes
 * are an HTTP request line (a method: upper-case letters, a space) is
 * HTTP, anything else the framing; with len16 that is unambiguous only
 * for max_packet < 0x4141, "AA" read as a length, and ao_server_create()
 * says -EINVAL otherwise).
 */
struct ao_ws_config {
	const char *const *protocols; /* subprotocols, preferred first,
				       * NULL-terminated; NULL: none */
	uint32_t header_timeout_ms; /* the request head's deadline; 0: 5000 */
	uint32_t header_max; /* request head bytes; 0: 8192 */
	uint32_t ping_ms; /* ping a WebSocket silent this long; 0: 15000 */
	uint32_t pong_timeout_ms; /* then close if no pong; 0: 10000 */
	unsigned int flags; /* AO_WS_TEXT: send text frames */
	const char *const *origins; /* Origin values an upgrade may come
				     * from ("https://example.com:8443",
				     * ASCII case-insensitive), NULL-terminated;
				     * another gets 403 and is closed, none
				     * (not a browser) is allowed.  NULL: any */
};

#define AO_WS_KEY_LEN 24 /* a Sec-WebSocket-Key: base64 of 16 bytes */
#define AO_WS_ACCEPT_LEN 28 /* a Sec-WebSocket-Accept: base64 of a SHA-1 */

/* The Sec-WebSocket-Accept (RFC 6455 section 4.2.2) answering key (len
 * chars), NUL-terminated into out; -EINVAL if key is not the base64 of
 * 16 bytes (AO_WS_KEY_LEN chars). */
AO_API int ao_ws_accept_key(const char *key, size_t len,
			    char out[AO_WS_ACCEPT_LEN + 1]);

/*
 * AO_SERVER_RING_HANDLERS: every handler runs on the ring thread that owns
 * the connection, straight from the receive, with no strand, work item or
 * worker hop (the fastest path, for handlers that only answer).  Rules:
 *  - a handler must not block or run long: it holds up every connection
 *    of its ring.  Hand long work to ao_server_exec() yourself;
 *  - one connection's handlers still run in order, one at a time
 *    (on_open, its packets, on_close); connections of one ring run one
 *    after the other, rings in parallel;
 *  - ao_conn_send() from the ring thread appends to the send queue and
 *    the send starts as soon as the handler returns (the sends of one
 *    batch of receives go out together), without the mailbox or the
 *    eventfd; ao_conn_close() too takes effect after the handler returns.
 *    Other threads may send as usual;
 *  - there is no backlog between the ring and the handler, so
 *    session_backlog does not apply; a peer that sends without reading is
 *    bounded by sendq_max (closed as a slow consumer);
 *  - a negative return from on_packet closes the connection
 *    (AO_CLOSE_PROTOCOL): the rest of that receive is dropped, what the
 *    handlers sent goes out before the FIN (see ao_conn_close()).
 *
 * AO_SERVER_RING_ASSIST: handlers keep their strands (order, one at a
 * time, on_open first and on_close last, session_backlog), but when a
 * strand has nobody running it, the ring takes its turn and runs it
 * itself after the batch of events, instead of queueing it and waking a
 * worker; so a handler that answers at once costs no wake-up and no hop
 * either way.  Bounded: per loop the ring runs at most 250 us of turns
 * (a turn is up to the strand's batch of items) and hands the rest to the
 * workers, and a connection whose turn took more than 1 ms goes to the
 * workers for good.  A handler that blocks still holds up the whole ring
 * for as long as it blocks (once per connection): set the flag only when
 * handlers do not block.  On the ring, ao_exec_current() is NULL and
 * ao_strand_current() is the connection's strand.  Ignored with
 * AO_SERVER_RING_HANDLERS.
 */

struct ao_server_config {
	const char *address; /* numeric IPv4 or IPv6 address to bind
			      * ("10.0.0.1", "::1", "[::1]", "fe80::1%eth0");
			      * "::" is dual stack (IPv6 and IPv4 clients);
			      * "0.0.0.0" every IPv4 address; NULL:
			      * "127.0.0.1" */
	uint16_t port; /* 0: ephemeral (see ao_server_port()) */
	int backlog; /* listen() backlog; 0: 512 */
	unsigned int rings; /* ring threads (SO_REUSEPORT if > 1); 0: 1 */
	enum ao_io_backend backend; /* AO_IO_AUTO: see above */
	struct ao_exec *exec; /* runs the handlers; NULL: the server makes
			       * one with ao_cpu_count() workers.  A bounded
			       * one stalls the ring while full (block) or
			       * closes the connection (fail): prefer none */
	struct ao_bufpool *pool; /* NULL: the server makes one; buffers must
				  * hold max_packet bytes */
	uint32_t pool_buffers; /* buffers in the pool it makes; 0: 4096 */
	struct ao_framing framing; /* default: raw */
	uint32_t max_conns; /* open at once; 0: 10000 (beyond: closed) */
	uint32_t idle_timeout_ms; /* close after this long silent; 0: never.
				   * Time the server is not reading it
				   * (backpressure, no buffers) is not
				   * silence */
	uint32_t session_backlog; /* packets waiting for a session's strand
				   * before its recv pauses; 0: 256 */
	size_t sendq_max; /* queued per connection, each packet counted
			   * at least its buffer's capacity; 0: 4 MiB */
	uint32_t drain_timeout_ms; /* ao_server_stop()'s bound (then a
				    * reset, as for linger_ms); 0: 5000 */
	uint32_t linger_ms; /* bound on a graceful close (ao_conn_close(),
			     * a failed on_packet, bad framing, the peer's
			     * EOF): what was sent before it goes out, then
			     * a FIN; past this long, a reset; 0: 2000 */
	uint32_t ring_entries; /* submission queue size; 0: 512 */
	uint32_t ring_buffers; /* provided buffers per ring (power of two
				* <= 32768); 0: 256 */
	int sock_rcvbuf; /* SO_RCVBUF of accepted sockets; 0: system's */
	int sock_sndbuf; /* SO_SNDBUF of accepted sockets; 0: system's */
	unsigned int flags; /* AO_SERVER_* */
	struct ao_server_handlers handlers;
	struct ao_ws_config ws; /* AO_FRAME_WS, AO_SERVER_HTTP */
};

#define AO_SERVER_CONFIG_INIT   \
	{                       \
		.address = NULL \
	}

/* Counters of one ring (or the sum over rings). */
struct ao_io_stats {
	uint64_t accepted; /* connections accepted and opened */
	uint64_t rejected; /* accepted and closed at once (max_conns,
			    * EMFILE, stopping) */
	uint64_t open; /* open now */
	uint64_t packets_in; /* packets handed to handlers */
	uint64_t bytes_in; /* bytes received */
	uint64_t packets_out; /* buffers fully sent */
	uint64_t bytes_out; /* bytes sent (prefixes included) */
	uint64_t closes[AO_CLOSE_NR]; /* connections closed, by reason */
	uint64_t pauses; /* backpressure: recv paused for a full backlog */
	uint64_t enobufs; /* receives that found no buffer (refilled) */
	uint64_t accept_errors; /* accept failures (EMFILE, ...) */
	uint64_t assisted; /* strand items the ring ran itself
			    * (AO_SERVER_RING_ASSIST), not the workers */
	uint64_t aborted; /* closes that ended with a reset: slow
			   * consumers, a drain or linger out of time */
	uint64_t ws_upgrades; /* WebSocket upgrades completed */
	uint64_t http_requests; /* plain HTTP requests (on_http or 404) */
	uint64_t http_errors; /* requests refused (4xx), timed out */
	uint64_t ws_frames_in; /* WebSocket frames received */
	uint64_t ws_frames_written; /* frame headers written into a
				     * buffer's headroom */
	uint64_t ws_frames_shared; /* sends that reused such a header */
	uint64_t ws_inline_headers; /* sends with the header in the queue
				     * node (a buffer without headroom) */
	uint64_t ws_pings; /* pings sent to silent connections */
	uint64_t ws_pongs; /* pongs sent to the peer's pings */
};

/* Create a server (not started); 0, -EINVAL for a bad config (an address
 * that is not a numeric IPv4 or IPv6 one included), -ENOMEM, or the error
 * from creating its executor or pool. */
AO_API int ao_server_create(const struct ao_server_config *cfg,
			    struct ao_server **out);
/* Bind, listen and start the ring threads.  0; -EADDRINUSE etc. from the
 * socket calls; -EOPNOTSUPP if io_uring was forced and is unusable. */
AO_API int ao_server_start(struct ao_server *srv);
/* Stop accepting, let received packets finish and replies flush (up to
 * drain_timeout_ms), close every connection, join the rings.  Returns 0,
 * or -ETIMEDOUT if something was still running when time ran out. */
AO_API int ao_server_stop(struct ao_server *srv);
/* Stop if running, then free; 0, or -EBUSY (with a report on stderr) if
 * connection references or buffers are still out: nothing is freed. */
AO_API int ao_server_destroy(struct ao_server *srv);

/* The port it listens on (the ephemeral one once started). */
AO_API uint16_t ao_server_port(const struct ao_server *srv);
/* The backend in use (AO_IO_AUTO before start). */
AO_API enum ao_io_backend ao_server_backend(const struct ao_server *srv);
/* "io_uring", "epoll" or "auto". */
AO_API const char *ao_io_backend_name(enum ao_io_backend b);
/* io_uring setup flags in use (0 on epoll). */
AO_API unsigned int ao_server_ring_flags(const struct ao_server *srv);
/* Ring threads. */
AO_API unsigned int ao_server_rings(const struct ao_server *srv);
/* The pool and the executor in use. */
AO_API struct ao_bufpool *ao_server_pool(const struct ao_server *srv);
AO_API struct ao_exec *ao_server_exec(const struct ao_server *srv);
/* The framing in effect (defaults resolved). */
AO_API const struct ao_framing *ao_server_framing(const struct ao_server *srv);
/* Counters of ring i, or their sum for i < 0; -EINVAL if i is too big. */
AO_API int ao_server_stats(const struct ao_server *srv, int ring,
			   struct ao_io_stats *st);

#endif /* AORTA_IO_SERVER_H */
