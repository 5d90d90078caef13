/* SPDX-License-Identifier: MIT */
/*
 * Private to io/: the server, its rings, connections, and the interface
 * between the common ring logic (server.c, ring.c, conn.c, sendq.c) and a
 * backend (uring.c, epoll.c).  See io/server.c for the design.
 */
#ifndef AORTA_IO_PRIV_H
#define AORTA_IO_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <aorta/compiler.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include <aorta/core/work.h>
#include <aorta/io/conn.h>
#include <aorta/io/framer.h>
#include <aorta/io/server.h>
#include <aorta/sync/spinlock.h>
#include "sendq.h"

#define IO_SEND_IOV 16 /* buffers one send submission gathers */
#define IO_RX_BURST 16 /* epoll: reads per readiness before moving on */
#define IO_EMFILE_BACKOFF_NS 10000000ull /* accept retry after EMFILE */
#define IO_STARVED_POLL_NS 1000000ull /* retry starved work this often */
#define IO_STOP_GRACE_NS 1000000000ull /* after the drain, for on_close */
/* AO_SERVER_RING_ASSIST (see "Ring assist" in io/server.c): handler time
 * the ring spends per loop on the turns it holds before it hands the rest
 * to the workers, and a turn that takes longer than IO_ASSIST_SLOW_NS
 * sends its connection's later turns to the workers for good. */
#define IO_ASSIST_BUDGET_NS 250000ull
#define IO_ASSIST_SLOW_NS 1000000ull
/* A lingering close (see io_conn_finish()) looks at its socket after
 * IO_LINGER_POLL_NS, then twice as long each time, up to the max. */
#define IO_LINGER_POLL_NS 1000000ull
#define IO_LINGER_POLL_MAX_NS 64000000ull

/* Mailbox bits (conn->mb_flags): what other threads ask the ring to do. */
#define MB_QUEUED 0x01u /* on the ring's mailbox stack */
#define MB_SEND 0x02u /* the send queue has new buffers */
#define MB_RESUME 0x04u /* the backlog went down: maybe resume recv */
#define MB_CLOSE 0x08u /* ao_conn_close(): graceful close */
#define MB_SLOW 0x10u /* send queue over its bound: close */
#define MB_PROTO 0x20u /* on_packet failed: close */
#define MB_FREE 0x40u /* last reference gone: free on the ring */
#define MB_TIMER 0x80u /* the conn's timer fired: idle or drain deadline */

/* Connection states, ring thread only. */
enum conn_state {
	CONN_OPEN, /* receiving and sending */
	CONN_DRAINING, /* no more recv; close once backlog and sends drain */
	CONN_CLOSING, /* socket shut; waiting for the backend's ops */
	CONN_LINGER, /* FIN queued behind unsent bytes: close once sent */
	CONN_CLOSED, /* fd closed, on_close queued or run */
};

/*
 * Receive bytes kept back while the pool is empty (ring thread only): a
 * copy, so that a held receive pins no pool buffer (see hold()).
 */
struct held_rx {
	struct held_rx *next;
	uint32_t off, len;
	uint8_t data[];
};

/* One packet on its way to the strand. */
struct pkt_work {
	struct ao_work work;
	struct ao_conn *c;
	struct ao_buf *pkt;
};

struct io_ring;
struct io_wsc;

/* A socket address of either family: the listener's, a peer's. */
union io_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

