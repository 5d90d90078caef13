// SPDX-License-Identifier: MIT
/*
 * The io layer: TCP in, packets to strands, replies out.
 *
 * Threads.  Each ring is one thread that owns one listening socket (with
 * SO_REUSEPORT when there are several rings), one io_uring or epoll
 * instance, and every connection it accepted.  Only that thread touches the
 * sockets, the ring, the framers and the connection lists, so none of it is
 * locked.  Handlers run on the executor's workers; each connection has a
 * strand, so on_open, its packets and on_close run in order and one at a
 * time while sessions run in parallel.
 *
 * The io_uring path (io/uring.c).  The ring is created on its own thread
 * with SINGLE_ISSUER|DEFER_TASKRUN, else SINGLE_ISSUER|COOP_TASKRUN, else
 * COOP_TASKRUN, else nothing (each tried at run time; EINVAL means the
 * kernel lacks it).  A multishot accept takes connections, re-armed when a
 * CQE comes without IORING_CQE_F_MORE.  Each connection has one multishot
 * recv selecting from the ring's provided-buffer ring, whose entries are
 * buffers from the buffer pool; slot bid holds the buffer lent to the
 * kernel under that id (bids are 16 bits, pool indices are not).  liburing
 * 2.3 has no io_uring_setup_buf_ring(), so the ring is mmap()ed and
 * registered here, and its io_uring_buf_ring_cq_advance() bumps the tail
 * with a plain store: we publish with io_uring_buf_ring_advance() (a store
 * release) and advance the CQ separately.  ENOBUFS (the buffer ring ran
 * dry) ends the multishot: it is counted, the ring is refilled from the
 * pool and the recv re-armed; while the pool itself is empty the recv
 * stays down and the ring retries every millisecond.  Never fatal.  The
 * buffer rings together keep at most half the pool lent to the kernel, so
 * the framer always has buffers to stitch packets into.  Each turn of the
 * ring's loop makes one io_uring_enter(): what handling a batch of CQEs
 * queued (the sends started from the receives and from finished sends,
 * re-armed receives) is submitted by the next wait, and the ring fd is
 * registered (io_uring_register_ring_fd()) so the enter skips the fd
 * lookup.  The clock is read once per batch, not per receive.  A wait
 * has no timeout of its own (no kernel timer armed each time the ring
 * sleeps) unless something is due on the ring itself (a starved retry,
 * an accept back-off, the end of a stop).
 *
 * The epoll path (io/epoll.c) is the same design with readiness: level-
 * triggered EPOLLIN, read() into a pool buffer, writev() for the send
 * queue with EPOLLOUT while the socket is full.  It runs where io_uring
 * cannot be set up (ENOSYS, EPERM under seccomp, io_uring_disabled, a
 * kernel without multishot recv), or when forced by the config or by
 * AO_IO_BACKEND=epoll.  The server logs which backend it runs.
 *
 * Buffer lifecycle.  A receive lands in a pool buffer.  With raw framing
 * that buffer is the packet (no copy; a receive takes at most max_packet
 * bytes, fewer than the buffer holds when max_packet is below the pool's
 * 2048-byte minimum): the handler gets it, sends may take
 * more references, and the last ao_buf_put() returns it to the pool; the
 * ring refills the provided-buffer slot with a fresh buffer.  With a length
 * prefix the framer copies each payload into its own pool buffer (so a
 * packet split over receives is stitched into one buffer, and a packet
 * never pins the receive buffer it came in), and the receive buffer goes
 * straight back to the kernel.  A send takes a reference on the buffer and
 * drops it when the bytes are on the wire, so a broadcast shares one
 * buffer.  If the pool is empty mid-stream, the unframed rest of the
 * receive is held (copied: the receive buffer goes back, see hold() in
 * io/conn.c) and recv stops for that connection until buffers come back.
 * At stop every buffer returns: the pool's in-use count is back to zero
 * once the handlers have put theirs.
 *
 * Zero-length packets: with a length prefix, a length of zero is an error
 * (closed as AO_CLOSE_EMPTY) unless the framing has AO_FRAME_ALLOW_EMPTY,
 * in which case it is an empty packet handed to on_packet (a keep-alive).
 *
 * Backpressure.  conn->backlog counts packets given to the strand and not
 * yet handled.  When it reaches session_backlog the ring stops receiving
 * on that connection (cancels the multishot recv, or drops EPOLLIN), so
 * the socket's receive buffer fills and TCP flow control stops the sender.
 * Bytes already received are still framed and queued: the bound is soft by
 * at most one receive, and nothing accepted is dropped.  The worker that
 * brings the backlog down to half the bound posts MB_RESUME.  Lost wake-up
 * guard: the ring stores rx_paused then re-reads backlog, the worker
 * decrements backlog then reads rx_paused, all SEQ_CST (Dekker).
 *
 * Cross-thread requests (the mailbox).  ao_conn_send() appends to the
 * connection's send queue (a list under its sync/ spinlock, bounded in
 * bytes) and posts MB_SEND: it sets the bit in conn->mb_flags and, if the
 * connection was not already queued, pushes it on the ring's lock-free
 * stack.  The ring is woken through an eventfd (a read SQE on io_uring, an
 * epoll entry otherwise), and only when the stack was empty and the ring
 * says it may sleep, so a burst of sends costs one write().  MSG_RING is not
 * used: the senders are workers, which have no ring of their own.  Close,
 * slow consumer, protocol error, resume and free use the same path.
 *
 * Sending.  One send at a time per socket: a plain send for a single
 * buffer, else a sendmsg gathering up to 16 queued buffers (and their
 * prefixes, which live in the queue node).  When it completes, the done
 * nodes go and the next send is gathered in the same hold of the queue's
 * lock.  Each conn has one queue node and one packet work item of its
 * own, used while free, so a connection with one request in flight costs
 * no malloc().  A
 * short send continues from where it stopped; nothing is dropped.  When a
 * send would take the queue past sendq_max the send fails with -ENOBUFS
 * and the connection is closed as a slow consumer; each queued packet
 * counts at least its buffer's capacity, so the bound is on the pool
 * memory a slow reader pins, whatever the size of its packets.  Accepted
 * sockets get TCP_NODELAY.
 *
 * Ring handlers (AO_SERVER_RING_HANDLERS).  The handlers run on the ring
 * thread itself: on_open when the connection is accepted, on_packet from
 * the framer's emit (no work item, no strand, no backlog), on_close in
 * io_conn_finish().  Nothing a handler does may change the connection's
 * state under the code that called it (the framer is mid-feed, the
 * backend mid-completion), so every effect is deferred: ao_conn_send()
 * on the ring thread puts the conn on the ring's kick list (ring-local,
 * no atomics, no reference: the ring flushes the list after each batch
 * of events and before every reap, so a listed conn is never freed), and
 * the flush starts the send; ao_conn_close() and the slow-consumer close
 * go through the mailbox, whose io_conn_post() skips the eventfd when the
 * poster is the ring itself (the ring looks at its mailbox before it blocks).
 * A failing on_packet makes the emit fail, and the ring closes the
 * connection (AO_CLOSE_PROTOCOL, see "Closing") once the framer has
 * returned.
 *
 * Ring assist (AO_SERVER_RING_ASSIST).  With the handlers on the workers,
 * each packet costs two hops: the ring queues the strand's turn and wakes
 * a parked worker (a futex wake), and the worker's send posts to the
 * mailbox and wakes the ring (an eventfd write).  Where the ring and the
 * workers share CPUs, each hop is also a context switch: echobench's
 * server, pinned to one CPU, made 0.7-1.1 switches and 0.8-1.1 system
 * calls per request (epoll: 1.1 and 3-4) against 0.01 and 0.04-0.15 with
 * ring handlers, and spent 1.2-1.65x their CPU per request.  So with the
 * flag, the ring submits with ao_strand_submit_hold(): a strand nobody
 * runs is not queued on the executor but taken by the ring, listed on
 * r->turns, and run by io_ring_run_turns() after the batch of events,
 * before the kicks are flushed and before the ring waits (a turn is never
 * held across a wait).  The strand keeps every guarantee, as it does for
 * a timer's runner: order, one item at a time, on_open first and on_close
 * last, the backlog counted and resumed as before (the items are the same
 * pkt_work).  A handler on the ring sends through the kick list, with no
 * mailbox and no eventfd, and its MB_RESUME or close is a post to itself,
 * which wakes nothing.  A strand already queued or running (a worker has
 * it) only gets the item appended, as before.  Bounds: the ring runs
 * turns for at most IO_ASSIST_BUDGET_NS of each loop, and gives the rest
 * up with ao_strand_run_held(s, 0), which queues them on the executor as
 * the submit would have; a turn that took more than IO_ASSIST_SLOW_NS
 * sets conn->no_assist, after which that connection's turns always go to
 * the workers.  A handler that blocks is not preempted: it holds up the
 * ring once per connection, which is why the flag is the user's to set.
 * It applies whatever the workers are doing: parked, a wake-up and two
 * switches cost more than a short handler; busy, the ring is one more
 * thread running turns; the budget is what leaves the rest to them.
 *
 * Connection lifetime.  A conn is reference counted: the ring holds one
 * from accept until on_close has run, each queued packet and mailbox entry
 * holds one, users may take more.  Closing is in up to four steps:
 * DRAINING (graceful: no more recv; waits for the backlog and the send
 * queue to empty, or its deadline), CLOSING (sends refused with -ENOTCONN,
 * queue dropped, socket shut down, waiting for the backend's operations to
 * complete), LINGER (graceful: FIN queued, the kernel still has bytes of
 * ours to send), CLOSED (fd closed, on_close queued on the strand after
 * every packet).  The last put hands the conn to its ring, which frees it once
 * ao_strand_destroy() says the strand is idle (the put may come from the
 * strand's own last item).  So a handle kept past close is never freed
 * under its holder, and sending on it fails cleanly.
 *
 * Closing.  A close never overtakes a send.  A graceful close (by
 * ao_conn_close(), a failed on_packet, bad framing, the peer's EOF, the
 * stop) stops reading (bad input: what follows it is dropped, held input
 * too), lets the backlog run, and refuses sends only once the send queue
 * is empty, under its lock (io_conn_check_drained()), so that a send from
 * another thread either gets in and is sent or is refused.  A WebSocket's
 * close frame is the exception: from the hold of that lock that queues
 * it, sends are refused with -EPIPE (io_conn_send_ws_close(); RFC 6455
 * allows no data frame after it), whatever is still queued.  Then
 * shutdown(SHUT_WR) queues the FIN behind what the kernel still holds, and
 * the socket is kept (LINGER), read and dropped, until SIOCOUTQNSD says
 * nothing of ours is unsent: closed earlier, unread input or input that
 * arrives after close() makes the kernel answer with a reset and drop
 * what it has not sent: a reply followed by a close would vanish (the
 * peer would see a reset, or a bare EOF).  The conn's timer looks
 * again after 1 ms, then twice as long each time up to 64 ms.  The whole
 * close has one deadline (linger_ms; for the stop, drain_timeout_ms):
 * past it, DRAINING or LINGER, the close is abortive, SO_LINGER {1, 0}
 * then close(), a reset, so that a peer that does not read holds neither
 * the connection nor kernel memory (FIN-WAIT-1 behind a zero window).  A
 * slow consumer (sendq_max, ao_conn_close_slow()) is closed abortively at
 * once.  On io_uring, with operations maybe still out on the socket, the
 * reset goes first with connect(AF_UNSPEC) (tcp_disconnect(), which also
 * wakes them), not after a shutdown, whose FIN the peer would read as an
 * EOF before it (see ur_close()).
 * An idle timeout or a socket error closes at once, without a linger.
 *
 * Limits.  Beyond max_conns a connection is accepted and closed at once
 * (counted as rejected).  On EMFILE/ENFILE the ring gives up a spare
 * descriptor to accept and close what is pending, then re-arms after a
 * 10 ms pause: never a loop spinning on EMFILE.
 *
 * Deadlines.  Each connection has one timer (core/timer.h) on the
 * executor's timer service (the server makes one if the executor has
 * none): armed by the ring at open for idle_timeout_ms, and at a graceful
 * close for the drain deadline.  A receive only stamps last_rx_ns (read
 * once per batch); the wheel is not touched per packet.  When the timer
 * fires, a worker posts MB_TIMER, and the ring closes the connection if it
 * really was silent that long, or arms the timer again for when it would
 * be (io_conn_timer()).  So nothing scans the connections: the cost is one
 * timer per connection per idle period, whatever their number.  Time the
 * server itself is not reading a connection (backpressure, no buffers) is
 * not silence: while it lasts, the timer comes back every eighth of the
 * idle timeout and restarts the count.
 *
 * Addresses.  cfg.address is parsed once, at create, by getaddrinfo()
 * with AI_NUMERICHOST (never a name lookup): an IPv4 dotted quad or an
 * IPv6 address, brackets and scope id allowed.  "::" is bound with
 * IPV6_V6ONLY off, so one listener takes both families and IPv4 peers
 * appear as IPv4-mapped addresses; the peer is kept as getpeername()
 * gave it (ao_conn_peer_addr()), and ao_conn_peer() unmaps it.
 *
 * Stop.  ao_server_stop() flags the rings.  Each stops accepting, puts
 * every connection in DRAINING with reason AO_CLOSE_SHUTDOWN and the drain
 * deadline, and exits once every conn it made has been freed (the handlers
 * have run, the buffers are back), or a grace period after the deadline.
 *
 * WebSocket and HTTP (AO_FRAME_WS, AO_SERVER_HTTP).  A connection of such
 * a server carries a struct io_wsc (io/http.c, whose opening comment is
 * the design): its first bytes go there rather than to the framer (the
 * sniff, the request head), on_open waits for the upgrade, and a
 * WebSocket's messages come out of its frame decoder into the same
 * io_conn_emit() as framed packets, so strands, backlog, ring handlers
 * and the drain are the same.  The head's deadline and the ping share the
 * connection's timer with the idle timeout; the close frame is queued by
 * the drain (io_conn_check_drained()), behind everything sent before.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <aorta/clock.h>
#include <aorta/core/cpu.h>
#include <aorta/sync/futex.h>
#include "io_priv.h"
#include "ws_priv.h"

#define DEFAULT_BACKLOG 512
#define DEFAULT_POOL_BUFFERS 4096u
#define DEFAULT_MAX_CONNS 10000u
#define DEFAULT_SESSION_BACKLOG 256u
#define DEFAULT_SENDQ_MAX (4u << 20)
#define DEFAULT_DRAIN_MS 5000u
#define DEFAULT_LINGER_MS 2000u
#define DEFAULT_RING_ENTRIES 512u
#define DEFAULT_RING_BUFFERS 256u
#define MAX_RINGS 64u

const char *ao_io_backend_name(enum ao_io_backend b)
{
	switch (b) {
	case AO_IO_URING:
		return "io_uring";
	case AO_IO_EPOLL:
		return "epoll";
	default:
		return "auto";
	}
}

/* ---- configuration ---- */

