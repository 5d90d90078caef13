// SPDX-License-Identifier: MIT
/*
 * The epoll engine: one epoll set per thread, level-triggered EPOLLIN on
 * every connection, EPOLLOUT only while a send is short.  Each loop
 * iteration reads what is ready into one buffer and hands it to the
 * program, then sends what every dirty connection has with one send (or
 * sendmsg, when its bytes wrap) each.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <aorta/clock.h>
#include "engine.h"

#define RXBUF (256 * 1024)
#define MAX_EVENTS 256

static int ep_mod(int epfd, struct eng_conn *c, bool out)
{
	struct epoll_event ev = { .events = (c->rx_off ? 0 : EPOLLIN) |
					    (out ? EPOLLOUT : 0),
				  .data.ptr = c };

	c->pollout = out;
	return epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* A dead connection leaves the set, or its hang-up would spin the loop. */
static void ep_dead(struct eng *e, struct eng_conn *c)
{
	epoll_ctl(e->epfd, EPOLL_CTL_DEL, c->fd, NULL);
}

int eng_epoll_setup(struct eng *e)
{
	e->on_dead = ep_dead;
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (e->epfd < 0) {
		eng_error(e, "epoll_create1: %s", strerror(errno));
		return -1;
	}
	return 0;
}

void eng_epoll_free(struct eng *e)
{
	if (e->epfd >= 0)
		close(e->epfd);
	e->epfd = -1;
}

int eng_epoll_add(struct eng *e, struct eng_conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

	return epoll_ctl(e->epfd, EPOLL_CTL_ADD, c->fd, &ev);
}

void eng_epoll_rx(struct eng *e, struct eng_conn *c)
{
	if (ep_mod(e->epfd, c, c->pollout))
		e->ops->on_error(e, c, errno);
}

static void ep_flush(struct eng *e, int epfd)
{
	struct msghdr msg;
	uint32_t i;
	ssize_t r;

	for (i = 0; i < e->nflush; i++) {
		struct eng_conn *c = e->flush[i];
		struct iovec iov[2];
		int n;

		c->dirty = false;
		if (c->dead)
			continue;
		n = e->ops->unsent(e, c, iov);
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
				e->ops->on_error(e, c, errno);
				continue;
			}
			if (r > 0)
				e->ops->on_sent(e, c, (size_t)r);
			if (c->dead)
				continue;
			n = e->ops->unsent(e, c, iov);
		}
		/* Poll for room only while some bytes wait for it. */
		if (!!n != c->pollout && ep_mod(epfd, c, !!n))
			e->ops->on_error(e, c, errno);
	}
	e->nflush = 0;
}

static void ep_read(struct eng *e, struct eng_conn *c, uint8_t *buf,
		    uint64_t now)
{
	ssize_t r;

	for (;;) {
		r = read(c->fd, buf, RXBUF);
		if (r > 0) {
			e->ops->on_data(e, c, buf, (size_t)r, now);
			if (r < RXBUF || c->dead || c->rx_off)
				return;
			continue;
		}
		if (r == 0)
			e->ops->on_error(e, c, 0);
		else if (errno != EAGAIN && errno != EINTR)
			e->ops->on_error(e, c, errno);
		return;
	}
}

int eng_epoll_run(struct eng *e)
{
	struct epoll_event evs[MAX_EVENTS];
	uint8_t *buf = malloc(RXBUF);
	uint64_t now, wait;
	struct timespec ts;
	int epfd = e->epfd, n, i;

	if (!buf) {
		eng_error(e, "out of memory");
		return -1;
	}
	now = ao_now_ns();
	for (;;) {
		wait = e->ops->tick(e, now);
		if (!wait)
			break;
		ep_flush(e, epfd);
		ts.tv_sec = (time_t)(wait / 1000000000);
		ts.tv_nsec = (long)(wait % 1000000000);
		n = epoll_pwait2(epfd, evs, MAX_EVENTS, &ts, NULL);
		if (n < 0 && errno == ENOSYS) {
			/* Before Linux 5.11: round up to milliseconds. */
			n = epoll_wait(epfd, evs, MAX_EVENTS,
				       (int)((wait + 999999) / 1000000));
		}
		if (n < 0 && errno != EINTR) {
			eng_error(e, "epoll_wait: %s", strerror(errno));
			break;
		}
		now = ao_now_ns();
		for (i = 0; i < n; i++) {
			struct eng_conn *c = evs[i].data.ptr;

			if (c->dead)
				continue;
			/* A connection that stopped reading still learns
			 * of an error or a hang-up. */
			if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
				ep_read(e, c, buf, now);
			if (!c->dead && (evs[i].events & EPOLLOUT))
				eng_mark_dirty(e, c);
		}
	}
	free(buf);
	return e->err[0] ? -1 : 0;
}