struct ao_conn {
	/* Shared between threads. */
	uint32_t refs; /* atomic */
	uint32_t closed; /* atomic: nonzero once sends are refused */
	/* atomic: a WebSocket's close frame is queued, every later send is
	 * refused (-EPIPE).  Set once, under sq_lock, by the same hold that
	 * queued the frame; read under sq_lock, or after an acquire load of
	 * closed that saw it set (the ring's release store of closed comes
	 * after ws_fin's, so it publishes it). */
	uint32_t ws_fin;
	uint32_t mb_flags; /* atomic: MB_* */
	struct ao_conn *mb_next; /* mailbox link (while MB_QUEUED) */
	uint32_t backlog; /* atomic: packets queued on the strand */
	uint32_t rx_paused; /* atomic: the ring wants a MB_RESUME */
	struct ao_spinlock sq_lock; /* guards sq_* */
	struct sendq_node *sq_head, *sq_tail;
	/* A node every conn has, so that the common case (a packet or two
	 * queued at a time) needs no malloc()/free(); sq_inline_used (under
	 * sq_lock) says whether it is on the queue. */
	struct sendq_node sq_inline;
	bool sq_inline_used;
	size_t sq_bytes; /* queued bytes, prefixes included */
	size_t sq_charge; /* the nodes' charges: bounded by sendq_max */
	struct ao_strand strand; /* runs every handler of this conn */
	/* A work item every conn has, so that a packet needs no malloc()
	 * while the previous one has run (one request in flight); pw_busy
	 * (atomic) is set by the ring, cleared by the worker. */
	struct pkt_work pw_inline;
	uint32_t pw_busy;
	struct ao_work open_work, close_work;
	/* The idle timeout and the drain deadline (io_conn_timer()):
	 * armed by the ring, fired on a worker, which posts MB_TIMER. */
	struct ao_timer timer;
	enum ao_close_reason reason; /* set before close_work is queued */
	uint32_t proto; /* atomic: enum ao_conn_proto */
	void *user;
	uint64_t id;
	struct io_ring *ring;
	struct ao_server *srv;
	union io_addr peer;
	socklen_t peer_len; /* 0: unknown */

	/* Ring thread only. */
	int fd;
	enum conn_state state;
	bool bp_paused; /* backpressure: backlog reached its bound */
	bool rx_nobufs; /* no receive buffer: re-arm after a refill */
	bool counted; /* in srv->nconns */
	bool graceful; /* closing after a complete drain: end with a FIN */
	bool abort; /* end with a reset (SO_LINGER 0), nothing flushed */
	bool rx_stop; /* input error: what still arrives is dropped */
	bool kick_queued; /* on the ring's kick list */
	struct ao_conn *kick_next; /* kick list link */
	bool no_assist; /* a slow turn: its turns go to the workers */
	bool opened; /* on_open queued or run: on_close will follow */
	struct io_wsc *ws; /* HTTP and WebSocket state (io/http.c), or NULL
			    * on a server without them */
	struct ao_conn *turn_next; /* the ring's list of held turns */
	struct held_rx *held, **held_tail; /* input waiting for buffers */
	bool eof_held; /* the peer's FIN came behind held input */
	struct ao_framer framer;
	struct ao_conn *next, *prev; /* the ring's list of live sockets */
	struct ao_conn *reap_next; /* the ring's list of conns to free */
	uint64_t last_rx_ns; /* stamped per receive batch, not re-armed */
	uint64_t deadline_ns; /* DRAINING, LINGER: close by then */
	uint64_t linger_step_ns; /* LINGER: next look at the socket in */
	uint32_t sq_off; /* bytes of the head node already sent */
	/* Backend state. */
	bool recv_armed; /* uring: multishot recv outstanding */
	bool recv_cancelled; /* uring: a cancel for it was submitted */
	bool send_busy; /* uring: a sendmsg outstanding */
	bool ep_out; /* epoll: EPOLLOUT in the interest set */
	bool ep_in; /* epoll: EPOLLIN in the interest set */
	int ops; /* uring: submissions whose last CQE is still due */
	uint32_t iov_n; /* entries in iov being sent */
	struct msghdr msg;
	struct iovec iov[IO_SEND_IOV];
} __ao_cacheline_aligned;

struct io_backend;

