// SPDX-License-Identifier: MIT
/*
 * The io_uring backend (built when liburing links: CONFIG_URING).  See the
 * top of io/server.c for the design; the liburing 2.3 specifics are here:
 *
 *  - no io_uring_setup_buf_ring() (2.4): the buffer ring is mmap()ed,
 *    initialised and registered by hand;
 *  - io_uring_buf_ring_cq_advance() publishes the tail with a plain store
 *    and ties the CQ count to the buffer count: never used.  Buffers are
 *    published with io_uring_buf_ring_advance() (a store release, which
 *    pairs with the kernel's acquire of the tail) and the CQ is advanced on
 *    its own;
 *  - setup flags newer than the headers would be defined behind #ifndef;
 *    the ones used here (SINGLE_ISSUER, DEFER_TASKRUN, COOP_TASKRUN,
 *    SUBMIT_ALL) are all in 2.3, and whether the kernel takes them is
 *    found out at run time (EINVAL: try the next set).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <liburing-sparse.h> /* <liburing.h> */
#include "io_priv.h"

#ifndef IORING_SETUP_SINGLE_ISSUER
#define IORING_SETUP_SINGLE_ISSUER (1U << 12)
#endif
#ifndef IORING_SETUP_DEFER_TASKRUN
#define IORING_SETUP_DEFER_TASKRUN (1U << 13)
#endif
#ifndef IORING_SETUP_COOP_TASKRUN
#define IORING_SETUP_COOP_TASKRUN (1U << 8)
#endif
#ifndef IORING_SETUP_SUBMIT_ALL
#define IORING_SETUP_SUBMIT_ALL (1U << 7)
#endif
#ifndef IORING_TIMEOUT_MULTISHOT
#define IORING_TIMEOUT_MULTISHOT (1U << 6) /* 6.4 */
#endif
#ifndef IORING_CQE_BUFFER_SHIFT
#define IORING_CQE_BUFFER_SHIFT 16
#endif

#define BGID 0 /* one buffer group per ring */

/* user_data: a pointer (64-byte aligned) with the operation in the low
 * bits, or a bare tag. */
enum {
	UD_ACCEPT = 1, /* ring */
	UD_RECV = 2, /* conn */
	UD_SEND = 3, /* conn */
	UD_WAKE = 4, /* ring: read of the eventfd */
	UD_CANCEL = 5, /* no pointer: the CQE of a cancel request */
};
#define UD_MASK 7ull

struct ur_ring {
	struct io_uring ring;
	struct io_uring_buf_ring *br;
	size_t br_len;
	uint32_t nbufs;
	int mask;
	int pending; /* buffers added but not yet published */
	struct ao_buf **slot; /* slot[bid]: the buffer lent under bid */
	uint16_t *missing; /* bids with no buffer */
	uint32_t nmissing;
	uint32_t target; /* buffers to keep lent to the kernel */
	uint32_t rx_len; /* bytes of each lent buffer the kernel may fill */
	bool accept_armed;
	uint64_t efd_val;
};

static const unsigned int setup_sets[] = {
	IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
	IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
	IORING_SETUP_COOP_TASKRUN,
	0,
};

static struct ur_ring *ur(struct io_ring *r)
{
	return r->be_priv;
}

static uint64_t ud(const void *p, unsigned int op)
{
	return (uint64_t)(uintptr_t)p | op;
}

/* An SQE, submitting what is queued if the SQ is full. */
static struct io_uring_sqe *get_sqe(struct ur_ring *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	while (!sqe) {
		io_uring_submit(&u->ring);
		sqe = io_uring_get_sqe(&u->ring);
	}
	return sqe;
}

/* ---- the provided-buffer ring ---- */

static void buf_add(struct ur_ring *u, uint16_t bid, struct ao_buf *b)
{
	u->slot[bid] = b;
	/* rx_len: with raw framing a receive may not pass max_packet. */
	io_uring_buf_ring_add(u->br, b->data, u->rx_len, bid, u->mask,
			      u->pending++);
}

static void buf_publish(struct ur_ring *u)
{
	if (!u->pending)
		return;
	/* Store release of the tail: the entries written by buf_add() are
	 * visible before the kernel sees the new tail (its acquire load). */
	io_uring_buf_ring_advance(u->br, u->pending);
	u->pending = 0;
}

