// SPDX-License-Identifier: MIT
/*
 * ao-load's epoll engine: one epoll set per worker, level-triggered
 * EPOLLIN on every connection, EPOLLOUT only while a send is short.  Each
 * loop iteration reads what is ready into one buffer, checks and completes
 * frames, then sends the new requests of every connection that has any
 * with one send (or sendmsg, when the ring wraps) each.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <aorta/clock.h>
#include "load.h"

#define RXBUF (256 * 1024)
#define MAX_EVENTS 256

static int ep_mod(int epfd, struct conn *c, bool out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0),
				  .data.u32 = c->idx };

	c->pollout = out;
	return epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* A dead connection leaves the set, or its hang-up would spin the loop. */
static void ep_dead(struct worker *w, struct conn *c)
{
	epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
}

static void ep_flush(struct worker *w, int epfd)
{
	struct msghdr msg;
	uint32_t i;
	ssize_t r;

	for (i = 0; i < w->nflush; i++) {
		struct conn *c = w->flush[i];
		struct iovec iov[2];
		int n;

		c->dirty = false;
		if (c->dead)
			continue;
		n = conn_unsent(w, c, iov);
		if (n) {
			if (n == 1) {
				r = send(c->fd, iov[0].iov_base, iov[0].iov_len,
					 MSG_NOSIGNAL | MSG_DONTWAIT);
			} else {
				memset(&msg, 0, sizeof(msg));
				msg.msg_iov = iov;
				msg.msg_iovlen = (size_t)n;
				r = sendmsg(c->fd, &msg,
					    MSG_NOSIGNAL | MSG_DONTWAIT);
			}
			if (r < 0 && errno != EAGAIN && errno != EINTR) {
				conn_fail(w, c, errno);
				continue;
			}
			if (r > 0)
				conn_on_sent(w, c, (size_t)r);
			n = conn_unsent(w, c, iov);
		}
		/* Poll for room only while some bytes wait for it. */
		if (!!n != c->pollout && ep_mod(epfd, c, !!n))
			conn_fail(w, c, errno);
	}
	w->nflush = 0;
}

static void ep_read(struct worker *w, struct conn *c, uint8_t *buf,
		    uint64_t now)
{
	ssize_t r;

	for (;;) {
		r = read(c->fd, buf, RXBUF);
		if (r > 0) {
			conn_on_data(w, c, buf, (size_t)r, now);
			if (r < RXBUF || c->dead)
				return;
			continue;
		}
		if (r == 0)
			conn_fail(w, c, 0);
		else if (errno != EAGAIN && errno != EINTR)
			conn_fail(w, c, errno);
		return;
	}
}

int engine_epoll_run(struct worker *w)
{
	struct epoll_event evs[MAX_EVENTS];
	uint8_t *buf = malloc(RXBUF);
	uint64_t now, wait;
	struct timespec ts;
	int epfd, n, i;
	uint32_t k;

	epfd = epoll_create1(EPOLL_CLOEXEC);
	w->epfd = epfd;
	w->on_dead = ep_dead;
	if (epfd < 0 || !buf) {
		worker_error(w, "epoll_create1: %s", strerror(errno));
		free(buf);
		return -1;
	}
	for (k = 0; k < w->nconns; k++) {
		struct conn *c = &w->conns[k];
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = k };

		if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev)) {
			worker_error(w, "epoll_ctl: %s", strerror(errno));
			close(epfd);
			free(buf);
			return -1;
		}
	}
	now = ao_now_ns();
	for (k = 0; k < w->nconns; k++)
		conn_fill(w, &w->conns[k], now);
	for (;;) {
		wait = worker_tick(w, now);
		if (!wait)
			break;
		ep_flush(w, epfd);
		ts.tv_sec = (time_t)(wait / 1000000000);
		ts.tv_nsec = (long)(wait % 1000000000);
		n = epoll_pwait2(epfd, evs, MAX_EVENTS, &ts, NULL);
		if (n < 0 && errno == ENOSYS) {
			/* Before Linux 5.11: round up to milliseconds. */
			n = epoll_wait(epfd, evs, MAX_EVENTS,
				       (int)((wait + 999999) / 1000000));
		}
		if (n < 0 && errno != EINTR) {
			worker_error(w, "epoll_wait: %s", strerror(errno));
			break;
		}
		now = ao_now_ns();
		for (i = 0; i < n; i++) {
			struct conn *c = &w->conns[evs[i].data.u32];

			if (c->dead)
				continue;
			if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
				ep_read(w, c, buf, now);
			if (!c->dead && (evs[i].events & EPOLLOUT) &&
			    !c->dirty) {
				c->dirty = true;
				w->flush[w->nflush++] = c;
			}
		}
	}
	close(epfd);
	free(buf);
	return w->err[0] ? -1 : 0;
}
