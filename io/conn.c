// SPDX-License-Identifier: MIT
/*
 * Connections: the object and its reference count, the handlers' work
 * items, the receive path the two backends share (framing, strand
 * submission, backpressure), closing (graceful, lingering, abortive) and
 * the deadlines.  The ring's services are in io/ring.c, the send queue in
 * io/sendq.c; the protocol is described at the top of io/server.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <aorta/clock.h>
#include <aorta/io/conn.h>
#include "io_priv.h"

static const char *const reason_names[AO_CLOSE_NR] = {
	[AO_CLOSE_EOF] = "eof",
	[AO_CLOSE_RESET] = "reset",
	[AO_CLOSE_TRUNCATED] = "truncated packet",
	[AO_CLOSE_TOO_LONG] = "packet too long",
	[AO_CLOSE_EMPTY] = "empty packet",
	[AO_CLOSE_PROTOCOL] = "protocol error",
	[AO_CLOSE_SLOW] = "slow consumer",
	[AO_CLOSE_IDLE] = "idle timeout",
	[AO_CLOSE_LOCAL] = "closed locally",
	[AO_CLOSE_SHUTDOWN] = "server shutdown",
	[AO_CLOSE_NOMEM] = "out of memory",
	[AO_CLOSE_WS_CLOSE] = "websocket close",
	[AO_CLOSE_WS_ERROR] = "websocket protocol error",
	[AO_CLOSE_WS_PONG] = "websocket no pong",
	[AO_CLOSE_HTTP_BAD] = "http bad request",
	[AO_CLOSE_HTTP_TIMEOUT] = "http header timeout",
	[AO_CLOSE_HTTP_DONE] = "http answered",
};

const char *ao_close_reason_name(enum ao_close_reason why)
{
	if ((unsigned int)why >= AO_CLOSE_NR)
		return "?";
	return reason_names[why];
}

/* ---- references ---- */

struct ao_conn *ao_conn_get(struct ao_conn *c)
{
	/* Relaxed: the caller already holds a reference, so the count cannot
	 * reach zero under us. */
	__atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
	return c;
}

void ao_conn_put(struct ao_conn *c)
{
	/* Release: our uses of c happen before the free; acquire (on the
	 * last put): every other holder's uses happen before it too. */
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	/* Only the ring frees (it owns the lists c is on), and only once
	 * the strand is idle: this put may come from c's own strand. */
	if (io_current_ring() == c->ring)
		io_ring_reap_add(c->ring, c);
	else
		io_conn_post(c, MB_FREE);
}

void io_conn_free(struct ao_conn *c)
{
	struct io_ring *r = c->ring;

	r->nalive--;
	io_wsc_free(c);
	free(c);
}

/* ---- handlers, on the strand ---- */

static void open_run(struct ao_work *w)
{
	struct ao_conn *c = container_of(w, struct ao_conn, open_work);
	const struct ao_server_handlers *h = &c->srv->cfg.handlers;

	if (h->on_open)
		h->on_open(c, h->arg);
	ao_conn_put(c);
}

static void close_run(struct ao_work *w)
{
	struct ao_conn *c = container_of(w, struct ao_conn, close_work);
	const struct ao_server_handlers *h = &c->srv->cfg.handlers;

	if (h->on_close)
		h->on_close(c, c->reason, h->arg);
	ao_conn_put(c); /* the ring's reference, handed to this item */
}

static void pkt_run(struct ao_work *w)
{
	struct pkt_work *pw = container_of(w, struct pkt_work, work);
	struct ao_conn *c = pw->c;
	struct ao_buf *pkt = pw->pkt;
	struct ao_server *srv = c->srv;
	const struct ao_server_handlers *h = &srv->cfg.handlers;
	uint32_t n;

	/* The strand touches no item after its function is called, so the
	 * item can go now.  Release: our reads of it happen before the
	 * ring reuses it; pairs with the acquire load in conn_emit(). */
	if (pw == &c->pw_inline)
		__atomic_store_n(&c->pw_busy, 0, __ATOMIC_RELEASE);
	else
		free(pw);
	if (h->on_packet && h->on_packet(c, pkt, h->arg) < 0)
		io_conn_post(c, MB_PROTO);
	ao_buf_put(pkt);
	/* SEQ_CST: the decrement is ordered before the load of rx_paused
	 * (StoreLoad); pairs with the ring's SEQ_CST store of rx_paused and
	 * re-load of backlog in bp_update(), so either the ring sees the
	 * backlog down or this sees the pause and posts a resume. */
	n = __atomic_sub_fetch(&c->backlog, 1, __ATOMIC_SEQ_CST);
	if (n <= srv->low_water &&
	    __atomic_load_n(&c->rx_paused, __ATOMIC_SEQ_CST))
		io_conn_post(c, MB_RESUME);
	ao_conn_put(c);
}