/* Give bid a buffer again: b itself if nobody kept it, else a fresh one. */
static void buf_recycle(struct io_ring *r, uint16_t bid, struct ao_buf *b,
			bool kept)
{
	struct ur_ring *u = ur(r);

	if (!kept) {
		buf_add(u, bid, b);
		return;
	}
	ao_buf_put(b); /* the ring's reference; the conn holds its own */
	b = ao_buf_get(r->srv->pool);
	if (b)
		buf_add(u, bid, b);
	else
		u->missing[u->nmissing++] = bid;
}

static void buf_refill(struct io_ring *r)
{
	struct ur_ring *u = ur(r);

	while (u->nmissing && u->nbufs - u->nmissing < u->target) {
		struct ao_buf *b = ao_buf_get(r->srv->pool);

		if (!b)
			break;
		buf_add(u, u->missing[--u->nmissing], b);
	}
}

static int bufring_setup(struct io_ring *r)
{
	struct ur_ring *u = ur(r);
	struct io_uring_buf_reg reg;
	struct ao_bufpool_info info;
	long page = sysconf(_SC_PAGESIZE);
	int err;

	u->nbufs = r->srv->cfg.ring_buffers;
	u->rx_len = r->srv->rx_len;
	u->mask = io_uring_buf_ring_mask(u->nbufs);
	/* The rings together keep at most half the pool: with every buffer
	 * lent to the kernel, the framer would wait for one forever. */
	ao_bufpool_info(r->srv->pool, &info);
	u->target = info.count / (2 * r->srv->cfg.rings);
	if (u->target > u->nbufs)
		u->target = u->nbufs;
	if (!u->target)
		u->target = 1;
	u->br_len =
		(u->nbufs * sizeof(struct io_uring_buf) + (size_t)page - 1) &
		~((size_t)page - 1);
	u->br = mmap(NULL, u->br_len, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (u->br == MAP_FAILED) {
		u->br = NULL;
		return -ENOMEM;
	}
	io_uring_buf_ring_init(u->br);
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)u->br;
	reg.ring_entries = u->nbufs;
	reg.bgid = BGID;
	err = io_uring_register_buf_ring(&u->ring, &reg, 0);
	if (err)
		return err;
	u->slot = calloc(u->nbufs, sizeof(*u->slot));
	u->missing = calloc(u->nbufs, sizeof(*u->missing));
	if (!u->slot || !u->missing)
		return -ENOMEM;
	for (uint32_t i = 0; i < u->nbufs; i++)
		u->missing[u->nmissing++] = (uint16_t)(u->nbufs - 1 - i);
	buf_refill(r);
	buf_publish(u);
	return 0;
}

/* ---- setup ---- */

static int ring_setup(struct io_uring *ring, unsigned int entries,
		      unsigned int *flags)
{
	int err = -EINVAL;

	for (size_t i = 0; i < ARRAY_SIZE(setup_sets); i++) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		p.flags = setup_sets[i] | IORING_SETUP_SUBMIT_ALL |
			  IORING_SETUP_CQSIZE;
		/* Multishot receives post many CQEs per SQE: a roomy CQ. */
		p.cq_entries = entries * 8 < 4096 ? 4096 : entries * 8;
		err = io_uring_queue_init_params(entries, ring, &p);
		if (err != -EINVAL) {
			if (!err)
				*flags = p.flags;
			return err;
		}
	}
	return err;
}

int io_ur_probe(void)
{
	struct io_uring ring;
	struct io_uring_params p;
	struct io_uring_buf_reg reg;
	void *br;
	int err;

	/* SINGLE_ISSUER came in 6.0, with multishot recv: a kernel that
	 * refuses it lacks what the backend needs. */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER;
	err = io_uring_queue_init_params(4, &ring, &p);
	if (err)
		return err == -EINVAL ? -EOPNOTSUPP : err;
	br = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (br == MAP_FAILED) {
		io_uring_queue_exit(&ring);
		return -ENOMEM;
	}
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)br;
	reg.ring_entries = 1;
	reg.bgid = 0;
	err = io_uring_register_buf_ring(&ring, &reg, 0);
	if (!err)
		io_uring_unregister_buf_ring(&ring, 0);
	io_uring_queue_exit(&ring);
	munmap(br, 4096);
	return err == -EINVAL ? -EOPNOTSUPP : err;
}

