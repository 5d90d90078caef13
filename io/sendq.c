// SPDX-License-Identifier: MIT
/*
 * A connection's send queue: buffers (with their length prefixes) queued
 * by ao_conn_send() from any thread under the connection's spinlock,
 * bounded by sendq_max in the pool memory they pin, gathered into an
 * iovec by the ring for one send at a time, and dropped as the bytes go
 * out.  Each connection has one node of its own, so a packet or two in
 * flight costs no malloc().  See "Sending" at the top of io/server.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/io/conn.h>
#include "io_priv.h"

/*
 * Detach q (off the queue, under sq_lock) for freeing after the unlock:
 * a malloc()ed node goes on *tail; the inline node is free again at once
 * (its buffer, which the next send may overwrite the node with, is given
 * back in *inline_buf).
 */
static void sendq_detach(struct ao_conn *c, struct sendq_node *q,
			 struct sendq_node ***tail, struct ao_buf **inline_buf)
{
	if (q == &c->sq_inline) {
		*inline_buf = q->buf;
		c->sq_inline_used = false;
		return;
	}
	q->next = NULL;
	**tail = q;
	*tail = &q->next;
}

static void sendq_free(struct sendq_node *done, struct ao_buf *inline_buf)
{
	if (inline_buf)
		ao_buf_put(inline_buf);
	while (done) {
		struct sendq_node *next = done->next;

		ao_buf_put(done->buf);
		free(done);
		done = next;
	}
}

void io_sendq_flush(struct ao_conn *c)
{
	struct sendq_node *done = NULL, **tail = &done, *q, *next;
	struct ao_buf *inline_buf = NULL;

	ao_spin_lock(&c->sq_lock);
	for (q = c->sq_head; q; q = next) {
		next = q->next;
		sendq_detach(c, q, &tail, &inline_buf);
	}
	c->sq_head = c->sq_tail = NULL;
	c->sq_bytes = 0;
	c->sq_charge = 0;
	c->sq_off = 0;
	ao_spin_unlock(&c->sq_lock);
	sendq_free(done, inline_buf);
}

/* What conn_send() queues. */
enum send_kind {
	SEND_RAW, /* ao_conn_send(): the bytes as they are */
	SEND_PACKET, /* ao_conn_send_packet(): framed */
	SEND_WS_CLOSE, /* io_conn_send_ws_close(): the last bytes */
};

/*
 * Why a send is refused: -EPIPE once a WebSocket's close frame is queued
 * (for good: RFC 6455 section 5.5.1 allows no data frame after it), else
 * -ENOTCONN.  Under sq_lock, or after an acquire load of closed that saw
 * it set (ws_fin was set before it, see io_conn_send_ws_close()).
 */
static int send_refused(const struct ao_conn *c)
{
	/* Relaxed: ordered by sq_lock or by the acquire load of closed
	 * (above). */
	return __atomic_load_n(&c->ws_fin, __ATOMIC_RELAXED) ? -EPIPE :
							       -ENOTCONN;
}

static int conn_send(struct ao_conn *c, struct ao_buf *buf, enum send_kind kind)
{
	struct sendq_node *n, *spare = NULL;
	uint8_t hdr[10] = { 0 };
	uint32_t len = buf->len, total, charge, pre = 0;
	int hl = 0;

	/* Acquire: pairs with the release stores of closed (in
	 * io_conn_close_hard() and io_conn_check_drained()), which the ring
	 * made after it set ws_fin, if it did. */
	if (__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE))
		return send_refused(c);
	if (kind == SEND_PACKET) {
		/* Acquire: pairs with the release store when the upgrade
		 * completed (io/http.c). */
		uint32_t proto = __atomic_load_n(&c->proto, __ATOMIC_ACQUIRE);

		if (proto == AO_CONN_WS)
			hl = io_ws_frame(c, buf, hdr, &pre);
		else if (proto == AO_CONN_HTTP)
			hl = -EINVAL;
		else
			hl = ao_framing_header(&c->srv->cfg.framing, len, hdr);
		if (hl < 0)
			return hl;
	}
	len += pre;
	total = len + (uint32_t)hl;
	if (total == 0)
		return 0;
	/*
	 * The bound is on the pool memory the queue pins, not only on its
	 * bytes: a packet pins its whole buffer however short it is, so
	 * each node is charged at least the buffer's capacity.  Counting
	 * bytes alone, a peer sending small packets without reading pinned
	 * every buffer of the pool (8000 packets of 512 bytes stay under
	 * 4 MiB) before it was ever closed as slow, and every other client
	 * starved with it.
	 */
	charge = total > buf->cap ? total : buf->cap;
	for (;;) {
		ao_spin_lock(&c->sq_lock);
		/* Relaxed: both are written under sq_lock.  A send after the
		 * close frame is refused in the same lock order that put the
		 * frame on the queue: nothing can follow it. */
		if (__atomic_load_n(&c->closed, __ATOMIC_RELAXED) ||
		    __atomic_load_n(&c->ws_fin, __ATOMIC_RELAXED)) {
			int err = send_refused(c);

			ao_spin_unlock(&c->sq_lock);
			free(spare);
			return err;
		}
		if (c->sq_charge + charge > c->srv->cfg.sendq_max) {
			ao_spin_unlock(&c->sq_lock);
			free(spare);
			io_conn_post(c, MB_SLOW);
			return -ENOBUFS;
		}
		/* The conn's own node when it is free, else a malloc()ed
		 * one (allocated without the lock held, then re-checked). */
		if (!c->sq_inline_used) {
			n = &c->sq_inline;
			c->sq_inline_used = true;
			break;
		}
		if (spare) {
			n = spare;
			spare = NULL;
			break;
		}
		ao_spin_unlock(&c->sq_lock);
		spare = malloc(sizeof(*spare));
		if (!spare)
			return -ENOMEM;
	}
	n->next = NULL;
	n->buf = ao_buf_ref(buf);
	n->len = len;
	n->charge = charge;
	n->pre = (uint8_t)pre;
	n->hdr_len = (uint8_t)hl;
	memcpy(n->hdr, hdr, sizeof(n->hdr));
	if (c->sq_tail)
		c->sq_tail->next = n;
	else
		c->sq_head = n;
	c->sq_tail = n;
	c->sq_bytes += total;
	c->sq_charge += charge;
	if (kind == SEND_WS_CLOSE) {
		/* Relaxed: read under sq_lock, or after the acquire load of
		 * closed, which is stored (release) after this. */
		__atomic_store_n(&c->ws_fin, 1, __ATOMIC_RELAXED);
	}
	ao_spin_unlock(&c->sq_lock);
	free(spare); /* the inline node turned out free meanwhile */
	if (io_current_ring() == c->ring)
		io_ring_kick(c);
	else
		io_conn_post(c, MB_SEND);
	return 0;
}

