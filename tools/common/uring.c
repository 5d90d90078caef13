// SPDX-License-Identifier: MIT
/*
 * The io_uring engine: one ring per thread; every connection keeps one
 * recv in flight into its own buffer and at most one send of its unsent
 * bytes (a sendmsg when they wrap).  Each loop iteration submits what the
 * last one queued and waits for completions with one io_uring_enter.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <aorta/clock.h>
#include <aorta/config.h>
#include "engine.h"

#if AO_CONFIG_URING
#include <liburing-sparse.h> /* <liburing.h> */

/* Can this process set up a ring?  (A kernel or a sandbox may say no.) */
int eng_uring_probe(void)
{
	struct io_uring ring;
	int r = io_uring_queue_init(2, &ring, 0);

	if (!r)
		io_uring_queue_exit(&ring);
	return r;
}

enum { OP_RECV, OP_SEND };

/* A completion names its connection and operation (c is 4-aligned). */
#define UD(c, op) ((uint64_t)(uintptr_t)(c) | (op))
#define UD_CONN(ud) ((struct eng_conn *)(uintptr_t)((ud) & ~(uint64_t)1))
#define MAX_ENTRIES 32768u

static struct io_uring_sqe *get_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	return sqe;
}

static int arm_recv(struct eng *e, struct io_uring *ring, struct eng_conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(ring);

	if (!sqe)
		return -1;
	io_uring_prep_recv(sqe, c->fd, c->rxbuf, e->rxlen, 0);
	io_uring_sqe_set_data64(sqe, UD(c, OP_RECV));
	c->rx_busy = true;
	return 0;
}

static int arm_send(struct eng *e, struct io_uring *ring, struct eng_conn *c)
{
	struct io_uring_sqe *sqe;
	int n = e->ops->unsent(e, c, c->iov);

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
	io_uring_sqe_set_data64(sqe, UD(c, OP_SEND));
	c->tx_busy = true;
	return 0;
}

static void ur_flush(struct eng *e, struct io_uring *ring)
{
	uint32_t i;

	for (i = 0; i < e->nflush; i++) {
		struct eng_conn *c = e->flush[i];

		c->dirty = false;
		if (!c->dead && !c->tx_busy && arm_send(e, ring, c))
			e->ops->on_error(e, c, ENOBUFS);
	}
	e->nflush = 0;
}

static void ur_complete(struct eng *e, struct io_uring *ring,
			struct io_uring_cqe *cqe, uint64_t now)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	struct eng_conn *c = UD_CONN(ud);
	int res = cqe->res;

	if ((ud & 1) == OP_SEND) {
		c->tx_busy = false;
		if (c->dead)
			return;
		if (res < 0 && res != -EINTR && res != -EAGAIN) {
			e->ops->on_error(e, c, -res);
			return;
		}
		if (res > 0)
			e->ops->on_sent(e, c, (size_t)res);
		/* The rest of a short send, or bytes queued meanwhile. */
		if (!c->dead && arm_send(e, ring, c))
			e->ops->on_error(e, c, ENOBUFS);
		return;
	}
	c->rx_busy = false;
	if (c->dead)
		return;
	if (res > 0)
		e->ops->on_data(e, c, c->rxbuf, (size_t)res, now);
	else if (res == 0)
		e->ops->on_error(e, c, 0);
	else if (res != -EINTR && res != -EAGAIN && res != -ENOBUFS)
		e->ops->on_error(e, c, -res);
	if (!c->dead && !c->rx_off && arm_recv(e, ring, c))
		e->ops->on_error(e, c, ENOBUFS);
}

static int ur_init(struct eng *e, struct io_uring *ring)
{
	static const unsigned int flag_sets[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
		IORING_SETUP_COOP_TASKRUN,
		0,
	};
	unsigned int entries = 64, i;
	int r = -EINVAL;

	while (entries < 2 * e->max_conns + 16 && entries < MAX_ENTRIES)
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
		eng_error(e, "io_uring_queue_init: %s", strerror(-r));
	return r;
}

/*
 * The ring is set up before the load starts, with every thread's ring
 * alive at once: liburing maps and unmaps rings with raw system calls,
 * which ThreadSanitizer does not see, so a ring mapped where a finished
 * thread's ring was would look like a race on the old one.
 */
int eng_uring_setup(struct eng *e)
{
	struct io_uring *ring = calloc(1, sizeof(*ring));

	e->on_dead = NULL;
	if (!ring) {
		eng_error(e, "out of memory");
		return -1;
	}
	if (ur_init(e, ring)) {
		free(ring);
		return -1;
	}
	e->ring = ring;
	return 0;
}

void eng_uring_free(struct eng *e)
{
	if (e->ring) {
		io_uring_queue_exit(e->ring);
		free(e->ring);
		e->ring = NULL;
	}
}

int eng_uring_add(struct eng *e, struct eng_conn *c)
{
	int fl = fcntl(c->fd, F_GETFL);

	/* io_uring waits for us; a kernel that honours O_NONBLOCK would
	 * answer -EAGAIN and spin the loop instead. */
	if (fl >= 0)
		fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
	if (!e->ring || arm_recv(e, e->ring, c)) {
		errno = ENOBUFS;
		return -1;
	}
	return 0;
}

void eng_uring_rx(struct eng *e, struct eng_conn *c)
{
	/* Stopping lets the recv in flight finish and arms no other. */
	if (!c->rx_off && !c->rx_busy && arm_recv(e, e->ring, c))
		e->ops->on_error(e, c, ENOBUFS);
}

int eng_uring_run(struct eng *e)
{
	struct io_uring *ring = e->ring;
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts;
	uint64_t now, wait;
	unsigned int head, seen;
	int r;

	if (!ring)
		return -1;
	now = ao_now_ns();
	for (;;) {
		wait = e->ops->tick(e, now);
		if (!wait)
			break;
		ur_flush(e, ring);
		ts.tv_sec = (long long)(wait / 1000000000);
		ts.tv_nsec = (long long)(wait % 1000000000);
		r = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
		if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY) {
			eng_error(e, "io_uring_submit_and_wait: %s",
				  strerror(-r));
			break;
		}
		now = ao_now_ns();
		seen = 0;
		io_uring_for_each_cqe(ring, head, cqe)
		{
			ur_complete(e, ring, cqe, now);
			seen++;
		}
		io_uring_cq_advance(ring, seen);
	}
	return e->err[0] ? -1 : 0;
}

#else /* !AO_CONFIG_URING */

int eng_uring_probe(void)
{
	return -ENOSYS;
}

int eng_uring_setup(struct eng *e)
{
	eng_error(e, "this build has no io_uring engine");
	return -1;
}

void eng_uring_free(struct eng *e)
{
	(void)e;
}

int eng_uring_add(struct eng *e, struct eng_conn *c)
{
	(void)e;
	(void)c;
	errno = ENOSYS;
	return -1;
}

void eng_uring_rx(struct eng *e, struct eng_conn *c)
{
	(void)e;
	(void)c;
}

int eng_uring_run(struct eng *e)
{
	eng_error(e, "this build has no io_uring engine");
	return -1;
}

#endif