struct io_ring {
	struct ao_server *srv;
	unsigned int index;
	const struct io_backend *be;
	void *be_priv; /* the backend's per-ring state */
	pthread_t thread;
	int lfd; /* listening socket */
	int efd; /* eventfd: other threads wake the ring */
	int spare_fd; /* /dev/null, given up to accept on EMFILE */
	uint32_t ready; /* atomic: 1 set up, -errno failed */
	/* Mailbox: a stack of conns other threads pushed (MB_QUEUED). */
	struct ao_conn *mb_head; /* atomic */
	uint32_t sleeping; /* atomic: the ring may block: wake it */
	/* Ring thread only. */
	struct ao_conn *conns; /* live sockets */
	struct ao_conn *reap; /* refs gone; freed once the strand is idle */
	struct ao_conn *kicks; /* sends queued on this thread, to start */
	/* Strand turns this ring took (AO_SERVER_RING_ASSIST), oldest
	 * first; assist: the loop runs, so it may take them. */
	struct ao_conn *turns, **turns_tail;
	bool assist;
	uint64_t assist_budget; /* IO_ASSIST_BUDGET_NS in cycles */
	uint64_t assist_slow; /* IO_ASSIST_SLOW_NS in cycles */
	uint32_t nalive; /* conns allocated on this ring and not freed */
	uint32_t nheld; /* conns with held input */
	uint32_t nnobufs; /* conns with rx_nobufs */
	bool accepting;
	bool stop_seen;
	uint64_t accept_retry_ns; /* EMFILE backoff: re-arm at */
	uint64_t stop_deadline_ns;
	/* The clock, read once per batch of events (io_ring_clock()): what
	 * a receive stamps in last_rx_ns, without a clock_gettime() each. */
	uint64_t now_ns;
	struct ao_io_stats st; /* written by the ring, read racily */
} __ao_cacheline_aligned;

/* What a backend provides; every call is on the ring's own thread. */
struct io_backend {
	const char *name;
	enum ao_io_backend kind;
	/* Set up the ring (on its thread); 0 or -errno. */
	int (*init)(struct io_ring *r);
	/* Tear down: every buffer it holds goes back to the pool. */
	void (*fini)(struct io_ring *r);
	/* Wait up to timeout_ns (< 0: no bound) and handle what happened. */
	void (*wait)(struct io_ring *r, int64_t timeout_ns);
	/* Start (or stop) accepting. */
	void (*accept_start)(struct io_ring *r);
	void (*accept_stop)(struct io_ring *r);
	/* A new connection: start receiving. */
	void (*conn_open)(struct io_ring *r, struct ao_conn *c);
	/* Receive wanted or not changed (conn_rx_wanted()). */
	void (*rx_update)(struct io_ring *r, struct ao_conn *c);
	/* The send queue has something: send it unless a send is going. */
	void (*send_kick)(struct io_ring *r, struct ao_conn *c);
	/* Hard close: stop everything; call io_conn_finish() when no
	 * operation on the socket is left. */
	void (*close)(struct io_ring *r, struct ao_conn *c);
	/* Buffers may be back in the pool: refill what was short. */
	void (*refill)(struct io_ring *r);
};

extern const struct io_backend io_epoll_backend;
#if AO_CONFIG_URING
extern const struct io_backend io_uring_backend;
/* Can this kernel run the io_uring backend?  0, or -errno why not. */
int io_ur_probe(void);
#endif

struct ao_server {
	struct ao_server_config cfg; /* defaults resolved */
	struct ao_exec *exec;
	struct ao_bufpool *pool;
	struct ao_timers *timers; /* the executor's; ours if own_timers */
	bool own_exec, own_pool, own_timers;
	const struct io_backend *be;
	enum ao_io_backend backend;
	unsigned int ring_flags; /* uring setup flags in use */
	union io_addr addr; /* cfg.address, parsed (port 0) */
	socklen_t addr_len;
	uint16_t port;
	bool started;
	bool ring_handlers; /* AO_SERVER_RING_HANDLERS */
	bool ring_assist; /* AO_SERVER_RING_ASSIST (not with the above) */
	uint32_t stopping; /* atomic */
	uint32_t nconns; /* atomic, relaxed: a count for max_conns only */
	uint64_t next_id; /* atomic */
	uint32_t low_water; /* resume recv at this backlog */
	/* Bytes one receive may take: the pool's buffer size, but with raw
	 * framing (a receive is a packet) at most max_packet. */
	uint32_t rx_len;
	/* HTTP and WebSocket (io/http.c): http if connections start with a
	 * sniff (AO_SERVER_HTTP) or a request head (AO_FRAME_WS). */
	bool http, ws_only;
	uint8_t ws_op; /* the opcode of sent messages: binary or text */
	unsigned int n_protocols;
	uint64_t head_ns, ping_ns, pong_ns;
	struct io_ring *rings;
};