/* ---- the receive path (ring thread) ---- */

/* AO_SERVER_RING_HANDLERS: run on_packet here and now.  Takes over pkt.
 * Closing is left to the caller (the framer may be mid-feed): a failed
 * handler makes the emit fail with -EPROTO. */
static int ring_emit(struct ao_conn *c, struct ao_buf *pkt)
{
	const struct ao_server_handlers *h = &c->srv->cfg.handlers;
	int ret = 0;

	IO_STAT_ADD(c->ring, packets_in, 1);
	if (h->on_packet && h->on_packet(c, pkt, h->arg) < 0)
		ret = -EPROTO;
	ao_buf_put(pkt);
	return ret;
}

static struct ao_buf *conn_alloc(void *arg)
{
	struct ao_conn *c = arg;

	return ao_buf_get(c->srv->pool);
}

/* Pause recv when the backlog reaches its bound. */
static void bp_update(struct ao_conn *c)
{
	struct io_ring *r = c->ring;
	uint32_t n = __atomic_load_n(&c->backlog, __ATOMIC_SEQ_CST);

	if (c->bp_paused || n < c->srv->cfg.session_backlog)
		return;
	c->bp_paused = true;
	IO_STAT_ADD(r, pauses, 1);
	/* SEQ_CST store, then SEQ_CST load: see pkt_run(). */
	__atomic_store_n(&c->rx_paused, 1, __ATOMIC_SEQ_CST);
	n = __atomic_load_n(&c->backlog, __ATOMIC_SEQ_CST);
	if (n <= c->srv->low_water) {
		/* Drained meanwhile; the worker may not have seen the flag. */
		c->bp_paused = false;
		if (c->state == CONN_OPEN)
			__atomic_store_n(&c->rx_paused, 0, __ATOMIC_RELAXED);
		return;
	}
	r->be->rx_update(r, c);
}

/* The framer's emit: one packet to the strand.  Takes over pkt. */
static int conn_emit(void *arg, struct ao_buf *pkt)
{
	return io_conn_emit(arg, pkt);
}

int io_conn_emit(struct ao_conn *c, struct ao_buf *pkt)
{
	struct pkt_work *pw;
	int err;

	if (c->srv->ring_handlers)
		return ring_emit(c, pkt);
	/* Acquire: pairs with the release store in pkt_run(). */
	if (!__atomic_load_n(&c->pw_busy, __ATOMIC_ACQUIRE)) {
		pw = &c->pw_inline;
		/* Relaxed: only this thread sets it; the strand's submit
		 * publishes pw to the worker. */
		__atomic_store_n(&c->pw_busy, 1, __ATOMIC_RELAXED);
	} else {
		pw = malloc(sizeof(*pw));
		if (!pw) {
			ao_buf_put(pkt);
			return -ENOMEM;
		}
	}
	ao_work_init(&pw->work, pkt_run);
	pw->c = ao_conn_get(c);
	pw->pkt = pkt;
	__atomic_fetch_add(&c->backlog, 1, __ATOMIC_SEQ_CST);
	err = io_ring_submit(c, &pw->work);
	if (err < 0) {
		__atomic_fetch_sub(&c->backlog, 1, __ATOMIC_SEQ_CST);
		ao_buf_put(pkt);
		if (pw == &c->pw_inline)
			__atomic_store_n(&c->pw_busy, 0, __ATOMIC_RELAXED);
		else
			free(pw);
		ao_conn_put(c);
		return err;
	}
	IO_STAT_ADD(c->ring, packets_in, 1);
	bp_update(c);
	return 0;
}

