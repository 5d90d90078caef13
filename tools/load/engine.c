// SPDX-License-Identifier: MIT
/*
 * ao-load on the shared client engines (tools/common/engine.h): the
 * callbacks that hand the engine's events to the request logic of load.c,
 * and the engine entry points main() calls.
 */
#include <errno.h>
#include <string.h>
#include <aorta/clock.h>
#include <aorta/compiler.h>
#include "load.h"

static struct worker *to_worker(struct eng *e)
{
	return container_of(e, struct worker, eng);
}

static struct conn *to_conn(struct eng_conn *c)
{
	return container_of(c, struct conn, ec);
}

static void load_on_data(struct eng *e, struct eng_conn *c, const uint8_t *p,
			 size_t n, uint64_t now)
{
	struct conn *lc = to_conn(c);

	if (lc->ws)
		conn_on_ws_data(to_worker(e), lc, p, n, now);
	else
		conn_on_data(to_worker(e), lc, p, n, now);
}

static void load_on_sent(struct eng *e, struct eng_conn *c, size_t n)
{
	conn_on_sent(to_worker(e), to_conn(c), n);
}

static int load_unsent(struct eng *e, struct eng_conn *c, struct iovec *iov)
{
	return conn_unsent(to_worker(e), to_conn(c), iov);
}

static void load_on_error(struct eng *e, struct eng_conn *c, int err)
{
	conn_fail(to_worker(e), to_conn(c), err);
}

static uint64_t load_tick(struct eng *e, uint64_t now)
{
	return worker_tick(to_worker(e), now);
}

static const struct eng_ops load_ops = {
	.on_data = load_on_data,
	.on_sent = load_on_sent,
	.unsent = load_unsent,
	.on_error = load_on_error,
	.tick = load_tick,
};

/* The uring engine's receive buffer per connection: its whole pipeline,
 * within 4-64 KiB (worker_setup() allocates the same). */
static size_t load_rxlen(const struct worker *w)
{
	size_t n = (size_t)w->ctx->o.pipeline * w->tx_len;

	return n < 4096 ? 4096 : n > 65536 ? 65536 : n;
}

/* Watch every connection and queue its first requests. */
static int engine_start(struct worker *w)
{
	uint64_t now = ao_now_ns();
	uint32_t k;

	for (k = 0; k < w->nconns; k++) {
		struct conn *c = &w->conns[k];

		if (eng_add(&w->eng, &c->ec)) {
			if (w->kind == ENG_URING) {
				conn_fail(w, c, ENOBUFS);
				continue;
			}
			worker_error(w, "epoll_ctl: %s", strerror(errno));
			return -1;
		}
		conn_fill(w, c, now);
	}
	return 0;
}

int engine_epoll_run(struct worker *w)
{
	int r;

	w->ops = &load_ops;
	if (eng_setup(&w->eng, ENG_EPOLL, w->nconns))
		return -1;
	r = engine_start(w);
	if (!r)
		r = eng_run(&w->eng);
	eng_free(&w->eng);
	return r;
}

int engine_uring_setup(struct worker *w)
{
	w->ops = &load_ops;
	w->rxlen = load_rxlen(w);
	return eng_setup(&w->eng, ENG_URING, w->nconns);
}

void engine_uring_free(struct worker *w)
{
	eng_uring_free(&w->eng);
}

int engine_uring_run(struct worker *w)
{
	int r;

	if (!w->ring)
		return -1;
	r = engine_start(w);
	if (!r)
		r = eng_run(&w->eng);
	engine_uring_free(w);
	return r;
}

int engine_uring_probe(void)
{
	return eng_uring_probe();
}