static int resolve_config(struct ao_server_config *c)
{
	int err = ao_framing_resolve(&c->framing);

	if (err)
		return err;
	if (!c->address)
		c->address = "127.0.0.1";
	if (c->backlog <= 0)
		c->backlog = DEFAULT_BACKLOG;
	if (!c->rings)
		c->rings = 1;
	if (c->rings > MAX_RINGS)
		return -EINVAL;
	if (c->backend != AO_IO_AUTO && c->backend != AO_IO_URING &&
	    c->backend != AO_IO_EPOLL)
		return -EINVAL;
	if (!c->pool_buffers)
		c->pool_buffers = DEFAULT_POOL_BUFFERS;
	if (!c->max_conns)
		c->max_conns = DEFAULT_MAX_CONNS;
	if (!c->session_backlog)
		c->session_backlog = DEFAULT_SESSION_BACKLOG;
	if (!c->sendq_max)
		c->sendq_max = DEFAULT_SENDQ_MAX;
	if (!c->drain_timeout_ms)
		c->drain_timeout_ms = DEFAULT_DRAIN_MS;
	if (!c->linger_ms)
		c->linger_ms = DEFAULT_LINGER_MS;
	if (!c->ring_entries)
		c->ring_entries = DEFAULT_RING_ENTRIES;
	if (!c->ring_buffers)
		c->ring_buffers = DEFAULT_RING_BUFFERS;
	if (c->ring_buffers > 32768 ||
	    (c->ring_buffers & (c->ring_buffers - 1)))
		return -EINVAL;
	if (c->flags & ~(AO_SERVER_QUIET | AO_SERVER_RING_HANDLERS |
			 AO_SERVER_RING_ASSIST | AO_SERVER_HTTP))
		return -EINVAL;
	/* HTTP beside len16: a method's first two letters ("GE", "PO"...),
	 * read as a length in either order, must be too long: at least
	 * "AA", 0x4141. */
	if ((c->flags & AO_SERVER_HTTP) && c->framing.kind == AO_FRAME_LEN16 &&
	    c->framing.max_packet >= 0x4141u)
		return -EINVAL;
	if (!c->ws.header_timeout_ms)
		c->ws.header_timeout_ms = 5000;
	if (!c->ws.header_max)
		c->ws.header_max = IO_HTTP_MAX_REQUEST;
	if (c->ws.header_max < 64 || c->ws.header_max > (1u << 20))
		return -EINVAL;
	if (!c->ws.ping_ms)
		c->ws.ping_ms = 15000;
	if (!c->ws.pong_timeout_ms)
		c->ws.pong_timeout_ms = 10000;
	if (c->ws.flags & ~AO_WS_TEXT)
		return -EINVAL;
	return 0;
}

