/* SPDX-License-Identifier: MIT */
/*
 * The client engines the load tools share (ao-load, ao-bots): one event
 * loop per thread over many TCP connections, on epoll or io_uring.
 *
 * The engine moves bytes; the program decides what they mean, through
 * five callbacks (struct eng_ops): bytes received, bytes sent, the unsent
 * bytes it wants on the wire, a connection that failed, and a tick once
 * per loop iteration that says how long the loop may wait.  A program
 * embeds the engine's part of a connection (struct eng_conn) in its own
 * connection and the engine's state (struct eng) in its own per-thread
 * worker, and gets back to them with container_of:
 *
 *	struct my_conn { union { struct eng_conn ec;
 *				 struct { ENG_CONN_MEMBERS }; }; ... };
 *
 * (the union lets the program keep writing c->fd as before).
 *
 *	eng_setup(e, ENG_URING, max_conns)	before the load starts
 *	eng_add(e, c)				c->fd connected
 *	eng_mark_dirty(e, c)			it has bytes to send
 *	eng_run(e)				until ops->tick returns 0
 *	eng_free(e)
 *
 * epoll: level-triggered EPOLLIN on every connection, EPOLLOUT only while
 * a send is short; each loop iteration reads what is ready, then sends
 * what every dirty connection has with one send (or sendmsg) each.
 * io_uring: every connection keeps one recv in flight into its own
 * buffer (c->rxbuf, e->rxlen bytes, the program's) and at most one send;
 * each iteration submits and waits with one io_uring_enter.
 */
#ifndef AO_TOOLS_ENGINE_H
#define AO_TOOLS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

enum eng_kind { ENG_EPOLL, ENG_URING };

struct eng;
struct eng_conn;
struct io_uring;

struct eng_ops {
	/* n > 0 bytes arrived on c. */
	void (*on_data)(struct eng *e, struct eng_conn *c, const uint8_t *p,
			size_t n, uint64_t now);
	/* n bytes of what unsent() offered went out. */
	void (*on_sent)(struct eng *e, struct eng_conn *c, size_t n);
	/* The bytes waiting to be sent as up to two iovecs; the count. */
	int (*unsent)(struct eng *e, struct eng_conn *c, struct iovec *iov);
	/* c failed: err is a positive errno, 0 for EOF.  The program ends
	 * it (eng_conn_kill() or its own equivalent). */
	void (*on_error)(struct eng *e, struct eng_conn *c, int err);
	/* Once per loop iteration, after the events: the ns the loop may
	 * wait for the next event, or 0 to end the loop. */
	uint64_t (*tick)(struct eng *e, uint64_t now);
};

/* The engine's part of a connection. */
#define ENG_CONN_MEMBERS                                            \
	int fd;                                                     \
	bool dead; /* failed or killed: no more I/O */              \
	bool dirty; /* on the engine's flush list */                \
	bool pollout; /* epoll: EPOLLOUT armed */                   \
	bool rx_off; /* reading stopped (eng_conn_rx) */            \
	bool tx_busy; /* uring: a send in flight */                 \
	bool rx_busy; /* uring: a recv in flight */                 \
	uint8_t *rxbuf; /* uring: e->rxlen bytes (the program's) */ \
	struct iovec iov[2]; /* uring: the send in flight */        \
	struct msghdr msg;

struct eng_conn {
	ENG_CONN_MEMBERS
};

/* The engine's part of a connection dying (epoll: leave the set). */
typedef void (*eng_dead_fn)(struct eng *e, struct eng_conn *c);

/* The engine's state, per thread. */
#define ENG_MEMBERS                                                  \
	const struct eng_ops *ops;                                   \
	enum eng_kind kind;                                          \
	struct eng_conn **flush; /* dirty connections (max_conns) */ \
	uint32_t nflush;                                             \
	uint32_t max_conns;                                          \
	size_t rxlen; /* uring: bytes of each connection's rxbuf */  \
	int epfd; /* epoll engine */                                 \
	struct io_uring *ring; /* uring engine */                    \
	eng_dead_fn on_dead; /* set by eng_setup() */                \
	char err[160]; /* a fatal engine error, or "" */

struct eng {
	ENG_MEMBERS
};

/* Record a fatal error (the first one sticks). */
void eng_error(struct eng *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Set up kind's epoll set or ring for up to max_conns connections (the
 * flush list too, unless e->flush is set).  0, or -1 (e->err says why). */
int eng_setup(struct eng *e, enum eng_kind kind, uint32_t max_conns);
/* Safe to call whether or not eng_setup() ran (or succeeded). */
void eng_free(struct eng *e);
/* Watch a connected c->fd: 0, or -1 with errno. */
int eng_add(struct eng *e, struct eng_conn *c);
/* Run the loop until ops->tick returns 0: 0, or -1 (e->err). */
int eng_run(struct eng *e);

/* c has bytes to send: they go out after this loop iteration. */
static inline void eng_mark_dirty(struct eng *e, struct eng_conn *c)
{
	if (!c->dirty) {
		c->dirty = true;
		e->flush[e->nflush++] = c;
	}
}

/* End c: no more I/O on it; operations in flight finish (see
 * eng_conn_busy()).  The fd stays open for the program to close. */
void eng_conn_kill(struct eng *e, struct eng_conn *c);
/* True while the engine still has an operation on c in flight (uring):
 * neither close its fd nor reuse it until this is false. */
static inline bool eng_conn_busy(const struct eng_conn *c)
{
	return c->rx_busy || c->tx_busy;
}
/* Stop (on = false) or resume reading c: a client that stops reading. */
void eng_conn_rx(struct eng *e, struct eng_conn *c, bool on);

/* 0 if the io_uring engine can run here; -ENOSYS when it is not compiled
 * in (no liburing when it was built), or why the kernel refused a ring. */
int eng_uring_probe(void);

/*
 * Connect a new non-blocking TCP socket (TCP_NODELAY) to sa, waiting up
 * to timeout_ns: 0 with *fd set, or a positive errno (*fd is then the
 * socket, or -1, for the caller to close).
 */
int eng_connect(const struct sockaddr *sa, socklen_t salen, uint64_t timeout_ns,
		int *fd);
/* The same with SO_RCVBUF set to rcvbuf bytes (0: the system's, which
 * grows as the kernel likes): a client whose buffers are bounded. */
int eng_connect_rcvbuf(const struct sockaddr *sa, socklen_t salen,
		       uint64_t timeout_ns, int rcvbuf, int *fd);

/* The engines (epoll.c, uring.c); eng_setup() and friends dispatch. */
int eng_epoll_setup(struct eng *e);
void eng_epoll_free(struct eng *e);
int eng_epoll_add(struct eng *e, struct eng_conn *c);
int eng_epoll_run(struct eng *e);
void eng_epoll_rx(struct eng *e, struct eng_conn *c);
int eng_uring_setup(struct eng *e);
void eng_uring_free(struct eng *e);
int eng_uring_add(struct eng *e, struct eng_conn *c);
int eng_uring_run(struct eng *e);
void eng_uring_rx(struct eng *e, struct eng_conn *c);

#endif /* AO_TOOLS_ENGINE_H */