bool io_conn_rx_wanted(const struct ao_conn *c)
{
	return c->state == CONN_OPEN && !c->bp_paused && !c->held;
}

static enum ao_close_reason err_reason(int err)
{
	switch (err) {
	case -EMSGSIZE:
		return AO_CLOSE_TOO_LONG;
	case -EBADMSG:
		return AO_CLOSE_EMPTY;
	case -ESHUTDOWN:
		return AO_CLOSE_SHUTDOWN;
	case -EPROTO:
		return AO_CLOSE_PROTOCOL; /* ring_emit() */
	default:
		return AO_CLOSE_NOMEM;
	}
}

/* Input the connection cannot go on from: a framing error or a failed
 * handler ends it after what was sent (io_conn_close_input()); no memory
 * or a stopping executor ends it at once. */
void io_conn_input_error(struct ao_conn *c, int err)
{
	enum ao_close_reason why = err_reason(err);

	if (why == AO_CLOSE_NOMEM || why == AO_CLOSE_SHUTDOWN)
		io_conn_close_hard(c, why);
	else
		io_conn_close_input(c, why);
}

/*
 * Keep len bytes of buf from off for when buffers are back.  They are
 * copied out, and buf goes back to the kernel: a reference here would pin
 * one pool buffer per starved connection, and with as many of them as
 * free buffers every buffer ends up either held or stitching a packet
 * whose rest can never be received (the provided-buffer ring stays empty):
 * a deadlock.  A held connection stops receiving, so the copies are only
 * the receives already under way when it stopped.
 */
static void hold(struct ao_conn *c, struct ao_buf *buf, uint32_t off,
		 uint32_t len)
{
	struct held_rx *h = malloc(sizeof(*h) + len);

	if (!h) {
		io_conn_close_hard(c, AO_CLOSE_NOMEM);
		return;
	}
	h->next = NULL;
	h->off = 0;
	h->len = len;
	memcpy(h->data, (const uint8_t *)buf->data + off, len);
	if (!c->held) {
		c->ring->nheld++;
		*c->held_tail = h;
		c->held_tail = &h->next;
		c->ring->be->rx_update(c->ring, c);
		return;
	}
	*c->held_tail = h;
	c->held_tail = &h->next;
}

static void free_held(struct ao_conn *c)
{
	struct held_rx *h = c->held;

	if (!h)
		return;
	while (h) {
		struct held_rx *next = h->next;

		free(h);
		h = next;
	}
	c->held = NULL;
	c->held_tail = &c->held;
	c->ring->nheld--;
}

bool io_conn_input(struct ao_conn *c, struct ao_buf *buf, uint32_t len)
{
	size_t used;
	int err;

	if (c->state >= CONN_CLOSING || c->rx_stop)
		return false;
	IO_STAT_ADD(c->ring, bytes_in, len);
	c->last_rx_ns = c->ring->now_ns; /* read once per batch */
	if (c->held) {
		hold(c, buf, 0, len);
		return false; /* copied */
	}
	if (c->ws && io_wsc_active(c)) {
		err = io_wsc_feed(c, buf->data, len, &used);
		if (err == -ENOBUFS) {
			IO_STAT_ADD(c->ring, enobufs, 1);
			hold(c, buf, (uint32_t)used, len - (uint32_t)used);
		} else if (err < 0 && err != -ECANCELED) {
			io_conn_input_error(c, err);
		}
		return false; /* copied or done with */
	}
	/* Raw: the receive buffer is the packet (no copy).  The backends
	 * receive at most srv->rx_len bytes, so a receive is within
	 * max_packet; one over it (should a backend change) goes through
	 * the framer, which splits it. */
	if (c->framer.hdr_len == 0 && len <= c->framer.cfg.max_packet) {
		buf->len = len;
		ao_buf_ref(buf);
		err = conn_emit(c, buf);
		if (err < 0) {
			io_conn_input_error(c, err);
			return false;
		}
		return true;
	}
	err = ao_framer_feed(&c->framer, buf->data, len, &used);
	if (err == 0)
		return false;
	if (err == -ENOBUFS) {
		IO_STAT_ADD(c->ring, enobufs, 1);
		hold(c, buf, (uint32_t)used, len - (uint32_t)used);
		return false; /* copied */
	}
	io_conn_input_error(c, err);
	return false;
}