/*
 * A numeric IPv4 or IPv6 address (brackets and a scope id allowed) into
 * *a, port 0; getaddrinfo() with AI_NUMERICHOST, so never a name lookup.
 * IPv4 must be a dotted quad: getaddrinfo() also takes inet_aton()'s
 * shorthands ("1.2.3" is 1.2.0.3), which are more likely typos.
 */
static int parse_address(const char *s, union io_addr *a, socklen_t *len)
{
	struct addrinfo hints = {
		.ai_flags = AI_PASSIVE | AI_NUMERICHOST,
		.ai_socktype = SOCK_STREAM,
	};
	struct addrinfo *res;
	char host[NI_MAXHOST];
	size_t n = strlen(s);
	struct in_addr a4;
	int err = -EINVAL;

	if (n >= sizeof(host))
		return -EINVAL;
	if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
		memcpy(host, s + 1, n - 2);
		host[n - 2] = '\0';
	} else {
		memcpy(host, s, n + 1);
	}
	if (!host[0] || getaddrinfo(host, NULL, &hints, &res))
		return -EINVAL;
	if (res->ai_addrlen <= sizeof(*a) &&
	    (res->ai_family == AF_INET6 ||
	     (res->ai_family == AF_INET && s[0] != '[' &&
	      inet_pton(AF_INET, host, &a4) == 1))) {
		memset(a, 0, sizeof(*a));
		memcpy(a, res->ai_addr, res->ai_addrlen);
		*len = res->ai_addrlen;
		err = 0;
	}
	freeaddrinfo(res);
	return err;
}

