// SPDX-License-Identifier: MIT
/*
 * ao-load's io_uring engine: one ring per worker; every connection keeps
 * one recv in flight into its own buffer and at most one send of its
 * unsent requests (a sendmsg when they wrap around the end of its ring).
 * Each loop iteration submits what the last one queued and waits for
 * completions with one io_uring_enter.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <aorta/clock.h>
#include <aorta/config.h>
#include "load.h"

#if AO_CONFIG_URING
#include <liburing.h>

/* Can this process set up a ring?  (A kernel or a sandbox may say no.) */
int engine_uring_probe(void)
{
	struct io_uring ring;
	int r = io_uring_queue_init(2, &ring, 0);

	if (!r)
		io_uring_queue_exit(&ring);
	return r;
}

enum { OP_RECV, OP_SEND };

#define UD(idx, op) ((uint64_t)(idx) << 1 | (op))
#define MAX_ENTRIES 32768u

static size_t rx_len(const struct worker *w)
{
	size_t n = (size_t)w->ctx->o.pipeline * w->frame_len;

	return n < 4096 ? 4096 : n > 65536 ? 65536 : n;
}

static struct io_uring_sqe *get_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	return sqe;
}

static int arm_recv(struct worker *w, struct io_uring *ring, struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(ring);

	if (!sqe)
		return -1;
	io_uring_prep_recv(sqe, c->fd, c->rxbuf, rx_len(w), 0);
	io_uring_sqe_set_data64(sqe, UD(c->idx, OP_RECV));
	c->rx_busy = true;
	return 0;
}

static int arm_send(struct worker *w, struct io_uring *ring, struct conn *c)
{
	struct io_uring_sqe *sqe;
	int n = conn_unsent(w, c, c->iov);

	if (!n)
		return 0;
	sqe = get_sqe(ring);
	if (!sqe)
		return -1;
	if (n == 1) {
		/* The common case: send is cheaper than sendmsg. */
		io_uring_prep_send(sqe, c->fd, c->iov[0].iov_base,
				   c->iov[0].iov_len, MSG_NOSIGNAL);
	} else {
		memset(&c->msg, 0, sizeof(c->msg));
		c->msg.msg_iov = c->iov;
		c->msg.msg_iovlen = (size_t)n;
		io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	}
	io_uring_sqe_set_data64(sqe, UD(c->idx, OP_SEND));
	c->tx_busy = true;
	return 0;
}

static void ur_flush(struct worker *w, struct io_uring *ring)
{
	uint32_t i;

	for (i = 0; i < w->nflush; i++) {
		struct conn *c = w->flush[i];

		c->dirty = false;
		if (!c->dead && !c->tx_busy && arm_send(w, ring, c))
			conn_fail(w, c, ENOBUFS);
	}
	w->nflush = 0;
}

static void ur_complete(struct worker *w, struct io_uring *ring,
			struct io_uring_cqe *cqe, uint64_t now)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	struct conn *c = &w->conns[ud >> 1];
	int res = cqe->res;

	if ((ud & 1) == OP_SEND) {
		c->tx_busy = false;
		if (c->dead)
			return;
		if (res < 0 && res != -EINTR && res != -EAGAIN) {
			conn_fail(w, c, -res);
			return;
		}
		if (res > 0)
			conn_on_sent(w, c, (size_t)res);
		/* The rest of a short send, or requests queued meanwhile. */
		if (arm_send(w, ring, c))
			conn_fail(w, c, ENOBUFS);
		return;
	}
	c->rx_busy = false;
	if (c->dead)
		return;
	if (res > 0)
		conn_on_data(w, c, c->rxbuf, (size_t)res, now);
	else if (res == 0)
		conn_fail(w, c, 0);
	else if (res != -EINTR && res != -EAGAIN && res != -ENOBUFS)
		conn_fail(w, c, -res);
	if (!c->dead && arm_recv(w, ring, c))
		conn_fail(w, c, ENOBUFS);
}

static int ur_init(struct worker *w, struct io_uring *ring)
{
	static const unsigned int flag_sets[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
		IORING_SETUP_COOP_TASKRUN,
		0,
	};
	unsigned int entries = 64, i;
	int r = -EINVAL;

	while (entries < 2 * w->nconns + 16 && entries < MAX_ENTRIES)
		entries <<= 1;
	for (i = 0; i < sizeof(flag_sets) / sizeof(flag_sets[0]); i++) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		p.flags = flag_sets[i];
		r = io_uring_queue_init_params(entries, ring, &p);
		if (r != -EINVAL)
			break;
	}
	if (r)
		worker_error(w, "io_uring_queue_init: %s", strerror(-r));
	return r;
}

/*
 * The ring is set up before the load starts, with every worker's ring
 * alive at once: liburing maps and unmaps rings with raw system calls,
 * which ThreadSanitizer does not see, so a ring mapped where a finished
 * worker's ring was would look like a race on the old one.
 */
int engine_uring_setup(struct worker *w)
{
	struct io_uring *ring = calloc(1, sizeof(*ring));

	if (!ring) {
		worker_error(w, "out of memory");
		return -1;
	}
	if (ur_init(w, ring)) {
		free(ring);
		return -1;
	}
	w->ring = ring;
	return 0;
}

void engine_uring_free(struct worker *w)
{
	if (w->ring) {
		io_uring_queue_exit(w->ring);
		free(w->ring);
		w->ring = NULL;
	}
}

int engine_uring_run(struct worker *w)
{
	struct io_uring *ring = w->ring;
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts;
	uint64_t now, wait;
	unsigned int head, seen;
	uint32_t k;
	int r;

	if (!ring)
		return -1;
	now = ao_now_ns();
	for (k = 0; k < w->nconns; k++) {
		struct conn *c = &w->conns[k];
		int fl = fcntl(c->fd, F_GETFL);

		/* io_uring waits for us; a kernel that honours O_NONBLOCK
		 * would answer -EAGAIN and spin the loop instead. */
		if (fl >= 0)
			fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
		if (arm_recv(w, ring, c))
			conn_fail(w, c, ENOBUFS);
		conn_fill(w, c, now);
	}
	for (;;) {
		wait = worker_tick(w, now);
		if (!wait)
			break;
		ur_flush(w, ring);
		ts.tv_sec = (long long)(wait / 1000000000);
		ts.tv_nsec = (long long)(wait % 1000000000);
		r = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
		if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY) {
			worker_error(w, "io_uring_submit_and_wait: %s",
				     strerror(-r));
			break;
		}
		now = ao_now_ns();
		seen = 0;
		io_uring_for_each_cqe(ring, head, cqe)
		{
			ur_complete(w, ring, cqe, now);
			seen++;
		}
		io_uring_cq_advance(ring, seen);
	}
	engine_uring_free(w);
	return w->err[0] ? -1 : 0;
}

#else /* !AO_CONFIG_URING */

int engine_uring_probe(void)
{
	return -ENOSYS;
}

int engine_uring_setup(struct worker *w)
{
	worker_error(w, "this build has no io_uring engine");
	return -1;
}

void engine_uring_free(struct worker *w)
{
	(void)w;
}

int engine_uring_run(struct worker *w)
{
	worker_error(w, "this build has no io_uring engine");
	return -1;
}

#endif