void io_conn_retry_held(struct ao_conn *c)
{
	struct held_rx *h;

	while (c->state < CONN_CLOSING && !c->rx_stop && (h = c->held)) {
		size_t used;
		int err;

		if (c->ws && io_wsc_active(c))
			err = io_wsc_feed(c, h->data + h->off, h->len, &used);
		else
			err = ao_framer_feed(&c->framer, h->data + h->off,
					     h->len, &used);
		if (err == -ECANCELED) {
			/* Done with input (an HTTP request, a close). */
			free_held(c);
			io_conn_check_drained(c);
			return;
		}
		h->off += (uint32_t)used;
		h->len -= (uint32_t)used;
		if (err == -ENOBUFS)
			return;
		if (err < 0) {
			io_conn_input_error(c, err);
			return;
		}
		c->held = h->next;
		if (!c->held) {
			c->held_tail = &c->held;
			c->ring->nheld--;
		}
		free(h);
		if (!c->held) {
			if (c->eof_held)
				io_conn_eof(c);
			c->ring->be->rx_update(c->ring, c);
			io_conn_check_drained(c);
		}
	}
}

void io_conn_eof(struct ao_conn *c)
{
	if (c->state != CONN_OPEN)
		return;
	if (c->held) {
		/* The FIN came behind input held for want of buffers (the
		 * receives under way when it stopped): it ends that input,
		 * so it counts once the input has been fed. */
		c->eof_held = true;
		return;
	}
	if (ao_framer_partial(&c->framer)) {
		io_conn_close_input(c, AO_CLOSE_TRUNCATED);
		return;
	}
	/* Packets already received still run and their replies go out. */
	io_conn_close_graceful(c, AO_CLOSE_EOF, io_linger_deadline(c));
}

void io_conn_close_input(struct ao_conn *c, enum ao_close_reason why)
{
	if (c->state >= CONN_CLOSING)
		return;
	/* Nothing after the bad input is looked at; what the handlers sent
	 * before it still goes out. */
	c->rx_stop = true;
	free_held(c);
	ao_framer_reset(&c->framer);
	io_conn_close_graceful(c, why, io_linger_deadline(c));
	/* Already draining: it may have waited for the input just dropped. */
	io_conn_check_drained(c);
}

void io_conn_close_abort(struct ao_conn *c, enum ao_close_reason why)
{
	if (c->state >= CONN_CLOSING)
		return;
	c->abort = true;
	io_conn_close_hard(c, why);
}

void io_conn_close_graceful(struct ao_conn *c, enum ao_close_reason why,
			    uint64_t deadline_ns)
{
	if (c->state != CONN_OPEN)
		return;
	c->state = CONN_DRAINING;
	c->reason = why;
	c->deadline_ns = deadline_ns;
	/* Replaces the idle timeout, if armed. */
	ao_timer_arm_at(&c->timer, deadline_ns);
	/* SEQ_CST: as in bp_update(): the last packet to finish posts a
	 * MB_RESUME, which checks whether the drain is complete. */
	__atomic_store_n(&c->rx_paused, 1, __ATOMIC_SEQ_CST);
	c->ring->be->rx_update(c->ring, c);
	io_conn_check_drained(c);
}

void io_conn_check_drained(struct ao_conn *c)
{
	if (c->state != CONN_DRAINING)
		return;
	if (__atomic_load_n(&c->backlog, __ATOMIC_SEQ_CST) || c->held)
		return;
	/* A WebSocket's close frame goes after everything the handlers
	 * sent, and its own send completion looks here again.  It does not
	 * wait for a send in flight (io_uring): while one is, sends from
	 * other threads would still get in ahead of it, and a sender that
	 * keeps the queue from emptying would hold it back to the
	 * deadline, then a reset without it. */
	if (c->ws && io_wsc_drain(c))
		return;
	if (c->send_busy)
		return;
	/* Refuse sends from now on, but only with the queue empty: a send
	 * that got in first (a kept handle on another thread) is sent, and
	 * its completion looks here again; one after is refused. */
	ao_spin_lock(&c->sq_lock);
	if (c->sq_head) {
		ao_spin_unlock(&c->sq_lock);
		return;
	}
	/* Release: as in io_conn_close_hard(). */
	__atomic_store_n(&c->closed, 1, __ATOMIC_RELEASE);
	ao_spin_unlock(&c->sq_lock);
	c->graceful = true;
	io_conn_close_hard(c, c->reason);
}