/* The ring whose thread is calling, or NULL. */
struct io_ring *io_current_ring(void);

/* Relaxed counter update by the ring thread (racy readers). */
#define IO_STAT_ADD(r, field, n)                                             \
	__atomic_store_n(&(r)->st.field,                                     \
			 __atomic_load_n(&(r)->st.field, __ATOMIC_RELAXED) + \
				 (n),                                        \
			 __ATOMIC_RELAXED)

/* conn.c: connection objects and the paths shared by the backends. */
struct ao_conn *io_conn_new(struct io_ring *r, int fd,
			    const union io_addr *peer, socklen_t peer_len);
/* Input from the socket: frame it and queue the packets.  Returns true if
 * the connection kept a reference on buf (the caller must not reuse it). */
bool io_conn_input(struct ao_conn *c, struct ao_buf *buf, uint32_t len);
/* The peer closed (recv returned 0). */
void io_conn_eof(struct ao_conn *c);
/* Should the backend receive on c now? */
bool io_conn_rx_wanted(const struct ao_conn *c);
/* Close now with a reason (no flush); idempotent. */
void io_conn_close_hard(struct ao_conn *c, enum ao_close_reason why);
/* Close once the backlog and the send queue are empty and what they
 * sent is on the wire, then a FIN; past deadline_ns, a reset. */
void io_conn_close_graceful(struct ao_conn *c, enum ao_close_reason why,
			    uint64_t deadline_ns);
/* Bad input (framing, a failed on_packet): stop reading, drop what is
 * held, then close as io_conn_close_graceful() does by the linger time. */
void io_conn_close_input(struct ao_conn *c, enum ao_close_reason why);
/* Close at once with a reset (SO_LINGER 0), dropping what is queued. */
void io_conn_close_abort(struct ao_conn *c, enum ao_close_reason why);
/* The ring is gone (backend torn down): close c without the backend. */
void io_conn_abandon(struct ao_conn *c);
/* Backend: no operation on the socket is left; close it, queue on_close. */
void io_conn_finish(struct ao_conn *c);
/* Retry input held back for lack of buffers. */
void io_conn_retry_held(struct ao_conn *c);
/* Check whether a DRAINING conn is done. */
void io_conn_check_drained(struct ao_conn *c);
/* c's timer fired (MB_TIMER): close it if idle or past its drain
 * deadline, else arm it again for when it would be. */
void io_conn_timer(struct ao_conn *c);
/* Free a conn outright (its strand idle, no references). */
void io_conn_free(struct ao_conn *c);

/* The strand's side of a packet from the ring: queue pkt for on_packet
 * (takes it over); 0 or a negative errno (pkt put). */
int io_conn_emit(struct ao_conn *c, struct ao_buf *pkt);
/* Input the connection cannot go on from (a framing error, ...). */
void io_conn_input_error(struct ao_conn *c, int err);
/* Queue on_open (or run it, ring handlers); sets c->opened. */
void io_conn_open_handlers(struct ao_conn *c);

