/* SPDX-License-Identifier: MIT */
/*
 * Connections: reference-counted handles to one client session.
 *
 * A handler is given a borrowed struct ao_conn *, valid for the call.  To
 * keep it longer (to send from another thread later, say), take a
 * reference with ao_conn_get() and drop it with ao_conn_put().  A held
 * connection stays valid memory after it closed: sends on it return
 * -ENOTCONN.  Every reference must be put before ao_server_destroy().
 *
 * All of a connection's handlers (on_open, on_packet, on_close) run on its
 * strand: in order, one at a time, on the executor's workers; or, with
 * AO_SERVER_RING_HANDLERS, in the same order on its ring thread.
 */
#ifndef AORTA_IO_CONN_H
#define AORTA_IO_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <aorta/compiler.h>

struct ao_buf;
struct ao_conn;
struct ao_server;

/* Why a connection closed (counted per ring in struct ao_io_stats). */
enum ao_close_reason {
	AO_CLOSE_EOF = 0, /* the peer closed its side (FIN) */
	AO_CLOSE_RESET, /* reset by the peer, or a socket error */
	AO_CLOSE_TRUNCATED, /* the peer closed inside a packet */
	AO_CLOSE_TOO_LONG, /* a length prefix over max_packet */
	AO_CLOSE_EMPTY, /* a zero length prefix (not allowed) */
	AO_CLOSE_PROTOCOL, /* on_packet returned an error */
	AO_CLOSE_SLOW, /* slow consumer: sendq_max, ao_conn_close_slow() */
	AO_CLOSE_IDLE, /* nothing received for idle_timeout_ms */
	AO_CLOSE_LOCAL, /* ao_conn_close() */
	AO_CLOSE_SHUTDOWN, /* ao_server_stop() */
	AO_CLOSE_NOMEM, /* out of memory */
	AO_CLOSE_WS_CLOSE, /* WebSocket: the close handshake (either side) */
	AO_CLOSE_WS_ERROR, /* WebSocket: a frame broke RFC 6455 (1002, 1007) */
	AO_CLOSE_WS_PONG, /* WebSocket: no pong to the server's ping */
	AO_CLOSE_HTTP_BAD, /* HTTP: a bad, too large or refused request head */
	AO_CLOSE_HTTP_TIMEOUT, /* HTTP: the request head took too long */
	AO_CLOSE_HTTP_DONE, /* HTTP: a plain request answered */
	AO_CLOSE_NR
};

/* What a connection speaks (see aorta/io/server.h: AO_FRAME_WS and
 * AO_SERVER_HTTP). */
enum ao_conn_proto {
	AO_CONN_FRAMED = 0, /* the server's byte framing */
	AO_CONN_WS, /* WebSocket, after the upgrade */
	AO_CONN_HTTP, /* a plain HTTP request */
};

/* A short name for a close reason ("eof", "slow consumer", ...). */
AO_API const char *ao_close_reason_name(enum ao_close_reason why);

/* Take a reference; returns c. */
AO_API struct ao_conn *ao_conn_get(struct ao_conn *c);
/* Drop a reference taken with ao_conn_get(). */
AO_API void ao_conn_put(struct ao_conn *c);

/*
 * Queue buf's bytes (buf->len of them, as they are now) for sending, from
 * any thread.  The connection takes its own reference on buf and drops it
 * when the send completes, so one buffer may go to many connections; do not
 * change its bytes until then.  Returns 0, -ENOTCONN once the connection is
 * closing, -EPIPE on a WebSocket once its close frame is queued (see
 * ao_conn_close()), -ENOBUFS if this send would pass the send-queue bound
 * (the connection is then closed as a slow consumer), or -ENOMEM.  Called
 * on the connection's ring thread (a handler under
 * AO_SERVER_RING_HANDLERS), the send starts when the handler returns, with
 * no cross-thread wake-up.
 */
