/* SPDX-License-Identifier: MIT */
/*
 * Private to io/: a connection's send queue (io/sendq.c), which the
 * backends gather their sends from.  The queue lives in struct ao_conn
 * (io_priv.h), under its sq_lock.
 */
#ifndef AORTA_IO_SENDQ_H
#define AORTA_IO_SENDQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ao_buf;
struct ao_conn;

struct sendq_node {
	struct sendq_node *next;
	struct ao_buf *buf; /* one reference, dropped when sent */
	uint32_t len; /* bytes sent from buf: buf->len when queued, plus
		       * pre */
	uint32_t charge; /* against sendq_max: see conn_send() */
	uint8_t pre; /* a header in buf's headroom: the bytes go from
		      * buf->data - pre (see io/ws.c) */
	uint8_t hdr_len; /* prefix bytes (in hdr) before the payload */
	uint8_t hdr[10]; /* a length prefix, or a WebSocket header */
};

/*
 * Queue a WebSocket's close frame (buf's bytes, raw, as ao_conn_send()
 * does) and, in the same hold of sq_lock, refuse every later send with
 * -EPIPE: what was queued before it goes first, nothing after it (RFC
 * 6455 section 5.5.1).  Ring thread; 0 or a negative errno (nothing is
 * queued or refused then).
 */
int io_conn_send_ws_close(struct ao_conn *c, struct ao_buf *buf);
/* Fill c->iov from the send queue; returns the number of entries. */
uint32_t io_conn_fill_iov(struct ao_conn *c);
/* n bytes of the send queue went out: drop what is done, then fill c->iov
 * with what is left (one lock hold for both); returns the entries. */
uint32_t io_conn_sent(struct ao_conn *c, size_t n);
/* Is anything queued for sending? */
bool io_conn_send_pending(struct ao_conn *c);
/* Drop everything queued (the connection is closed). */
void io_sendq_flush(struct ao_conn *c);

#endif /* AORTA_IO_SENDQ_H */