/* http.c: HTTP requests and WebSocket connections. */
/* Set up c's state on an HTTP server; 0 or -ENOMEM. */
int io_wsc_new(struct ao_conn *c);
/* Free it (io_conn_free()). */
void io_wsc_free(struct ao_conn *c);
/* Should input go through io_wsc_feed() (not straight to the framer)? */
bool io_wsc_active(const struct ao_conn *c);
/* Feed received bytes (writable: unmasked in place).  0 (all taken),
 * -ENOBUFS (*used taken; hold the rest), -ECANCELED (the connection is
 * closing, nothing more to do), or an error for io_conn_input_error(). */
int io_wsc_feed(struct ao_conn *c, uint8_t *p, size_t len, size_t *used);
/* The deadlines of c (OPEN): the request head's, the ping's; closes c
 * if one passed, else returns the next one (UINT64_MAX: none). */
uint64_t io_wsc_timer(struct ao_conn *c, uint64_t now);
/* c drains (a graceful close): queue its close frame once, if it is a
 * WebSocket.  Returns true if it queued one. */
bool io_wsc_drain(struct ao_conn *c);
/* The reason an ao_conn_close() closes c with. */
enum ao_close_reason io_wsc_local_reason(const struct ao_conn *c);
/* The send path (sendq.c): frame buf for a WebSocket send.  Returns the
 * header length put in hdr (inline), 0 with *pre set if the header is in
 * buf's headroom, or a negative errno. */
int io_ws_frame(struct ao_conn *c, struct ao_buf *buf, uint8_t hdr[10],
		uint32_t *pre);

/* ring.c: the ring thread and its services. */
/* The thread's function (arg: its struct io_ring). */
void *io_ring_main(void *arg);
/* The ring whose thread this is from now on (NULL: none); a thread that
 * plays the ring's part after it is gone (ao_server_destroy()). */
void io_ring_set_current(struct io_ring *r);
/* Wake the ring thread (from any thread). */
void io_ring_wake(struct io_ring *r);
/* Ask the ring thread to look at c (MB_* bits), from any thread.  The
 * caller holds a reference, except for MB_FREE, posted after the last. */
void io_conn_post(struct ao_conn *c, uint32_t bits);
/* The ring's side of the mailbox: handle every posted conn. */
void io_ring_drain_mailbox(struct io_ring *r);
/* c's last reference went (ring thread): free it once its strand idles. */
void io_ring_reap_add(struct io_ring *r, struct ao_conn *c);
/* Free conns whose last reference went and whose strand is idle. */
void io_ring_reap(struct io_ring *r);
/* Queue w on c's strand, or hold the turn (AO_SERVER_RING_ASSIST). */
int io_ring_submit(struct ao_conn *c, struct ao_work *w);
/* A send queued on the ring's own thread: start it after the batch. */
void io_ring_kick(struct ao_conn *c);
/* Start the sends queued from this ring's own thread (the kick list);
 * the backends call it after each batch of events, the ring before it
 * reaps. */
void io_ring_flush_kicks(struct io_ring *r);
/* The ring is going away: forget the kick list. */
void io_ring_drop_kicks(struct io_ring *r);
/* Run (or hand to the workers) the strand turns the ring holds. */
void io_ring_run_turns(struct io_ring *r);

/* server.c: accepting, shared by the backends. */
void io_ring_accepted(struct io_ring *r, int fd);
/* accept() failed with err; returns true to retry at once. */
bool io_ring_accept_error(struct io_ring *r, int err);
/* The clock of the connections' deadlines (idle, drain): their timer
 * service's, which may be a test clock. */
static inline uint64_t io_deadline_now(const struct ao_server *srv)
{
	return ao_timers_now(srv->timers);
}
/* When a graceful close that starts now must be over (cfg.linger_ms). */
static inline uint64_t io_linger_deadline(const struct ao_conn *c)
{
	return io_deadline_now(c->srv) + c->srv->cfg.linger_ms * 1000000ull;
}
/* Read the deadline clock into r->now_ns (the backends, after each wait:
 * what a receive stamps in last_rx_ns). */
static inline void io_ring_clock(struct io_ring *r)
{
	r->now_ns = io_deadline_now(r->srv);
}

#endif /* AORTA_IO_PRIV_H */