void io_conn_close_hard(struct ao_conn *c, enum ao_close_reason why)
{
	if (c->state >= CONN_CLOSING)
		return;
	if (c->state == CONN_OPEN)
		c->reason = why;
	c->state = CONN_CLOSING;
	ao_spin_lock(&c->sq_lock);
	/* Release: pairs with the acquire load in conn_send(); the re-check
	 * under sq_lock makes the refusal exact. */
	__atomic_store_n(&c->closed, 1, __ATOMIC_RELEASE);
	ao_spin_unlock(&c->sq_lock);
	free_held(c);
	ao_framer_reset(&c->framer);
	c->ring->be->close(c->ring, c);
}

static bool linger_done(struct ao_conn *c);

void io_conn_abandon(struct ao_conn *c)
{
	if (c->state == CONN_OPEN)
		c->reason = AO_CLOSE_SHUTDOWN;
	if (c->state < CONN_CLOSING) {
		c->state = CONN_CLOSING;
		ao_spin_lock(&c->sq_lock);
		/* Release: as in io_conn_close_hard(). */
		__atomic_store_n(&c->closed, 1, __ATOMIC_RELEASE);
		ao_spin_unlock(&c->sq_lock);
		free_held(c);
		ao_framer_reset(&c->framer);
	}
	/* Still lingering: what is not sent by now will not be. */
	if (c->state == CONN_LINGER && !linger_done(c))
		c->abort = true;
	c->send_busy = false;
	c->ops = 0;
	io_conn_finish(c);
}

/*
 * Read away what the peer sent, then say whether the socket can be closed
 * now: everything queued on it, the FIN included, has been sent (or the
 * peer reset it).  close() with unread input sends a reset, which drops
 * what the kernel has not sent yet; and data arriving after close() is
 * answered with one.  So a graceful close keeps the socket, reading it,
 * until nothing of its own is left unsent, and only then closes it: the
 * reset that may still follow comes after the last byte and the FIN, and
 * the peer reads both first.
 */
static bool linger_done(struct ao_conn *c)
{
	uint8_t scratch[4096];
	int unsent = 0;

	for (int i = 0; i < 64; i++) {
		ssize_t n = recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT);

		if (n > 0 || (n < 0 && errno == EINTR))
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return true; /* reset: nothing more can be sent */
		break;
	}
	if (ioctl(c->fd, SIOCOUTQNSD, &unsent) < 0)
		return true;
	return unsent == 0;
}

/* Look at a lingering socket again soon: 1 ms, then twice as long each
 * time up to IO_LINGER_POLL_MAX_NS, and at the deadline at the latest. */
static void linger_arm(struct ao_conn *c)
{
	uint64_t at = io_deadline_now(c->srv) + c->linger_step_ns;

	if (at > c->deadline_ns)
		at = c->deadline_ns;
	if (c->linger_step_ns < IO_LINGER_POLL_MAX_NS)
		c->linger_step_ns *= 2;
	ao_timer_arm_at(&c->timer, at);
}

/* Close the socket and queue on_close. */
static void conn_release(struct ao_conn *c)
{
	struct io_ring *r = c->ring;
	int err;

	c->state = CONN_CLOSED;
	/* No timer after this: a callback that is running finishes its
	 * post first (the mailbox's reference then keeps c). */
	ao_timer_cancel_sync(&c->timer);
	if (c->fd >= 0) {
		if (c->abort) {
			/* A reset: the peer learns at once, and the kernel
			 * keeps nothing of it (no FIN-WAIT-1 behind a zero
			 * window). */
			struct linger l = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
			IO_STAT_ADD(r, aborted, 1);
		}
		close(c->fd);
	}
	c->fd = -1;
	io_sendq_flush(c);
	/* Off the ring's list of live sockets. */
	if (c->prev)
		c->prev->next = c->next;
	else
		r->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	/* No on_open, no on_close (an HTTP request, an unfinished upgrade):
	 * only the ring's reference goes. */
	if (!c->opened) {
		ao_conn_put(c);
		return;
	}
	/* on_close after every packet: the ring's reference goes with it. */
	ao_work_init(&c->close_work, close_run);
	if (r->srv->ring_handlers) {
		close_run(&c->close_work);
		return;
	}
	err = io_ring_submit(c, &c->close_work);
	if (err < 0)
		close_run(&c->close_work);
}