int ao_server_create(const struct ao_server_config *cfg, struct ao_server **out)
{
	struct ao_server *srv;
	int err;

	if (!cfg || !out)
		return -EINVAL;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->cfg = *cfg;
	err = resolve_config(&srv->cfg);
	if (err)
		goto fail;
	err = parse_address(srv->cfg.address, &srv->addr, &srv->addr_len);
	if (err)
		goto fail;
	srv->low_water = srv->cfg.session_backlog / 2;
	srv->ws_only = srv->cfg.framing.kind == AO_FRAME_WS;
	srv->http = srv->ws_only || (srv->cfg.flags & AO_SERVER_HTTP);
	srv->ws_op = (srv->cfg.ws.flags & AO_WS_TEXT) ? IO_WS_OP_TEXT :
							IO_WS_OP_BINARY;
	if (srv->cfg.ws.protocols)
		while (srv->cfg.ws.protocols[srv->n_protocols])
			srv->n_protocols++;
	srv->head_ns = srv->cfg.ws.header_timeout_ms * 1000000ull;
	srv->ping_ns = srv->cfg.ws.ping_ms * 1000000ull;
	srv->pong_ns = srv->cfg.ws.pong_timeout_ms * 1000000ull;
	srv->ring_handlers = srv->cfg.flags & AO_SERVER_RING_HANDLERS;
	srv->ring_assist = !srv->ring_handlers &&
			   (srv->cfg.flags & AO_SERVER_RING_ASSIST);
	srv->exec = cfg->exec;
	if (!srv->exec) {
		struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;

		ec.name = "ao-io-w";
		err = ao_exec_create(&ec, &srv->exec);
		if (err)
			goto fail;
		srv->own_exec = true;
	}
	/* The conns' deadlines (see "Deadlines"): the executor's timer
	 * service, or one of our own on it. */
	srv->timers = ao_timers_of(srv->exec);
	if (!srv->timers) {
		struct ao_timers_config tc = AO_TIMERS_CONFIG_INIT;

		tc.exec = srv->exec;
		err = ao_timers_create(&tc, &srv->timers);
		if (err)
			goto fail;
		srv->own_timers = true;
	}
	srv->pool = cfg->pool;
	if (!srv->pool) {
		struct ao_bufpool_params p = {
			.buf_size = srv->cfg.framing.max_packet < 2048 ?
					    2048 :
					    srv->cfg.framing.max_packet,
			.count = srv->cfg.pool_buffers,
			/* Frame once, send to many (io/http.c). */
			.headroom = srv->http ? IO_WS_HDR_MAX : 0,
		};

		err = ao_bufpool_create(&srv->pool, &p);
		if (err)
			goto fail;
		srv->own_pool = true;
	} else {
		struct ao_bufpool_info info;

		ao_bufpool_info(srv->pool, &info);
		if (info.buf_size < srv->cfg.framing.max_packet) {
			err = -EINVAL;
			goto fail;
		}
	}
	{
		struct ao_bufpool_info info;

		ao_bufpool_info(srv->pool, &info);
		/* Raw: a receive is a packet, so it may not pass max_packet
		 * (a pool's buffers may be bigger: 2048 at least). */
		srv->rx_len = (uint32_t)info.buf_size;
		if (srv->cfg.framing.kind == AO_FRAME_RAW &&
		    srv->rx_len > srv->cfg.framing.max_packet)
			srv->rx_len = srv->cfg.framing.max_packet;
	}
	/* struct io_ring is cache-line aligned: calloc() would not do. */
	srv->rings = aligned_alloc(AO_CACHELINE_SIZE,
				   srv->cfg.rings * sizeof(*srv->rings));
	if (!srv->rings) {
		err = -ENOMEM;
		goto fail;
	}
	memset(srv->rings, 0, srv->cfg.rings * sizeof(*srv->rings));
	for (unsigned int i = 0; i < srv->cfg.rings; i++) {
		struct io_ring *r = &srv->rings[i];

		r->srv = srv;
		r->index = i;
		r->lfd = r->efd = r->spare_fd = -1;
		r->turns_tail = &r->turns;
		r->assist_budget = ao_ns_to_cycles(IO_ASSIST_BUDGET_NS);
		r->assist_slow = ao_ns_to_cycles(IO_ASSIST_SLOW_NS);
	}
	*out = srv;
	return 0;
fail:
	if (srv->own_pool)
		ao_bufpool_destroy(srv->pool);
	if (srv->own_timers)
		ao_timers_destroy(srv->timers, NULL);
	if (srv->own_exec)
		ao_exec_destroy(srv->exec);
	free(srv);
	return err;
}

