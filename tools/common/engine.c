// SPDX-License-Identifier: MIT
/*
 * The engines' common part: setup and dispatch, connection end and
 * connect.  See engine.h.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "engine.h"

void eng_error(struct eng *e, const char *fmt, ...)
{
	va_list ap;

	if (e->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(e->err, sizeof(e->err), fmt, ap);
	va_end(ap);
}

int eng_setup(struct eng *e, enum eng_kind kind, uint32_t max_conns)
{
	e->kind = kind;
	e->max_conns = max_conns;
	e->epfd = -1;
	if (!e->flush) {
		e->flush = calloc(max_conns ? max_conns : 1, sizeof(*e->flush));
		if (!e->flush) {
			eng_error(e, "out of memory");
			return -1;
		}
	}
	if (kind == ENG_URING)
		return eng_uring_setup(e);
	return eng_epoll_setup(e);
}

void eng_free(struct eng *e)
{
	if (e->kind == ENG_URING)
		eng_uring_free(e);
	else
		eng_epoll_free(e);
}

int eng_add(struct eng *e, struct eng_conn *c)
{
	c->dead = false;
	c->dirty = false;
	c->pollout = false;
	c->rx_off = false;
	c->tx_busy = false;
	c->rx_busy = false;
	if (e->kind == ENG_URING)
		return eng_uring_add(e, c);
	return eng_epoll_add(e, c);
}

int eng_run(struct eng *e)
{
	if (e->kind == ENG_URING)
		return eng_uring_run(e);
	return eng_epoll_run(e);
}

void eng_conn_kill(struct eng *e, struct eng_conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	/* Wakes any operation in flight; the program closes the fd. */
	shutdown(c->fd, SHUT_RDWR);
	if (e->on_dead)
		e->on_dead(e, c);
}

void eng_conn_rx(struct eng *e, struct eng_conn *c, bool on)
{
	if (c->dead || c->rx_off == !on)
		return;
	c->rx_off = !on;
	if (e->kind == ENG_URING)
		eng_uring_rx(e, c);
	else
		eng_epoll_rx(e, c);
}

int eng_connect(const struct sockaddr *sa, socklen_t salen, uint64_t timeout_ns,
		int *fd)
{
	return eng_connect_rcvbuf(sa, salen, timeout_ns, 0, fd);
}

int eng_connect_rcvbuf(const struct sockaddr *sa, socklen_t salen,
		       uint64_t timeout_ns, int rcvbuf, int *fd)
{
	int one = 1, err = 0, r;
	socklen_t len = sizeof(err);
	struct pollfd pfd;

	*fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		     0);
	if (*fd < 0)
		return errno;
	if (setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		return errno;
	/* Before connect(), so that the window scale agrees with it. */
	if (rcvbuf &&
	    setsockopt(*fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)))
		return errno;
	if (!connect(*fd, sa, salen))
		return 0;
	if (errno != EINPROGRESS)
		return errno;
	pfd.fd = *fd;
	pfd.events = POLLOUT;
	do {
		r = poll(&pfd, 1, (int)(timeout_ns / 1000000));
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return errno;
	if (r == 0)
		return ETIMEDOUT;
	if (getsockopt(*fd, SOL_SOCKET, SO_ERROR, &err, &len))
		return errno;
	return err;
}
