// SPDX-License-Identifier: MIT
/*
 * The epoll backend: the same design as io_uring's on readiness events.
 * Level-triggered EPOLLIN on every socket that may receive (dropped while
 * paused or out of buffers), EPOLLOUT only while a send queue is blocked on
 * a full socket.  Receives read into a pool buffer, a burst at a time so
 * that one busy socket does not starve the others.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include "io_priv.h"

#define TAG_LISTEN 1u
#define TAG_WAKE 2u
#define EP_EVENTS 64

struct ep_ring {
	int epfd;
	bool listening; /* lfd in the interest set */
	struct epoll_event ev[EP_EVENTS];
};

static struct ep_ring *ep(struct io_ring *r)
{
	return r->be_priv;
}

static int ep_init(struct io_ring *r)
{
	struct ep_ring *e = calloc(1, sizeof(*e));
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG_WAKE };

	if (!e)
		return -ENOMEM;
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (e->epfd < 0 || epoll_ctl(e->epfd, EPOLL_CTL_ADD, r->efd, &ev) < 0) {
		int err = -errno;

		if (e->epfd >= 0)
			close(e->epfd);
		free(e);
		return err;
	}
	r->be_priv = e;
	r->srv->ring_flags = 0;
	return 0;
}

static void ep_fini(struct io_ring *r)
{
	struct ep_ring *e = ep(r);

	close(e->epfd);
	free(e);
	r->be_priv = NULL;
}

static void ep_accept_start(struct io_ring *r)
{
	struct ep_ring *e = ep(r);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG_LISTEN };

	if (!e->listening &&
	    epoll_ctl(e->epfd, EPOLL_CTL_ADD, r->lfd, &ev) == 0)
		e->listening = true;
}

static void ep_accept_stop(struct io_ring *r)
{
	struct ep_ring *e = ep(r);

	if (e->listening)
		epoll_ctl(e->epfd, EPOLL_CTL_DEL, r->lfd, NULL);
	e->listening = false;
}