/* ---- accepting (shared by the backends) ---- */

void io_ring_accepted(struct io_ring *r, int fd)
{
	struct ao_server *srv = r->srv;
	union io_addr peer;
	socklen_t plen = sizeof(peer);
	struct ao_conn *c;
	int one = 1;

	if (r->stop_seen ||
	    __atomic_add_fetch(&srv->nconns, 1, __ATOMIC_RELAXED) >
		    srv->cfg.max_conns) {
		if (!r->stop_seen)
			__atomic_fetch_sub(&srv->nconns, 1, __ATOMIC_RELAXED);
		IO_STAT_ADD(r, rejected, 1); /* counted before the peer sees */
		close(fd);
		return;
	}
	/* Small packets: no Nagle (its 40 ms delayed-ACK stall per reply). */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (srv->cfg.sock_rcvbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &srv->cfg.sock_rcvbuf,
			   sizeof(int));
	if (srv->cfg.sock_sndbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &srv->cfg.sock_sndbuf,
			   sizeof(int));
	memset(&peer, 0, sizeof(peer));
	if (getpeername(fd, &peer.sa, &plen) || plen > sizeof(peer))
		plen = 0;
	c = io_conn_new(r, fd, &peer, plen);
	if (!c) {
		__atomic_fetch_sub(&srv->nconns, 1, __ATOMIC_RELAXED);
		close(fd);
		IO_STAT_ADD(r, rejected, 1);
		return;
	}
	c->counted = true;
	IO_STAT_ADD(r, accepted, 1);
	IO_STAT_ADD(r, open, 1);
	r->be->conn_open(r, c);
}