void io_conn_finish(struct ao_conn *c)
{
	struct io_ring *r = c->ring;

	if (c->state == CONN_CLOSED)
		return;
	if (c->state == CONN_LINGER) {
		conn_release(c);
		return;
	}
	/* Counted before the peer can see the close. */
	IO_STAT_ADD(r, closes[c->reason], 1);
	IO_STAT_ADD(r, open, -1);
	if (c->counted)
		__atomic_fetch_sub(&r->srv->nconns, 1, __ATOMIC_RELAXED);
	c->counted = false;
	if (c->fd >= 0 && c->graceful && !c->abort) {
		/* The FIN goes after the last byte queued; the socket stays
		 * until they are sent (linger_done()), or the deadline. */
		shutdown(c->fd, SHUT_WR);
		if (!linger_done(c)) {
			c->state = CONN_LINGER;
			c->linger_step_ns = IO_LINGER_POLL_NS;
			linger_arm(c);
			return;
		}
	}
	conn_release(c);
}

/* ---- deadlines ---- */

/* On a worker: hand the deadline to the ring (see "Deadlines" in
 * io/server.c).  The ring cancels the timer before it lets c go. */
static void conn_timer_fn(struct ao_timer *t, const struct ao_timer_event *ev)
{
	(void)ev;
	io_conn_post(container_of(t, struct ao_conn, timer), MB_TIMER);
}

void io_conn_timer(struct ao_conn *c)
{
	uint64_t idle = c->srv->cfg.idle_timeout_ms * 1000000ull;
	uint64_t now = io_deadline_now(c->srv), next = UINT64_MAX;

	if (c->state == CONN_DRAINING) {
		/* Out of time (a peer that does not read, a handler that
		 * does not return): a reset, not a FIN behind what is left. */
		if (now >= c->deadline_ns)
			io_conn_close_abort(c, c->reason);
		else
			ao_timer_arm_at(&c->timer, c->deadline_ns);
		return;
	}
	if (c->state == CONN_LINGER) {
		if (linger_done(c)) {
			conn_release(c);
		} else if (now >= c->deadline_ns) {
			c->abort = true;
			conn_release(c);
		} else {
			linger_arm(c);
		}
		return;
	}
	if (c->state != CONN_OPEN)
		return;
	if (c->ws) {
		/* The request head's deadline, the ping and its pong. */
		next = io_wsc_timer(c, now);
		if (c->state != CONN_OPEN)
			return;
	}
	if (!idle) {
		/* nothing */
	} else if (!io_conn_rx_wanted(c)) {
		/* We stopped reading it (backpressure, or input held for
		 * want of buffers): its silence is ours, not the peer's, so
		 * its idle time starts again; look again in an eighth. */
		c->last_rx_ns = now;
		if (now + idle / 8 < next)
			next = now + idle / 8;
	} else if (now - c->last_rx_ns >= idle) {
		io_conn_close_hard(c, AO_CLOSE_IDLE);
		return;
	} else if (c->last_rx_ns + idle < next) {
		next = c->last_rx_ns + idle;
	}
	if (next != UINT64_MAX)
		ao_timer_arm_at(&c->timer, next);
}

/* ---- creation ---- */