static void arm_wake(struct io_ring *r)
{
	struct ur_ring *u = ur(r);
	struct io_uring_sqe *sqe = get_sqe(u);

	io_uring_prep_read(sqe, r->efd, &u->efd_val, sizeof(u->efd_val), 0);
	io_uring_sqe_set_data64(sqe, ud(r, UD_WAKE));
}

static void ur_fini(struct io_ring *r);

static int ur_init(struct io_ring *r)
{
	struct ur_ring *u = calloc(1, sizeof(*u));
	unsigned int flags = 0;
	int err;

	if (!u)
		return -ENOMEM;
	r->be_priv = u;
	/* On the ring's own thread: SINGLE_ISSUER ties the ring to it. */
	err = ring_setup(&u->ring, r->srv->cfg.ring_entries, &flags);
	if (err) {
		free(u);
		r->be_priv = NULL;
		return err;
	}
	r->srv->ring_flags = flags;
	/* Each io_uring_enter() then skips the fd lookup; optional (5.18),
	 * so a failure only costs that. */
	io_uring_register_ring_fd(&u->ring);
	err = bufring_setup(r);
	if (err) {
		ur_fini(r);
		return err;
	}
	arm_wake(r);
	return 0;
}

static void ur_fini(struct io_ring *r)
{
	struct ur_ring *u = ur(r);

	if (!u)
		return;
	/* Wait (briefly) for the multishot accept to end.  Left to the
	 * ring's teardown, which the kernel finishes after the process is
	 * gone, it keeps the listening socket alive a moment after exit: a
	 * client could connect, then be reset.  Other completions are
	 * dropped: the buffers they used are still in slot[]. */
	for (int i = 0; u->accept_armed && i < 100; i++) {
		struct __kernel_timespec ts = { .tv_nsec = 1000000 };
		struct io_uring_cqe *cqe;
		unsigned int head, count = 0;

		io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts, NULL);
		io_uring_for_each_cqe(&u->ring, head, cqe)
		{
			uint64_t data = io_uring_cqe_get_data64(cqe);

			if ((data & UD_MASK) == UD_ACCEPT &&
			    !(cqe->flags & IORING_CQE_F_MORE))
				u->accept_armed = false;
			count++;
		}
		io_uring_cq_advance(&u->ring, count);
	}
	/* After the exit the kernel holds no buffer: give them back. */
	io_uring_queue_exit(&u->ring);
	if (u->slot)
		for (uint32_t i = 0; i < u->nbufs; i++)
			if (u->slot[i])
				ao_buf_put(u->slot[i]);
	if (u->br)
		munmap(u->br, u->br_len);
	free(u->slot);
	free(u->missing);
	free(u);
	r->be_priv = NULL;
}

/* ---- accept ---- */

static void ur_accept_start(struct io_ring *r)
{
	struct ur_ring *u = ur(r);
	struct io_uring_sqe *sqe;

	if (u->accept_armed || r->accept_retry_ns)
		return;
	sqe = get_sqe(u);
	io_uring_prep_multishot_accept(sqe, r->lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, ud(r, UD_ACCEPT));
	u->accept_armed = true;
}

static void cancel(struct ur_ring *u, uint64_t target)
{
	struct io_uring_sqe *sqe = get_sqe(u);

	io_uring_prep_cancel64(sqe, target, 0);
	io_uring_sqe_set_data64(sqe, UD_CANCEL);
}

static void ur_accept_stop(struct io_ring *r)
{
	struct ur_ring *u = ur(r);

	if (u->accept_armed)
		cancel(u, ud(r, UD_ACCEPT));
}

static void on_accept(struct io_ring *r, struct io_uring_cqe *cqe)
{
	struct ur_ring *u = ur(r);
	bool more = cqe->flags & IORING_CQE_F_MORE;

	if (!more)
		u->accept_armed = false;
	if (cqe->res >= 0) {
		io_ring_accepted(r, cqe->res);
	} else if (cqe->res != -ECANCELED &&
		   !io_ring_accept_error(r, -cqe->res) && more) {
		/* Backing off: stop this multishot, re-arm later. */
		cancel(u, ud(r, UD_ACCEPT));
	}
	if (!u->accept_armed && r->accepting)
		ur_accept_start(r);
}

/* ---- receive ---- */