bool io_ring_accept_error(struct io_ring *r, int err)
{
	int fl, fd;

	IO_STAT_ADD(r, accept_errors, 1);
	if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM)
		return err == EINTR || err == EAGAIN || err == ECONNABORTED;
	/* Out of descriptors: give up the spare one to take what is pending
	 * off the queue and close it, so clients are told at once. */
	if (r->spare_fd >= 0) {
		close(r->spare_fd);
		r->spare_fd = -1;
	}
	fl = fcntl(r->lfd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(r->lfd, F_SETFL, fl | O_NONBLOCK);
	while ((fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		IO_STAT_ADD(r, rejected, 1);
		close(fd);
	}
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(r->lfd, F_SETFL, fl);
	r->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* Re-arm later, not now: the limit may still be reached. */
	r->accept_retry_ns = ao_now_ns() + IO_EMFILE_BACKOFF_NS;
	return false;
}

/* ---- start and stop ---- */

static int open_listener(struct ao_server *srv, struct io_ring *r,
			 uint16_t port)
{
	union io_addr sa = srv->addr;
	int one = 1, zero = 0, fd;

	if (sa.sa.sa_family == AF_INET6)
		sa.in6.sin6_port = htons(port);
	else
		sa.in.sin_port = htons(port);
	fd = socket(sa.sa.sa_family,
		    SOCK_STREAM | SOCK_CLOEXEC |
			    (srv->backend == AO_IO_EPOLL ? SOCK_NONBLOCK : 0),
		    0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (srv->cfg.rings > 1 &&
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
		goto fail;
	/* "::" is dual stack whatever net.ipv6.bindv6only says. */
	if (sa.sa.sa_family == AF_INET6 &&
	    IN6_IS_ADDR_UNSPECIFIED(&sa.in6.sin6_addr) &&
	    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0)
		goto fail;
	if (bind(fd, &sa.sa, srv->addr_len) < 0 ||
	    listen(fd, srv->cfg.backlog) < 0)
		goto fail;
	r->lfd = fd;
	return 0;
fail:
	one = -errno;
	close(fd);
	return one;
}

static int pick_backend(struct ao_server *srv)
{
	enum ao_io_backend b = srv->cfg.backend;
	const char *env = getenv("AO_IO_BACKEND");
	int err = 0;

	if (b == AO_IO_AUTO && env && *env) {
		if (!strcmp(env, "epoll"))
			b = AO_IO_EPOLL;
		else if (!strcmp(env, "uring") || !strcmp(env, "io_uring"))
			b = AO_IO_URING;
	}
	if (b == AO_IO_EPOLL) {
		srv->be = &io_epoll_backend;
		srv->backend = AO_IO_EPOLL;
		return 0;
	}
#if AO_CONFIG_URING
	err = io_ur_probe();
	if (!err) {
		srv->be = &io_uring_backend;
		srv->backend = AO_IO_URING;
		return 0;
	}
#else
	err = -EOPNOTSUPP;
#endif
	if (b == AO_IO_URING)
		return -EOPNOTSUPP;
	if (!(srv->cfg.flags & AO_SERVER_QUIET))
		fprintf(stderr, "aorta: io_uring unusable (%s), using epoll\n",
			strerror(-err));
	srv->be = &io_epoll_backend;
	srv->backend = AO_IO_EPOLL;
	return 0;
}

static void close_ring_fds(struct io_ring *r)
{
	if (r->lfd >= 0)
		close(r->lfd);
	if (r->efd >= 0)
		close(r->efd);
	if (r->spare_fd >= 0)
		close(r->spare_fd);
	r->lfd = r->efd = r->spare_fd = -1;
}

int ao_server_start(struct ao_server *srv)
{
	unsigned int i, started = 0;
	int err;

	if (!srv || srv->started)
		return -EINVAL;
	err = pick_backend(srv);
	if (err)
		return err;
	for (i = 0; i < srv->cfg.rings; i++) {
		struct io_ring *r = &srv->rings[i];

		/* A restart after a stop begins afresh (counters go on). */
		if (r->efd >= 0)
			close(r->efd);
		r->efd = -1;
		r->stop_seen = false;
		r->accepting = false;
		r->accept_retry_ns = 0;
		r->be = srv->be;
		err = open_listener(srv, r, i ? srv->port : srv->cfg.port);
		if (err)
			goto fail;
		if (i == 0) {
			union io_addr sa;
			socklen_t len = sizeof(sa);

			memset(&sa, 0, sizeof(sa));
			getsockname(r->lfd, &sa.sa, &len);
			srv->port = ntohs(sa.sa.sa_family == AF_INET6 ?
						  sa.in6.sin6_port :
						  sa.in.sin_port);
		}
		/* Blocking for io_uring: a read SQE on an O_NONBLOCK file
		 * would complete at once with -EAGAIN instead of waiting. */
		r->efd = eventfd(0, EFD_CLOEXEC | (srv->backend == AO_IO_EPOLL ?
							   EFD_NONBLOCK :
							   0));
		r->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (r->efd < 0) {
			err = -errno;
			goto fail;
		}
	}
	__atomic_store_n(&srv->stopping, 0, __ATOMIC_RELAXED);
	for (i = 0; i < srv->cfg.rings; i++) {
		struct io_ring *r = &srv->rings[i];
		uint32_t v;

		r->ready = 0;
		err = -pthread_create(&r->thread, NULL, io_ring_main, r);
		if (err)
			goto fail_threads;
		started++;
		/* Acquire: pairs with the release store in io_ring_main(). */
		while (!(v = __atomic_load_n(&r->ready, __ATOMIC_ACQUIRE)))
			ao_futex_wait(&r->ready, 0, -1);
		if (v != 1) {
			err = (int)v;
			goto fail_threads;
		}
	}
	srv->started = true;
	if (!(srv->cfg.flags & AO_SERVER_QUIET))
		fprintf(stderr,
			"aorta: io backend %s (flags 0x%x), %u ring%s, "
			"%s port %u\n",
			ao_io_backend_name(srv->backend), srv->ring_flags,
			srv->cfg.rings, srv->cfg.rings > 1 ? "s" : "",
			srv->cfg.address, srv->port);
	return 0;
fail_threads:
	__atomic_store_n(&srv->stopping, 1, __ATOMIC_RELEASE);
	for (i = 0; i < started; i++) {
		io_ring_wake(&srv->rings[i]);
		pthread_join(srv->rings[i].thread, NULL);
	}
fail:
	for (i = 0; i < srv->cfg.rings; i++)
		close_ring_fds(&srv->rings[i]);
	return err;
}

int ao_server_stop(struct ao_server *srv)
{
	int ret = 0;

	if (!srv)
		return -EINVAL;
	if (!srv->started)
		return 0;
	/* Release: pairs with the acquire load in io_ring_main(). */
	__atomic_store_n(&srv->stopping, 1, __ATOMIC_RELEASE);
	for (unsigned int i = 0; i < srv->cfg.rings; i++)
		io_ring_wake(&srv->rings[i]);
	for (unsigned int i = 0; i < srv->cfg.rings; i++) {
		struct io_ring *r = &srv->rings[i];

		pthread_join(r->thread, NULL);
		if (r->nalive)
			ret = -ETIMEDOUT;
		/* The eventfd stays until destroy: a leaked handle's last
		 * put may still post to it. */
		if (r->lfd >= 0)
			close(r->lfd);
		if (r->spare_fd >= 0)
			close(r->spare_fd);
		r->lfd = r->spare_fd = -1;
	}
	srv->started = false;
	return ret;
}

int ao_server_destroy(struct ao_server *srv)
{
	uint32_t alive = 0;
	int err;

	if (!srv)
		return 0;
	ao_server_stop(srv);
	/* Handlers that outlived the drain still hold conns: with the ring
	 * threads gone, this thread plays their part (mailbox, reaping) for
	 * up to another drain timeout. */
	for (unsigned int i = 0; i < srv->cfg.rings; i++) {
		struct io_ring *r = &srv->rings[i];
		uint64_t end =
			ao_now_ns() + srv->cfg.drain_timeout_ms * 1000000ull;

		io_ring_set_current(r);
		for (;;) {
			io_ring_drain_mailbox(r);
			io_ring_reap(r);
			if (!r->nalive || ao_now_ns() >= end)
				break;
			usleep(1000);
		}
		io_ring_set_current(NULL);
		alive += r->nalive;
	}
	if (alive) {
		fprintf(stderr,
			"aorta: ao_server_destroy: %u connection%s still "
			"referenced\n",
			alive, alive == 1 ? "" : "s");
		return -EBUSY;
	}
	if (srv->own_timers) {
		/* Every conn is gone, and each cancelled its timer. */
		err = ao_timers_destroy(srv->timers, NULL);
		if (err)
			return err;
		srv->own_timers = false;
	}
	if (srv->own_exec) {
		err = ao_exec_destroy(srv->exec);
		if (err)
			return err;
		srv->own_exec = false;
	}
	if (srv->own_pool) {
		err = ao_bufpool_destroy(srv->pool);
		if (err)
			return err;
		srv->own_pool = false;
	}
	for (unsigned int i = 0; i < srv->cfg.rings; i++)
		close_ring_fds(&srv->rings[i]);
	free(srv->rings);
	free(srv);
	return 0;
}

/* ---- queries ---- */

uint16_t ao_server_port(const struct ao_server *srv)
{
	return srv->port;
}

enum ao_io_backend ao_server_backend(const struct ao_server *srv)
{
	return srv->backend;
}

unsigned int ao_server_ring_flags(const struct ao_server *srv)
{
	return srv->ring_flags;
}

unsigned int ao_server_rings(const struct ao_server *srv)
{
	return srv->cfg.rings;
}

struct ao_bufpool *ao_server_pool(const struct ao_server *srv)
{
	return srv->pool;
}

struct ao_exec *ao_server_exec(const struct ao_server *srv)
{
	return srv->exec;
}

const struct ao_framing *ao_server_framing(const struct ao_server *srv)
{
	return &srv->cfg.framing;
}

static void stats_add(struct ao_io_stats *a, const struct ao_io_stats *b)
{
	const uint64_t *s = (const uint64_t *)b;
	uint64_t *d = (uint64_t *)a;

	AO_BUILD_BUG_ON(sizeof(*a) % sizeof(uint64_t));
	for (size_t i = 0; i < sizeof(*a) / sizeof(uint64_t); i++)
		d[i] += __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

int ao_server_stats(const struct ao_server *srv, int ring,
		    struct ao_io_stats *st)
{
	if (!srv || !st || (ring >= 0 && (unsigned int)ring >= srv->cfg.rings))
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	for (unsigned int i = 0; i < srv->cfg.rings; i++)
		if (ring < 0 || (unsigned int)ring == i)
			stats_add(st, &srv->rings[i].st);
	return 0;
}