struct ao_conn *io_conn_new(struct io_ring *r, int fd,
			    const union io_addr *peer, socklen_t peer_len)
{
	struct ao_server *srv = r->srv;
	struct ao_conn *c = aligned_alloc(AO_CACHELINE_SIZE, sizeof(*c));
	int err;

	if (!c)
		return NULL;
	memset(c, 0, sizeof(*c));
	c->refs = 1; /* the ring's, until on_close has run */
	ao_spin_init(&c->sq_lock);
	ao_strand_init(&c->strand, srv->exec);
	c->srv = srv;
	c->ring = r;
	c->fd = fd;
	c->id = __atomic_add_fetch(&srv->next_id, 1, __ATOMIC_RELAXED);
	if (peer && peer_len && peer_len <= sizeof(c->peer)) {
		memcpy(&c->peer, peer, peer_len);
		c->peer_len = peer_len;
	}
	c->state = CONN_OPEN;
	c->held_tail = &c->held;
	c->last_rx_ns = io_deadline_now(srv);
	ao_timer_init(&c->timer, srv->timers, conn_timer_fn);
	if (srv->cfg.idle_timeout_ms)
		ao_timer_arm_at(&c->timer,
				c->last_rx_ns +
					srv->cfg.idle_timeout_ms * 1000000ull);
	if (srv->cfg.framing.kind == AO_FRAME_WS) {
		/* Frames are io/http.c's; the byte framer is never fed. */
		struct ao_framing raw = { .kind = AO_FRAME_RAW };

		err = ao_framer_init(&c->framer, &raw, conn_alloc, conn_emit,
				     c);
	} else {
		err = ao_framer_init(&c->framer, &srv->cfg.framing, conn_alloc,
				     conn_emit, c);
	}
	if (!err && srv->http)
		err = io_wsc_new(c);
	if (err) {
		ao_timer_cancel_sync(&c->timer);
		free(c);
		return NULL;
	}
	c->next = r->conns;
	if (r->conns)
		r->conns->prev = c;
	r->conns = c;
	r->nalive++;
	/* HTTP: on_open once the connection is known to be a WebSocket or
	 * of the framing (io/http.c). */
	if (!c->ws)
		io_conn_open_handlers(c);
	return c;
}

void io_conn_open_handlers(struct ao_conn *c)
{
	struct ao_server *srv = c->srv;

	c->opened = true;
	/* Ring handlers: on_open now.  Its sends and closes are deferred
	 * (kick list, mailbox), so the backend may set the socket up after. */
	if (srv->ring_handlers) {
		if (srv->cfg.handlers.on_open)
			srv->cfg.handlers.on_open(c, srv->cfg.handlers.arg);
		return;
	}
	/* on_open first on the strand, before any packet. */
	ao_work_init(&c->open_work, open_run);
	ao_conn_get(c);
	if (io_ring_submit(c, &c->open_work) < 0)
		open_run(&c->open_work);
}

/* ---- the rest of the public API ---- */

int ao_conn_close(struct ao_conn *c)
{
	if (__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	io_conn_post(c, MB_CLOSE);
	return 0;
}

int ao_conn_close_slow(struct ao_conn *c)
{
	if (__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	io_conn_post(c, MB_SLOW);
	return 0;
}

bool ao_conn_is_open(const struct ao_conn *c)
{
	return !__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE);
}

uint64_t ao_conn_id(const struct ao_conn *c)
{
	return c->id;
}

struct ao_server *ao_conn_server(const struct ao_conn *c)
{
	return c->srv;
}

unsigned int ao_conn_ring(const struct ao_conn *c)
{
	return c->ring->index;
}

int ao_conn_peer_addr(const struct ao_conn *c, struct sockaddr *sa,
		      socklen_t *len)
{
	if (!c || !sa || !len)
		return -EINVAL;
	memcpy(sa, &c->peer, *len < c->peer_len ? *len : c->peer_len);
	*len = c->peer_len;
	return 0;
}

void ao_conn_peer(const struct ao_conn *c, struct sockaddr_in *sa)
{
	const struct in6_addr *a6 = &c->peer.in6.sin6_addr;

	memset(sa, 0, sizeof(*sa));
	if (c->peer.sa.sa_family == AF_INET) {
		*sa = c->peer.in;
	} else if (c->peer.sa.sa_family == AF_INET6 &&
		   IN6_IS_ADDR_V4MAPPED(a6)) {
		/* An IPv4 client of a dual-stack ("::") listener. */
		sa->sin_family = AF_INET;
		sa->sin_port = c->peer.in6.sin6_port;
		memcpy(&sa->sin_addr, &a6->s6_addr[12], 4);
	}
}

void *ao_conn_user(const struct ao_conn *c)
{
	return READ_ONCE(c->user);
}

void ao_conn_set_user(struct ao_conn *c, void *user)
{
	WRITE_ONCE(c->user, user);
}