static void ur_rx_update(struct io_ring *r, struct ao_conn *c)
{
	struct ur_ring *u = ur(r);
	bool want = io_conn_rx_wanted(c) && !c->rx_nobufs;
	struct io_uring_sqe *sqe;

	if (c->state >= CONN_CLOSING)
		return;
	if (want && !c->recv_armed) {
		sqe = get_sqe(u);
		io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = BGID;
		io_uring_sqe_set_data64(sqe, ud(c, UD_RECV));
		c->recv_armed = true;
		c->recv_cancelled = false;
		c->ops++;
	} else if (!want && c->recv_armed && !c->recv_cancelled) {
		/* Backpressure or drain: end the multishot.  CQEs already on
		 * their way are still handled (nothing is dropped). */
		cancel(u, ud(c, UD_RECV));
		c->recv_cancelled = true;
	}
}

static void op_done(struct ao_conn *c)
{
	c->ops--;
	if (c->state == CONN_CLOSING && c->ops == 0)
		io_conn_finish(c);
}

static void on_recv(struct io_ring *r, struct ao_conn *c,
		    struct io_uring_cqe *cqe)
{
	struct ur_ring *u = ur(r);
	bool more = cqe->flags & IORING_CQE_F_MORE;
	int res = cqe->res;

	if (cqe->flags & IORING_CQE_F_BUFFER) {
		uint16_t bid =
			(uint16_t)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
		struct ao_buf *b = u->slot[bid];
		bool kept = false;

		u->slot[bid] = NULL;
		if (res > 0)
			kept = io_conn_input(c, b, (uint32_t)res);
		buf_recycle(r, bid, b, kept);
	}
	if (!more) {
		c->recv_armed = false;
		c->recv_cancelled = false;
	}
	if (res == 0 && c->state < CONN_CLOSING) {
		io_conn_eof(c);
	} else if (res == -ENOBUFS) {
		/* The buffer ring ran dry: count it, and re-arm once it has
		 * buffers again (now, unless the pool is empty too). */
		IO_STAT_ADD(r, enobufs, 1);
		buf_refill(r);
		if (u->nmissing == u->nbufs && !c->rx_nobufs) {
			c->rx_nobufs = true;
			r->nnobufs++;
		}
	} else if (res < 0 && res != -ECANCELED && c->state < CONN_CLOSING) {
		io_conn_close_hard(c, AO_CLOSE_RESET);
	}
	if (!more) {
		if (c->state < CONN_CLOSING)
			ur_rx_update(r, c);
		op_done(c);
	}
}

static void ur_conn_open(struct io_ring *r, struct ao_conn *c)
{
	ur_rx_update(r, c);
}

static void ur_refill(struct io_ring *r)
{
	struct ur_ring *u = ur(r);
	struct ao_conn *c;

	buf_refill(r);
	if (!r->nnobufs || u->nmissing == u->nbufs)
		return;
	for (c = r->conns; c && r->nnobufs; c = c->next) {
		if (!c->rx_nobufs)
			continue;
		c->rx_nobufs = false;
		r->nnobufs--;
		ur_rx_update(r, c);
	}
}

/* ---- send ---- */

/* Send the n entries of c->iov: a plain send for one (the common case:
 * no msghdr for the kernel to copy in), sendmsg for more. */
static void ur_send_issue(struct io_ring *r, struct ao_conn *c, uint32_t n)
{
	struct io_uring_sqe *sqe = get_sqe(ur(r));

	if (n == 1) {
		io_uring_prep_send(sqe, c->fd, c->iov[0].iov_base,
				   c->iov[0].iov_len, MSG_NOSIGNAL);
	} else {
		c->msg.msg_iov = c->iov;
		c->msg.msg_iovlen = n;
		io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	}
	io_uring_sqe_set_data64(sqe, ud(c, UD_SEND));
	c->send_busy = true;
	c->ops++;
}

static void ur_send_kick(struct io_ring *r, struct ao_conn *c)
{
	uint32_t n;

	if (c->send_busy || c->state >= CONN_CLOSING)
		return;
	n = io_conn_fill_iov(c);
	if (n)
		ur_send_issue(r, c, n);
}

static void on_send(struct io_ring *r, struct ao_conn *c, int res)
{
	c->send_busy = false;
	if (res > 0 && c->state < CONN_CLOSING) {
		/* What is left (a short send continues from where it
		 * stopped), with the same lock hold. */
		uint32_t n = io_conn_sent(c, (size_t)res);

		if (n)
			ur_send_issue(r, c, n);
	} else if (res < 0 && res != -EINTR && res != -EAGAIN &&
		   c->state < CONN_CLOSING) {
		io_conn_close_hard(c, AO_CLOSE_RESET);
	} else {
		ur_send_kick(r, c);
	}
	if (c->state < CONN_CLOSING)
		io_conn_check_drained(c);
	op_done(c);
}