AO_API int ao_conn_send(struct ao_conn *c, struct ao_buf *buf);
/* Same, as one packet: the server's length prefix goes first. */
AO_API int ao_conn_send_packet(struct ao_conn *c, struct ao_buf *buf);
/*
 * Close gracefully (reason AO_CLOSE_LOCAL), from any thread: nothing more
 * is read, packets already received still run, and every byte sent before
 * the close (and by those packets) reaches the peer before the FIN.  Sends
 * fail with -ENOTCONN once the queue is empty.  A WebSocket sends its
 * close frame (1000) once those packets have run, behind what was queued
 * until then; from then on every send fails with -EPIPE, as after any
 * graceful close of a WebSocket (the peer's close, a protocol error, a
 * failed on_packet, ao_server_stop()): no data frame may follow a close
 * frame (RFC 6455 section 5.5.1).  Bounded by the server's linger_ms: a
 * peer that does not read by then gets a reset (SO_LINGER 0) instead, and
 * the rest is dropped.  0, or -ENOTCONN if already closing.
 */
AO_API int ao_conn_close(struct ao_conn *c);
/* Close at once as a slow consumer (reason AO_CLOSE_SLOW), with a reset
 * (SO_LINGER 0), dropping what is queued, the kernel's socket buffer
 * included: the peer learns at once, and a stalled one holds nothing
 * behind a zero window.  For a server that bounds a reader's lag itself,
 * as one that skips updates for a client still busy with the previous one
 * must, its send queue then never reaching sendq_max (which closes the
 * same way).  From any thread.  0, or -ENOTCONN if already closing. */
AO_API int ao_conn_close_slow(struct ao_conn *c);
/* True until the connection starts closing (a snapshot). */
AO_API bool ao_conn_is_open(const struct ao_conn *c);

/* A number unique to this connection within its server (1, 2, ...). */
AO_API uint64_t ao_conn_id(const struct ao_conn *c);
/* The server the connection belongs to. */
AO_API struct ao_server *ao_conn_server(const struct ao_conn *c);
/* Index of the ring that owns the connection. */
AO_API unsigned int ao_conn_ring(const struct ao_conn *c);
/*
 * The peer's address, as getpeername(2) gives it: at most *len bytes are
 * copied to sa and *len is set to the address's full size (a struct
 * sockaddr_storage holds either family).  An IPv4 client of a listener
 * bound to "::" (dual stack) is an IPv4-mapped IPv6 address,
 * ::ffff:a.b.c.d.  0, or -EINVAL.
 */
AO_API int ao_conn_peer_addr(const struct ao_conn *c, struct sockaddr *sa,
			     socklen_t *len);
/* The peer's IPv4 address (a mapped one too, see above); for an IPv6 peer
 * *sa is zeroed (sin_family AF_UNSPEC): use ao_conn_peer_addr(). */
AO_API void ao_conn_peer(const struct ao_conn *c, struct sockaddr_in *sa);
/* Bytes queued for sending and not yet sent (a snapshot). */
AO_API size_t ao_conn_send_queued(struct ao_conn *c);
/* The caller's pointer for this connection (NULL until set). */
AO_API void *ao_conn_user(const struct ao_conn *c);
/* Set the caller's pointer (typically in on_open). */
AO_API void ao_conn_set_user(struct ao_conn *c, void *user);

/* What the connection speaks; AO_CONN_FRAMED until a connection of an
 * AO_SERVER_HTTP or AO_FRAME_WS server has told (on_open: WebSocket or
 * framed; on_http: HTTP). */
AO_API enum ao_conn_proto ao_conn_proto(const struct ao_conn *c);
/*
 * Answer a plain HTTP request once: a final status (200 to 599), a
 * Content-Type, and len bytes of body (copied); a 204 or 304 has no body
 * and is sent without Content-Type and Content-Length.  The connection
 * then closes gracefully.  0, -EINVAL (not an HTTP connection, answered
 * already, a status out of range, a body with 204 or 304), -ENOMEM,
 * -EPIPE (closed).  From any thread.
 */
AO_API int ao_http_reply(struct ao_conn *c, int status,
			 const char *content_type, const void *body,
			 size_t len);

#endif /* AORTA_IO_CONN_H */