int ao_conn_send(struct ao_conn *c, struct ao_buf *buf)
{
	if (!c || !buf)
		return -EINVAL;
	return conn_send(c, buf, SEND_RAW);
}

int ao_conn_send_packet(struct ao_conn *c, struct ao_buf *buf)
{
	if (!c || !buf)
		return -EINVAL;
	return conn_send(c, buf, SEND_PACKET);
}

int io_conn_send_ws_close(struct ao_conn *c, struct ao_buf *buf)
{
	return conn_send(c, buf, SEND_WS_CLOSE);
}

/* Under sq_lock: c->iov from the queue. */
static uint32_t fill_iov_locked(struct ao_conn *c)
{
	uint32_t n = 0, skip;
	struct sendq_node *q;

	skip = c->sq_off;
	for (q = c->sq_head; q && n < IO_SEND_IOV; q = q->next) {
		if (skip < q->hdr_len) {
			c->iov[n].iov_base = q->hdr + skip;
			c->iov[n].iov_len = q->hdr_len - skip;
			n++;
			skip = 0;
		} else {
			skip -= q->hdr_len;
		}
		if (n == IO_SEND_IOV)
			break;
		if (skip < q->len) {
			c->iov[n].iov_base =
				(uint8_t *)q->buf->data - q->pre + skip;
			c->iov[n].iov_len = q->len - skip;
			n++;
		}
		skip = 0;
	}
	c->iov_n = n;
	return n;
}

uint32_t io_conn_fill_iov(struct ao_conn *c)
{
	uint32_t n;

	ao_spin_lock(&c->sq_lock);
	n = fill_iov_locked(c);
	ao_spin_unlock(&c->sq_lock);
	return n;
}

uint32_t io_conn_sent(struct ao_conn *c, size_t n)
{
	struct sendq_node *done = NULL, **tail = &done;
	struct ao_buf *inline_buf = NULL;
	uint64_t pkts = 0, bytes = n;
	uint32_t iov_n;

	ao_spin_lock(&c->sq_lock);
	while (c->sq_head) {
		struct sendq_node *q = c->sq_head;
		uint32_t total = q->hdr_len + q->len;
		uint32_t rem = total - c->sq_off;

		if (n < rem) {
			c->sq_off += (uint32_t)n;
			break;
		}
		n -= rem;
		c->sq_off = 0;
		c->sq_bytes -= total;
		c->sq_charge -= q->charge;
		c->sq_head = q->next;
		if (!c->sq_head)
			c->sq_tail = NULL;
		sendq_detach(c, q, &tail, &inline_buf);
		pkts++;
	}
	iov_n = fill_iov_locked(c);
	ao_spin_unlock(&c->sq_lock);
	IO_STAT_ADD(c->ring, bytes_out, bytes);
	IO_STAT_ADD(c->ring, packets_out, pkts);
	sendq_free(done, inline_buf);
	return iov_n;
}

bool io_conn_send_pending(struct ao_conn *c)
{
	bool pending;

	ao_spin_lock(&c->sq_lock);
	pending = c->sq_head != NULL;
	ao_spin_unlock(&c->sq_lock);
	return pending;
}

size_t ao_conn_send_queued(struct ao_conn *c)
{
	size_t n;

	ao_spin_lock(&c->sq_lock);
	n = c->sq_bytes;
	ao_spin_unlock(&c->sq_lock);
	return n;
}