/* Make the interest set match what the connection wants. */
static void ep_update(struct io_ring *r, struct ao_conn *c, bool want_out)
{
	bool want_in = io_conn_rx_wanted(c) && !c->rx_nobufs;
	struct epoll_event ev = { .data.ptr = c };

	if (c->state >= CONN_CLOSING ||
	    (want_in == c->ep_in && want_out == c->ep_out))
		return;
	ev.events = (want_in ? EPOLLIN : 0) | (want_out ? EPOLLOUT : 0);
	if (epoll_ctl(ep(r)->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0) {
		c->ep_in = want_in;
		c->ep_out = want_out;
	}
}

static void ep_conn_open(struct io_ring *r, struct ao_conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

	if (epoll_ctl(ep(r)->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
		io_conn_close_hard(c, AO_CLOSE_NOMEM);
		return;
	}
	c->ep_in = true;
}

static void ep_rx_update(struct io_ring *r, struct ao_conn *c)
{
	ep_update(r, c, c->ep_out);
}

static void ep_send(struct io_ring *r, struct ao_conn *c)
{
	uint32_t n = io_conn_fill_iov(c);

	for (;;) {
		ssize_t w;

		if (!n) {
			ep_update(r, c, false);
			io_conn_check_drained(c);
			return;
		}
		/* One buffer (the common case): send(), with no iovec for
		 * the kernel to copy in. */
		if (n == 1) {
			w = send(c->fd, c->iov[0].iov_base, c->iov[0].iov_len,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		} else {
			c->msg.msg_iov = c->iov;
			c->msg.msg_iovlen = n;
			w = sendmsg(c->fd, &c->msg,
				    MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		if (w > 0) {
			n = io_conn_sent(c, (size_t)w); /* and what is next */
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			ep_update(r, c, true);
			return;
		}
		io_conn_close_hard(c, AO_CLOSE_RESET);
		return;
	}
}

static void ep_send_kick(struct io_ring *r, struct ao_conn *c)
{
	/* While EPOLLOUT is armed the socket is full: wait for it. */
	if (c->state >= CONN_CLOSING || c->ep_out)
		return;
	ep_send(r, c);
}

static void ep_read(struct io_ring *r, struct ao_conn *c)
{
	for (int i = 0; i < IO_RX_BURST && io_conn_rx_wanted(c); i++) {
		struct ao_buf *b = ao_buf_get(r->srv->pool);
		ssize_t n;

		if (!b) {
			IO_STAT_ADD(r, enobufs, 1);
			c->rx_nobufs = true;
			r->nnobufs++;
			ep_update(r, c, c->ep_out);
			return;
		}
		/* rx_len: with raw framing a read may not pass max_packet. */
		size_t cap = r->srv->rx_len;

		n = read(c->fd, b->data, cap);
		if (n > 0) {
			/* The conn takes its own reference if it keeps b. */
			io_conn_input(c, b, (uint32_t)n);
			ao_buf_put(b);
			if ((size_t)n < cap)
				return; /* drained, most likely */
			continue;
		}
		ao_buf_put(b);
		if (n == 0) {
			io_conn_eof(c);
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			io_conn_close_hard(c, AO_CLOSE_RESET);
		return;
	}
}

static void ep_accept(struct io_ring *r)
{
	for (int i = 0; i < 64 && r->accepting; i++) {
		int fd = accept4(r->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			io_ring_accepted(r, fd);
			continue;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		if (!io_ring_accept_error(r, errno)) {
			/* Back off: the ring re-adds lfd after a pause. */
			ep_accept_stop(r);
			return;
		}
	}
}

static void ep_wait(struct io_ring *r, int64_t timeout_ns)
{
	struct ep_ring *e = ep(r);
	int ms = timeout_ns < 0 ? -1 : (int)((timeout_ns + 999999) / 1000000);
	int n = epoll_wait(e->epfd, e->ev, EP_EVENTS, ms);

	io_ring_clock(r);

	for (int i = 0; i < n; i++) {
		uint64_t tag = e->ev[i].data.u64;
		uint32_t evs = e->ev[i].events;
		struct ao_conn *c;

		if (tag == TAG_WAKE) {
			uint64_t v;

			if (read(r->efd, &v, sizeof(v)) < 0)
				continue;
			continue;
		}
		if (tag == TAG_LISTEN) {
			ep_accept(r);
			continue;
		}
		/* A conn closed earlier in this batch is still allocated
		 * (only the ring frees, later); its state says to skip. */
		c = e->ev[i].data.ptr;
		if (c->state < CONN_CLOSING &&
		    (evs & (EPOLLIN | EPOLLHUP | EPOLLERR)) && c->ep_in)
			ep_read(r, c);
		if (c->state < CONN_CLOSING && (evs & EPOLLOUT))
			ep_send(r, c);
		if (c->state < CONN_CLOSING && (evs & (EPOLLHUP | EPOLLERR)) &&
		    !c->ep_in && !(evs & EPOLLOUT))
			io_conn_close_hard(c, AO_CLOSE_RESET);
	}
	/* Sends ring handlers queued during this batch. */
	io_ring_flush_kicks(r);
}

static void ep_close(struct io_ring *r, struct ao_conn *c)
{
	if (c->rx_nobufs) {
		c->rx_nobufs = false;
		r->nnobufs--;
	}
	/* Nothing is in flight: closing the fd drops it from the set. */
	epoll_ctl(ep(r)->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	io_conn_finish(c);
}

static void ep_refill(struct io_ring *r)
{
	struct ao_bufpool_stats st;
	struct ao_conn *c;

	if (!r->nnobufs)
		return;
	ao_bufpool_stats(r->srv->pool, &st);
	if (!st.sum.nfree)
		return;
	for (c = r->conns; c && r->nnobufs; c = c->next) {
		if (!c->rx_nobufs)
			continue;
		c->rx_nobufs = false;
		r->nnobufs--;
		ep_update(r, c, c->ep_out);
	}
}

const struct io_backend io_epoll_backend = {
	.name = "epoll",
	.kind = AO_IO_EPOLL,
	.init = ep_init,
	.fini = ep_fini,
	.wait = ep_wait,
	.accept_start = ep_accept_start,
	.accept_stop = ep_accept_stop,
	.conn_open = ep_conn_open,
	.rx_update = ep_rx_update,
	.send_kick = ep_send_kick,
	.close = ep_close,
	.refill = ep_refill,
};