/* ---- close ---- */

static void ur_close(struct io_ring *r, struct ao_conn *c)
{
	if (c->rx_nobufs) {
		c->rx_nobufs = false;
		r->nnobufs--;
	}
	if (c->recv_armed && !c->recv_cancelled) {
		cancel(ur(r), ud(c, UD_RECV));
		c->recv_cancelled = true;
	}
	if (c->abort) {
		struct sockaddr sa = { .sa_family = AF_UNSPEC };

		/* The reset now, with no FIN before it: connect(AF_UNSPEC)
		 * is tcp_disconnect(), which sends it, drops both queues and
		 * wakes every operation out on the socket with an error.
		 * The kernel refuses it while a thread sleeps in the socket
		 * (a send io_uring handed to an io-wq worker, waiting for
		 * room: a cancel does not reliably end it): then SHUT_RDWR
		 * fails that send, its FIN queues behind the unsent bytes it
		 * waits on, and the reset at close() drops both. */
		if (connect(c->fd, &sa, sizeof(sa)) < 0)
			shutdown(c->fd, SHUT_RDWR);
	} else {
		/* Hard: wakes a pending recv (EOF) and fails a pending send
		 * (EPIPE).  Graceful: nothing is pending but a cancelled
		 * recv; just the FIN after the last reply. */
		shutdown(c->fd, c->graceful ? SHUT_WR : SHUT_RDWR);
	}
	if (c->ops == 0)
		io_conn_finish(c);
}

/* ---- the loop ---- */

static void handle_cqe(struct io_ring *r, struct io_uring_cqe *cqe)
{
	uint64_t data = io_uring_cqe_get_data64(cqe);
	void *p = (void *)(uintptr_t)(data & ~UD_MASK);

	switch (data & UD_MASK) {
	case UD_ACCEPT:
		on_accept(r, cqe);
		break;
	case UD_RECV:
		on_recv(r, p, cqe);
		break;
	case UD_SEND:
		on_send(r, p, cqe->res);
		break;
	case UD_WAKE:
		/* The eventfd is blocking, so the read completes only when a
		 * poster wrote: re-arm for the next one. */
		arm_wake(r);
		break;
	default:
		break;
	}
}

static void ur_wait(struct io_ring *r, int64_t timeout_ns)
{
	struct ur_ring *u = ur(r);
	struct io_uring_cqe *cqe;
	unsigned int head, count = 0;
	int err;

	if (u->nmissing)
		buf_refill(r);
	buf_publish(u);
	if (timeout_ns == 0) {
		/* Enter with GETEVENTS: with DEFER_TASKRUN completions are only
		 * posted when the issuer asks. */
		io_uring_submit_and_get_events(&u->ring);
	} else if (timeout_ns < 0) {
		err = io_uring_submit_and_wait(&u->ring, 1);
		(void)err;
	} else {
		struct __kernel_timespec ts = {
			.tv_sec = timeout_ns / 1000000000,
			.tv_nsec = timeout_ns % 1000000000,
		};

		err = io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts,
						       NULL);
		(void)err; /* -ETIME, -EINTR: look at the CQ anyway */
	}
	io_ring_clock(r);
	io_uring_for_each_cqe(&u->ring, head, cqe)
	{
		handle_cqe(r, cqe);
		count++;
	}
	/* The CQ alone (not io_uring_buf_ring_cq_advance(): see the top). */
	io_uring_cq_advance(&u->ring, count);
	/* Sends ring handlers queued.  Not submitted here: the ring's next
	 * wait submits them with everything else the loop queues, in the
	 * same io_uring_enter() that waits (one system call per loop; the
	 * ring runs no other code that could block in between). */
	io_ring_flush_kicks(r);
	buf_publish(u);
}

const struct io_backend io_uring_backend = {
	.name = "io_uring",
	.kind = AO_IO_URING,
	.init = ur_init,
	.fini = ur_fini,
	.wait = ur_wait,
	.accept_start = ur_accept_start,
	.accept_stop = ur_accept_stop,
	.conn_open = ur_conn_open,
	.rx_update = ur_rx_update,
	.send_kick = ur_send_kick,
	.close = ur_close,
	.refill = ur_refill,
};
