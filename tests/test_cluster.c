// SPDX-License-Identifier: MIT
/*
 * cluster/: nodes on a nats-server the runner starts (loopback, free port,
 * JetStream, scratch store).  Publish and subscribe across two nodes in one
 * process (order, pooled buffers kept by reference, the subscription's
 * strand, queue groups); request and reply, a timeout on aorta's timers,
 * no-responders at once; peers seen coming up and declared dead after a
 * node's connection is cut; self-freshness; the KV directory's
 * compare-and-set raced from threads of two nodes (exactly one winner per
 * revision), create over a delete, delete at a revision, keys, the
 * asynchronous forms; publishing while the server is down (bounded,
 * counted), requests failing at once, and the reconnect after a restart;
 * INFO lines far longer than 4 KiB, in the handshake and between messages
 * (a proxy in between adds them).  Skipped, and saying so, without cnats
 * (-ENOSYS) or nats-server.
 * A test that fails leaves nothing up for the next: its teardown ends
 * what it started (struct left).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <aorta/clock.h>
#include <aorta/cluster/kv.h>
#include <aorta/cluster/node.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#include "helpers.h"
#include "test_cluster_natsd.h"

static struct natsd natsd;
static const char *skip_why;
/* The second run: every node reads its subscriptions itself (cfg.direct). */
static bool direct;

struct fx {
	struct ao_exec *ex;
	struct ao_timers *ts;
	struct ao_bufpool *pool;
};

/*
 * What the running test has up, for its teardown.  A test that fails
 * jumps out of itself (CMocka's longjmp) past its own clean-up: its nodes
 * would stay on the bus, the next tests would count them as peers, and
 * their handlers and threads would run on into memory that is gone.  The
 * helpers that start something note it here and those that end it forget
 * it; reclaim(), every test's teardown, ends whatever is still noted (a
 * test that passed has ended everything itself).  Only the test's own
 * thread touches it.
 */
#define LEFT_MAX 8

struct proxy;

struct left_thread {
	pthread_t thread;
	int *stop; /* set to 1 before the join, or NULL */
	bool on;
};

static struct left {
	struct fx fx; /* from fx_init() to fx_fini() */
	void *nodes[LEFT_MAX]; /* struct ao_node */
	void *subs[LEFT_MAX]; /* struct ao_sub */
	void *kvs[LEFT_MAX]; /* struct ao_kv */
	struct left_thread threads[LEFT_MAX];
	struct proxy *proxy;
	struct natsd *natsd; /* a server of the test's own */
} left;

static void left_note(void **v, void *p)
{
	int i;

	for (i = 0; i < LEFT_MAX; i++) {
		if (!v[i]) {
			v[i] = p;
			return;
		}
	}
	fail_msg("more than %d at once: raise LEFT_MAX", LEFT_MAX);
}

static void left_forget(void **v, void *p)
{
	int i;

	for (i = 0; i < LEFT_MAX; i++)
		if (v[i] == p)
			v[i] = NULL;
}

static void fx_init(struct fx *f)
{
	struct ao_timers_config tc = AO_TIMERS_CONFIG_INIT;
	struct ao_bufpool_params bp = { .buf_size = 2048, .count = 4096 };
	struct fx *l = &left.fx;

	l->ex = t_exec_create(AO_EXEC_SHARED, 2, 0, AO_EXEC_BLOCK);
	tc.exec = l->ex;
	assert_int_equal(ao_timers_create(&tc, &l->ts), 0);
	assert_int_equal(ao_bufpool_create(&l->pool, &bp), 0);
	*f = *l;
}

static void fx_fini(struct fx *f)
{
	memset(&left.fx, 0, sizeof(left.fx));
	assert_int_equal(ao_exec_drain(f->ex), 0);
	assert_int_equal(ao_timers_destroy(f->ts, NULL), 0);
	assert_int_equal(ao_exec_destroy(f->ex), 0);
	assert_int_equal(ao_bufpool_destroy(f->pool), 0);
}

static void node_cfg(struct ao_node_config *c, struct fx *f, const char *name,
		     const char *url)
{
	*c = (struct ao_node_config)AO_NODE_CONFIG_INIT;
	c->url = url;
	c->name = name;
	c->exec = f->ex;
	c->pool = f->pool;
	c->direct = direct;
}

static struct ao_node *node_create(const struct ao_node_config *c)
{
	struct ao_node *n;

	assert_int_equal(ao_node_create(c, &n), 0);
	left_note(left.nodes, n);
	return n;
}

static struct ao_node *node_up(struct fx *f, const char *name)
{
	struct ao_node_config c;
	struct ao_node *n;

	node_cfg(&c, f, name, natsd.url);
	n = node_create(&c);
	assert_int_equal(ao_node_start(n), 0);
	return n;
}

static void node_destroy(struct ao_node *n)
{
	assert_int_equal(ao_node_destroy(n), 0);
	left_forget(left.nodes, n);
}

static void node_down(struct ao_node *n)
{
	assert_int_equal(ao_node_stop(n), 0);
	node_destroy(n);
}

static int node_subscribe(struct ao_node *n, const char *subject,
			  const char *queue, struct ao_strand *s,
			  ao_msg_fn handler, void *arg, struct ao_sub **out)
{
	int err = ao_node_subscribe(n, subject, queue, s, handler, arg, out);

	if (!err)
		left_note(left.subs, *out);
	return err;
}

static int sub_close(struct ao_sub *sub)
{
	left_forget(left.subs, sub);
	return ao_sub_close(sub);
}

static int kv_open(struct ao_node *n, const char *bucket, bool create,
		   struct ao_kv **out)
{
	int err = ao_kv_open(n, bucket, create, out);

	if (!err)
		left_note(left.kvs, *out);
	return err;
}

static void kv_close(struct ao_kv *kv)
{
	left_forget(left.kvs, kv);
	ao_kv_close(kv);
}

/* A thread of the test's; stop (or NULL) tells it to end. */
static void thread_start(pthread_t *t, void *(*fn)(void *), void *arg,
			 int *stop)
{
	int i;

	for (i = 0; i < LEFT_MAX && left.threads[i].on; i++)
		;
	assert_true(i < LEFT_MAX);
	assert_int_equal(pthread_create(t, NULL, fn, arg), 0);
	left.threads[i] = (struct left_thread){ *t, stop, true };
}

static void thread_join(pthread_t t)
{
	int i;

	for (i = 0; i < LEFT_MAX; i++)
		if (left.threads[i].on &&
		    pthread_equal(left.threads[i].thread, t))
			left.threads[i].on = false;
	pthread_join(t, NULL);
}

/* A nats-server of the test's own (static: reclaim() may stop it). */
static void own_natsd_start(struct natsd *d)
{
	left.natsd = d;
	assert_int_equal(natsd_start(d), 0);
}

static void own_natsd_stop(struct natsd *d)
{
	left.natsd = NULL;
	natsd_stop(d);
}

#define SKIP_IF_NO_BUS()        \
	do {                    \
		if (skip_why)   \
			skip(); \
	} while (0)

/* ---------------------------------------------------------------------
 * Publish and subscribe
 */

struct rx {
	struct ao_strand strand;
	struct ao_bufpool *pool;
	int probes; /* atomic */
	long got; /* atomic */
	long next; /* strand */
	int bad; /* atomic */
	int inside; /* atomic */
	struct ao_buf *kept[16];
	int nkept;
};

static void rx_handler(struct ao_msg *msg, void *arg)
{
	struct rx *r = arg;
	long seq;

	if (__atomic_add_fetch(&r->inside, 1, __ATOMIC_RELAXED) != 1)
		__atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
	if (ao_strand_current() != &r->strand || msg->buf->pool != r->pool ||
	    msg->data != msg->buf->data || msg->len != msg->buf->len)
		__atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
	if (msg->len == 5 && !memcmp(msg->data, "probe", 5)) {
		__atomic_add_fetch(&r->probes, 1, __ATOMIC_RELEASE);
	} else if (msg->len == sizeof(seq)) {
		memcpy(&seq, msg->data, sizeof(seq));
		if (seq != r->next)
			__atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
		r->next = seq + 1;
		/* Keep a few by reference, as the arena forwards them. */
		if (seq % 100 == 0 && r->nkept < 16)
			r->kept[r->nkept++] = ao_buf_ref(msg->buf);
		__atomic_add_fetch(&r->got, 1, __ATOMIC_RELEASE);
	}
	__atomic_sub_fetch(&r->inside, 1, __ATOMIC_RELAXED);
}

/* Publish probes until the subscriber's interest has reached the server
 * (a subscribe does not wait for it). */
static void probe_until_seen(struct ao_node *pub, const char *subject,
			     int *probes)
{
	int i;

	for (i = 0; i < 2000; i++) {
		assert_int_equal(ao_node_publish(pub, subject, "probe", 5), 0);
		t_sleep_ns(2000000);
		if (__atomic_load_n(probes, __ATOMIC_ACQUIRE))
			return;
	}
	fail_msg("the subscription never saw a probe");
}

/* Wait up to ms_max ms for r to have n numbered messages; if it has not,
 * fail with what the subscriber's node counted: a message that finds the
 * pool empty is dropped there (in_dropped), not late. */
static void rx_wait(struct rx *r, struct ao_node *node, long n, int ms_max)
{
	struct ao_node_stats st;
	long got;
	int i;

	for (i = 0;
	     i < ms_max && __atomic_load_n(&r->got, __ATOMIC_ACQUIRE) < n; i++)
		t_sleep_ns(1000000);
	got = __atomic_load_n(&r->got, __ATOMIC_ACQUIRE);
	if (got >= n)
		return;
	ao_node_stats(node, &st);
	fail_msg("the subscriber has %ld of %ld messages after %d ms: its "
		 "node handed out %llu and dropped %llu (in_dropped)",
		 got, n, ms_max, (unsigned long long)st.msgs_in,
		 (unsigned long long)st.in_dropped);
}

static void test_pubsub_order(void **state)
{
	struct fx f;
	struct ao_node *a, *b;
	struct ao_sub *sub;
	struct ao_node_stats st;
	struct rx *r;
	long i, n = t_scaled(5000, 500);
	int k;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	r = calloc(1, sizeof(*r));
	assert_non_null(r);
	ao_strand_init(&r->strand, f.ex);
	r->pool = f.pool;
	a = node_up(&f, "a");
	b = node_up(&f, "b");
	assert_string_equal(ao_node_name(a), "a");
	assert_true(ao_node_epoch(a) != 0);
	assert_true(ao_node_epoch(a) != ao_node_epoch(b));
	assert_int_equal(node_subscribe(b, "t.order", NULL, &r->strand,
					rx_handler, r, &sub),
			 0);
	probe_until_seen(a, "t.order", &r->probes);
	for (i = 0; i < n; i++) {
		int err;

		do {
			err = ao_node_publish(a, "t.order", &i, sizeof(i));
			if (err == -ENOBUFS)
				t_sleep_ns(100000);
		} while (err == -ENOBUFS);
		assert_int_equal(err, 0);
		/* Paced: the subscriber's copies come from the same pool of
		 * 4,096 buffers, and a message that finds it empty is dropped
		 * and counted (in_dropped); a strand that fell 4,096 behind on
		 * two busy CPUs lost the rest, once in CI. */
		if (i % 1000 == 999)
			rx_wait(r, b, i - 999, 20000);
	}
	rx_wait(r, b, n, 20000);
	assert_int_equal(__atomic_load_n(&r->got, __ATOMIC_ACQUIRE), n);
	assert_int_equal(__atomic_load_n(&r->bad, __ATOMIC_RELAXED), 0);
	assert_int_equal(sub_close(sub), 0);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	/* The buffers kept by reference are intact and the pool's. */
	assert_true(r->nkept > 0);
	for (k = 0; k < r->nkept; k++) {
		long seq;

		memcpy(&seq, r->kept[k]->data, sizeof(seq));
		assert_int_equal(seq % 100, 0);
		ao_buf_put(r->kept[k]);
	}
	ao_node_stats(a, &st);
	assert_true(st.msgs_out >= (uint64_t)n);
	ao_node_stats(b, &st);
	assert_true(st.msgs_in >= (uint64_t)n);
	assert_true(st.bytes_in >= (uint64_t)n * sizeof(long));
	node_down(a);
	node_down(b);
	assert_int_equal(ao_strand_destroy(&r->strand), 0);
	free(r);
	fx_fini(&f);
}

struct qctr {
	int probes; /* atomic */
	long got; /* atomic */
};

static void q_handler(struct ao_msg *msg, void *arg)
{
	struct qctr *q = arg;

	if (msg->len == 5 && !memcmp(msg->data, "probe", 5))
		__atomic_add_fetch(&q->probes, 1, __ATOMIC_RELEASE);
	else
		__atomic_add_fetch(&q->got, 1, __ATOMIC_RELEASE);
}

/* A queue group: each message to one member; a subscription without a
 * strand gets one of the node's. */
static void test_queue_group(void **state)
{
	struct fx f;
	struct ao_node *a, *b, *c;
	struct ao_sub *sb, *sc;
	struct qctr qb = { 0 }, qc = { 0 };
	long i, n = 400;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	a = node_up(&f, "qa");
	b = node_up(&f, "qb");
	c = node_up(&f, "qc");
	assert_int_equal(node_subscribe(b, "t.q", "workers", NULL, q_handler,
					&qb, &sb),
			 0);
	assert_int_equal(node_subscribe(c, "t.q", "workers", NULL, q_handler,
					&qc, &sc),
			 0);
	/* Probes go to one member each: wait until both have one. */
	for (i = 0;
	     i < 2000 && !(__atomic_load_n(&qb.probes, __ATOMIC_ACQUIRE) &&
			   __atomic_load_n(&qc.probes, __ATOMIC_ACQUIRE));
	     i++) {
		assert_int_equal(ao_node_publish(a, "t.q", "probe", 5), 0);
		t_sleep_ns(2000000);
	}
	for (i = 0; i < n; i++)
		assert_int_equal(ao_node_publish(a, "t.q", "m", 1), 0);
	WAIT_UNTIL(__atomic_load_n(&qb.got, __ATOMIC_ACQUIRE) +
				   __atomic_load_n(&qc.got, __ATOMIC_ACQUIRE) ==
			   n,
		   20000);
	assert_int_equal(sub_close(sb), 0);
	assert_int_equal(sub_close(sc), 0);
	node_down(a);
	node_down(b);
	node_down(c);
	fx_fini(&f);
}

/* ---------------------------------------------------------------------
 * Requests
 */

struct responder {
	struct ao_node *node;
	bool silent;
	int probes; /* atomic */
};

static void echo_handler(struct ao_msg *msg, void *arg)
{
	struct responder *rs = arg;

	if (msg->len == 5 && !memcmp(msg->data, "probe", 5)) {
		__atomic_add_fetch(&rs->probes, 1, __ATOMIC_RELEASE);
		return;
	}
	if (!rs->silent)
		ao_node_respond(rs->node, msg, msg->data, msg->len);
}

struct waiter {
	struct ao_strand strand;
	int done; /* atomic */
	int err;
	int bad;
	char data[64];
	size_t len;
};

static void on_reply(int err, struct ao_msg *reply, void *arg)
{
	struct waiter *w = arg;

	if (ao_strand_current() != &w->strand)
		w->bad++;
	w->err = err;
	if (!err) {
		w->len = reply->len < sizeof(w->data) ? reply->len : 0;
		memcpy(w->data, reply->data, w->len);
	} else if (reply) {
		w->bad++;
	}
	__atomic_add_fetch(&w->done, 1, __ATOMIC_RELEASE);
}

static void test_request_reply(void **state)
{
	struct fx f;
	struct ao_node *a, *b;
	struct ao_sub *sub;
	struct responder rs = { 0 };
	struct waiter *w;
	struct ao_node_stats st;
	int i, n = 200;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	a = node_up(&f, "ra");
	b = node_up(&f, "rb");
	rs.node = b;
	assert_int_equal(node_subscribe(b, "svc.echo", NULL, NULL, echo_handler,
					&rs, &sub),
			 0);
	probe_until_seen(a, "svc.echo", &rs.probes);
	w = calloc((size_t)n, sizeof(*w));
	assert_non_null(w);
	for (i = 0; i < n; i++) {
		char text[32];
		int len = snprintf(text, sizeof(text), "ping %d", i);

		ao_strand_init(&w[i].strand, f.ex);
		assert_int_equal(ao_node_request(a, "svc.echo", text,
						 (size_t)len, 10000,
						 &w[i].strand, on_reply, &w[i]),
				 0);
	}
	for (i = 0; i < n; i++) {
		char text[32];
		int len = snprintf(text, sizeof(text), "ping %d", i);

		WAIT_UNTIL(__atomic_load_n(&w[i].done, __ATOMIC_ACQUIRE),
			   20000);
		assert_int_equal(w[i].err, 0);
		assert_int_equal(w[i].bad, 0);
		assert_int_equal(w[i].len, (size_t)len);
		assert_memory_equal(w[i].data, text, (size_t)len);
	}
	assert_int_equal(ao_exec_drain(f.ex), 0);
	for (i = 0; i < n; i++) {
		assert_int_equal(w[i].done, 1); /* exactly once */
		assert_int_equal(ao_strand_destroy(&w[i].strand), 0);
	}
	ao_node_stats(a, &st);
	assert_int_equal(st.requests, (uint64_t)n);
	assert_int_equal(st.replies, (uint64_t)n);
	assert_int_equal(sub_close(sub), 0);
	node_down(a);
	node_down(b);
	free(w);
	fx_fini(&f);
}

static void test_request_timeout(void **state)
{
	struct fx f;
	struct ao_node *a, *b;
	struct ao_sub *sub;
	struct responder rs = { .silent = true };
	struct waiter w = { 0 };
	struct ao_node_stats st;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	a = node_up(&f, "ta");
	b = node_up(&f, "tb");
	rs.node = b;
	assert_int_equal(node_subscribe(b, "svc.silent", NULL, NULL,
					echo_handler, &rs, &sub),
			 0);
	probe_until_seen(a, "svc.silent", &rs.probes);
	ao_strand_init(&w.strand, f.ex);
	assert_int_equal(ao_node_request(a, "svc.silent", "x", 1, 100,
					 &w.strand, on_reply, &w),
			 0);
	WAIT_UNTIL(__atomic_load_n(&w.done, __ATOMIC_ACQUIRE), 20000);
	assert_int_equal(w.err, -ETIMEDOUT);
	assert_int_equal(w.bad, 0);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	assert_int_equal(w.done, 1);
	ao_node_stats(a, &st);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(sub_close(sub), 0);
	assert_int_equal(ao_strand_destroy(&w.strand), 0);
	node_down(a);
	node_down(b);
	fx_fini(&f);
}

/* Nobody subscribes: the bus says so at once.  The timeout is 60 s, so
 * an answer before the runner's watchdog is the server's status. */
static void test_no_responders(void **state)
{
	struct fx f;
	struct ao_node *a;
	struct waiter w = { 0 };
	struct ao_node_stats st;
	uint64_t t0, dt;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	a = node_up(&f, "na");
	ao_strand_init(&w.strand, f.ex);
	t0 = t_now_ns();
	assert_int_equal(ao_node_request(a, "svc.nobody", "x", 1, 60000,
					 &w.strand, on_reply, &w),
			 0);
	WAIT_UNTIL(__atomic_load_n(&w.done, __ATOMIC_ACQUIRE), 30000);
	dt = t_now_ns() - t0;
	print_message("no-responders after %.3f ms\n", (double)dt / 1e6);
	assert_int_equal(w.err, -EHOSTUNREACH);
	ao_node_stats(a, &st);
	assert_int_equal(st.no_responders, 1);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	assert_int_equal(ao_strand_destroy(&w.strand), 0);
	/* Refusals. */
	assert_int_equal(ao_node_request(a, "", "x", 1, 10, NULL, on_reply, &w),
			 -EINVAL);
	assert_int_equal(ao_node_request(a, "s", "x", 1, 10, NULL, NULL, &w),
			 -EINVAL);
	assert_int_equal(ao_node_publish(a, "bad subject", "x", 1), -EINVAL);
	node_down(a);
	fx_fini(&f);
}

/* ---------------------------------------------------------------------
 * Many threads at once (a stress test for TSan): publishers whose order
 * each holds, requesters, and a thread that subscribes and closes over
 * and over while messages to that subject flow.
 */

#define MT_PUBS 4
#define MT_REQS 2
#define MT_WINDOW 1000 /* publications the subscriber may be behind */

struct mt {
	struct ao_node *a, *b;
	struct ao_strand strand;
	struct fx *f;
	long per; /* messages per publisher */
	long next[MT_PUBS]; /* strand: next seq per publisher */
	long sent; /* atomic: published */
	long got; /* atomic */
	int bad; /* atomic */
	int probes; /* atomic */
	int stop; /* atomic */
	int req_bad; /* atomic */
	long churned; /* atomic */
};

struct mt_arg {
	struct mt *m;
	int id;
};

static void mt_rx(struct ao_msg *msg, void *arg)
{
	struct mt *m = arg;
	long v[2];

	if (msg->len != sizeof(v)) {
		__atomic_add_fetch(&m->probes, 1, __ATOMIC_RELEASE);
		return;
	}
	memcpy(v, msg->data, sizeof(v));
	if (v[0] < 0 || v[0] >= MT_PUBS || m->next[v[0]] != v[1])
		__atomic_add_fetch(&m->bad, 1, __ATOMIC_RELAXED);
	else
		m->next[v[0]]++;
	__atomic_add_fetch(&m->got, 1, __ATOMIC_RELEASE);
}

/* Publications the subscriber has not yet had. */
static long mt_behind(struct mt *m)
{
	return __atomic_load_n(&m->sent, __ATOMIC_RELAXED) -
	       __atomic_load_n(&m->got, __ATOMIC_ACQUIRE);
}

static void *mt_pub(void *arg)
{
	struct mt_arg *x = arg;
	long i, v[2];
	int err;

	for (i = 0; i < x->m->per; i++) {
		/* Paced, as in test_pubsub_order: the subscriber's copies
		 * come from the pool of 4,096 buffers, and a message that
		 * finds it empty is dropped and counted (in_dropped).
		 * Unpaced, this test came up short once under UBSan in CI,
		 * most likely so.  At most 20 s: past that, the final count
		 * fails and says what the node dropped. */
		for (int k = 0; k < 200000 && mt_behind(x->m) >= MT_WINDOW; k++)
			t_sleep_ns(100000);
		v[0] = x->id;
		v[1] = i;
		while ((err = ao_node_publish(x->m->a, "t.mt", v, sizeof(v))) ==
		       -ENOBUFS)
			t_sleep_ns(100000);
		if (err)
			__atomic_add_fetch(&x->m->bad, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&x->m->sent, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *mt_req(void *arg)
{
	struct mt_arg *x = arg;
	struct waiter w;
	int i;

	memset(&w, 0, sizeof(w));
	ao_strand_init(&w.strand, x->m->f->ex);
	for (i = 0; i < 50; i++) {
		__atomic_store_n(&w.done, 0, __ATOMIC_RELAXED);
		if (ao_node_request(x->m->a, "svc.mt", "q", 1, 10000, &w.strand,
				    on_reply, &w)) {
			__atomic_add_fetch(&x->m->req_bad, 1, __ATOMIC_RELAXED);
			continue;
		}
		for (int k = 0;
		     k < 20000 && !__atomic_load_n(&w.done, __ATOMIC_ACQUIRE);
		     k++)
			t_sleep_ns(1000000);
		if (!__atomic_load_n(&w.done, __ATOMIC_ACQUIRE) || w.err ||
		    w.bad)
			__atomic_add_fetch(&x->m->req_bad, 1, __ATOMIC_RELAXED);
	}
	while (!ao_strand_idle(&w.strand))
		t_sleep_ns(1000000);
	ao_strand_destroy(&w.strand);
	return NULL;
}

static void churn_rx(struct ao_msg *msg, void *arg)
{
	(void)msg;
	(void)arg;
}

static void *mt_churn(void *arg)
{
	struct mt *m = arg;
	struct ao_sub *sub;

	while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
		if (ao_node_subscribe(m->b, "t.churn", NULL, NULL, churn_rx,
				      NULL, &sub) == 0) {
			ao_node_publish(m->a, "t.churn", "c", 1);
			t_sleep_ns(200000);
			ao_sub_close(sub);
			__atomic_add_fetch(&m->churned, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static void test_many_threads(void **state)
{
	struct fx f;
	struct mt *m;
	struct mt_arg pa[MT_PUBS], ra[MT_REQS];
	pthread_t pt[MT_PUBS], rt[MT_REQS], ct;
	struct ao_sub *sub, *esub;
	struct responder rs = { 0 };
	int i;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	m = calloc(1, sizeof(*m));
	assert_non_null(m);
	m->f = &f;
	m->per = t_scaled(2000, 200);
	m->a = node_up(&f, "mta");
	m->b = node_up(&f, "mtb");
	rs.node = m->b;
	ao_strand_init(&m->strand, f.ex);
	assert_int_equal(node_subscribe(m->b, "t.mt", NULL, &m->strand, mt_rx,
					m, &sub),
			 0);
	assert_int_equal(node_subscribe(m->b, "svc.mt", NULL, NULL,
					echo_handler, &rs, &esub),
			 0);
	probe_until_seen(m->a, "t.mt", &m->probes);
	probe_until_seen(m->a, "svc.mt", &rs.probes);
	thread_start(&ct, mt_churn, m, &m->stop);
	for (i = 0; i < MT_PUBS; i++) {
		pa[i] = (struct mt_arg){ .m = m, .id = i };
		thread_start(&pt[i], mt_pub, &pa[i], NULL);
	}
	for (i = 0; i < MT_REQS; i++) {
		ra[i] = (struct mt_arg){ .m = m, .id = i };
		thread_start(&rt[i], mt_req, &ra[i], NULL);
	}
	for (i = 0; i < MT_PUBS; i++)
		thread_join(pt[i]);
	for (i = 0; i < MT_REQS; i++)
		thread_join(rt[i]);
	for (i = 0; i < 60000 && __atomic_load_n(&m->got, __ATOMIC_ACQUIRE) <
					 m->per * MT_PUBS;
	     i++)
		t_sleep_ns(1000000);
	if (__atomic_load_n(&m->got, __ATOMIC_ACQUIRE) != m->per * MT_PUBS) {
		struct ao_node_stats st;

		ao_node_stats(m->b, &st);
		fail_msg("the subscriber has %ld of %ld messages: its node "
			 "handed out %llu and dropped %llu (in_dropped)",
			 __atomic_load_n(&m->got, __ATOMIC_ACQUIRE),
			 m->per * MT_PUBS, (unsigned long long)st.msgs_in,
			 (unsigned long long)st.in_dropped);
	}
	__atomic_store_n(&m->stop, 1, __ATOMIC_RELEASE);
	thread_join(ct);
	assert_int_equal(__atomic_load_n(&m->bad, __ATOMIC_RELAXED), 0);
	assert_int_equal(__atomic_load_n(&m->req_bad, __ATOMIC_RELAXED), 0);
	assert_true(__atomic_load_n(&m->churned, __ATOMIC_RELAXED) > 0);
	assert_int_equal(sub_close(sub), 0);
	assert_int_equal(sub_close(esub), 0);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	node_down(m->a);
	node_down(m->b);
	assert_int_equal(ao_strand_destroy(&m->strand), 0);
	free(m);
	fx_fini(&f);
}

/* ---------------------------------------------------------------------
 * Peers
 */

struct peer_log {
	int up; /* atomic */
	int down; /* atomic */
	uint64_t down_ns; /* atomic: when the last down came */
	uint64_t down_seen_ns; /* the dead peer's last heartbeat */
	char last_down[AO_NODE_NAME_MAX];
	int bus_up; /* atomic */
	int bus_down; /* atomic */
};

static void on_peer(struct ao_node *node, const struct ao_peer *peer, bool up,
		    void *arg)
{
	struct peer_log *l = arg;

	(void)node;
	if (up) {
		__atomic_add_fetch(&l->up, 1, __ATOMIC_RELEASE);
	} else {
		snprintf(l->last_down, sizeof(l->last_down), "%s", peer->name);
		l->down_seen_ns = peer->last_seen_ns;
		__atomic_store_n(&l->down_ns, t_now_ns(), __ATOMIC_RELAXED);
		__atomic_add_fetch(&l->down, 1, __ATOMIC_RELEASE);
	}
}

static void on_bus(struct ao_node *node, bool connected, void *arg)
{
	struct peer_log *l = arg;

	(void)node;
	if (connected)
		__atomic_add_fetch(&l->bus_up, 1, __ATOMIC_RELEASE);
	else
		__atomic_add_fetch(&l->bus_down, 1, __ATOMIC_RELEASE);
}

static void test_peers_up_and_dead(void **state)
{
	struct fx f;
	struct ao_node_config c;
	struct ao_node *n[3];
	struct peer_log log[3];
	struct ao_peer peers[4], p;
	static const char *const names[3] = { "p0", "p1", "p2" };
	uint64_t cut, dt;
	int i;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	memset(log, 0, sizeof(log));
	for (i = 0; i < 3; i++) {
		node_cfg(&c, &f, names[i], natsd.url);
		c.on_peer = on_peer;
		c.on_bus = on_bus;
		c.arg = &log[i];
		n[i] = node_create(&c);
		ao_node_set_load(n[i], 10 + (uint64_t)i);
		assert_int_equal(ao_node_start(n[i]), 0);
	}
	for (i = 0; i < 3; i++) {
		WAIT_UNTIL(ao_node_peers(n[i], peers, 4) == 2, 10000);
		WAIT_UNTIL(ao_node_self_fresh(n[i], 1000), 10000);
		assert_true(ao_node_connected(n[i]));
	}
	assert_int_equal(ao_node_peer(n[0], "p2", &p), 0);
	assert_int_equal(p.epoch, ao_node_epoch(n[2]));
	WAIT_UNTIL(ao_node_peer(n[0], "p2", &p) == 0 && p.load == 12, 10000);
	assert_int_equal(ao_node_peer(n[0], "p0", &p), -ENOENT); /* itself */
	assert_int_equal(ao_node_peer(n[0], "nobody", &p), -ENOENT);
	assert_int_equal(__atomic_load_n(&log[0].up, __ATOMIC_ACQUIRE), 2);

	/* Cut p2's connection: its heartbeats stop as after a kill -9. */
	cut = t_now_ns();
	assert_int_equal(ao_node_stop(n[2]), 0);
	assert_false(ao_node_connected(n[2]));
	for (i = 0; i < 2; i++) {
		WAIT_UNTIL(__atomic_load_n(&log[i].down, __ATOMIC_ACQUIRE) == 1,
			   10000);
		assert_string_equal(log[i].last_down, "p2");
		dt = __atomic_load_n(&log[i].down_ns, __ATOMIC_RELAXED) - cut;
		print_message("p%d declared p2 dead after %.0f ms (dead_ms "
			      "%u)\n",
			      i, (double)dt / 1e6, AO_NODE_DEFAULT_DEAD_MS);
		/* Never before dead_ms of silence (the same clock). */
		assert_true(__atomic_load_n(&log[i].down_ns, __ATOMIC_RELAXED) -
				    log[i].down_seen_ns >=
			    AO_NODE_DEFAULT_DEAD_MS * 1000000ull);
		assert_int_equal(ao_node_peers(n[i], peers, 4), 1);
	}
	/* A stopped node cannot show its heartbeats come back. */
	WAIT_UNTIL(!ao_node_self_fresh(n[2], 300), 10000);
	for (i = 0; i < 3; i++)
		node_down(n[i]);
	fx_fini(&f);
}

/* ---------------------------------------------------------------------
 * The KV directory
 */

#define RACERS 4

struct racer {
	struct ao_kv *kv;
	pthread_barrier_t *bar;
	int id;
	int rounds;
	uint64_t *revs; /* the revision every racer updates at, per round */
	int *wins; /* per round */
	int other; /* results that were neither 0 nor -ESTALE */
};

static void *racer_main(void *arg)
{
	struct racer *r = arg;
	char val[32];
	int round, err;

	for (round = 0; round < r->rounds; round++) {
		pthread_barrier_wait(r->bar);
		snprintf(val, sizeof(val), "racer %d round %d", r->id, round);
		err = ao_kv_update_sync(r->kv, "room.1", val, strlen(val),
					r->revs[round], NULL);
		if (err == 0)
			__atomic_add_fetch(&r->wins[round], 1,
					   __ATOMIC_RELAXED);
		else if (err != -ESTALE)
			r->other++;
		pthread_barrier_wait(r->bar);
		/* Racer 0 reads the winner's revision for the next round. */
		if (r->id == 0 && round + 1 < r->rounds) {
			char buf[64];
			size_t len;

			err = ao_kv_get_sync(r->kv, "room.1", buf, sizeof(buf),
					     &len, &r->revs[round + 1]);
			if (err)
				r->other++;
		}
		pthread_barrier_wait(r->bar);
	}
	return NULL;
}

struct creator {
	struct ao_kv *kv;
	pthread_barrier_t *bar;
	int id;
	int won;
	int other;
};

static void *creator_main(void *arg)
{
	struct creator *c = arg;
	char val[16];
	int err;

	snprintf(val, sizeof(val), "n%d", c->id);
	pthread_barrier_wait(c->bar);
	err = ao_kv_create_sync(c->kv, "room.claim", val, strlen(val), NULL);
	if (err == 0)
		c->won = 1;
	else if (err != -EEXIST)
		c->other++;
	return NULL;
}

static void test_kv_cas_race(void **state)
{
	struct fx f;
	struct ao_node *a, *b;
	struct ao_kv *ka, *kb;
	struct racer r[RACERS];
	struct creator c[RACERS];
	pthread_t th[RACERS];
	pthread_barrier_t bar;
	int rounds = (int)t_scaled(20, 5);
	uint64_t *revs, rev, rev2;
	int *wins, i, won;
	char buf[64], **keys;
	size_t len, nkeys;
	struct ao_node_stats st;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	a = node_up(&f, "ka");
	b = node_up(&f, "kb");
	assert_int_equal(kv_open(a, "AO_TEST_MISSING", false, &ka), -ENOENT);
	assert_int_equal(kv_open(a, "AO_TEST", true, &ka), 0);
	assert_int_equal(kv_open(b, "AO_TEST", false, &kb), 0);

	/* Create-if-absent, raced: one winner. */
	pthread_barrier_init(&bar, NULL, RACERS);
	for (i = 0; i < RACERS; i++) {
		c[i] = (struct creator){ .kv = i % 2 ? kb : ka,
					 .bar = &bar,
					 .id = i };
		thread_start(&th[i], creator_main, &c[i], NULL);
	}
	for (won = 0, i = 0; i < RACERS; i++) {
		thread_join(th[i]);
		won += c[i].won;
		assert_int_equal(c[i].other, 0);
	}
	assert_int_equal(won, 1);
	pthread_barrier_destroy(&bar);

	/* Update at a revision, raced round after round: one winner each. */
	assert_int_equal(ao_kv_create_sync(ka, "room.1", "v0", 2, &rev), 0);
	assert_true(rev > 0);
	revs = calloc((size_t)rounds, sizeof(*revs));
	wins = calloc((size_t)rounds, sizeof(*wins));
	assert_non_null(revs);
	assert_non_null(wins);
	revs[0] = rev;
	pthread_barrier_init(&bar, NULL, RACERS);
	for (i = 0; i < RACERS; i++) {
		r[i] = (struct racer){ .kv = i % 2 ? kb : ka,
				       .bar = &bar,
				       .id = i,
				       .rounds = rounds,
				       .revs = revs,
				       .wins = wins };
		thread_start(&th[i], racer_main, &r[i], NULL);
	}
	for (i = 0; i < RACERS; i++) {
		thread_join(th[i]);
		assert_int_equal(r[i].other, 0);
	}
	for (i = 0; i < rounds; i++)
		assert_int_equal(wins[i], 1);
	pthread_barrier_destroy(&bar);

	/* Create of a live key; delete at a wrong and the right revision;
	 * create over the delete marker. */
	assert_int_equal(
		ao_kv_get_sync(kb, "room.1", buf, sizeof(buf), &len, &rev), 0);
	assert_int_equal(ao_kv_create_sync(kb, "room.1", "x", 1, NULL),
			 -EEXIST);
	assert_int_equal(ao_kv_update_sync(kb, "room.1", "x", 1, rev - 1, NULL),
			 -ESTALE);
	assert_int_equal(ao_kv_get_sync(kb, "room.1", buf, 1, &len, NULL),
			 -EMSGSIZE);
	assert_int_equal(ao_kv_delete_sync(kb, "room.1", rev + 1000), -ESTALE);
	assert_int_equal(ao_kv_delete_sync(kb, "room.1", rev), 0);
	assert_int_equal(ao_kv_get_sync(ka, "room.1", buf, sizeof(buf), &len,
					NULL),
			 -ENOENT);
	assert_int_equal(ao_kv_create_sync(ka, "room.1", "again", 5, &rev2), 0);
	assert_true(rev2 > rev);
	assert_int_equal(
		ao_kv_get_sync(kb, "room.1", buf, sizeof(buf), &len, &rev), 0);
	assert_int_equal(rev, rev2);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, "again", 5);
	assert_int_equal(ao_kv_get_sync(ka, "no.such", buf, sizeof(buf), &len,
					NULL),
			 -ENOENT);
	assert_int_equal(ao_kv_create_sync(ka, "bad key", "x", 1, NULL),
			 -EINVAL);

	assert_int_equal(ao_kv_keys_sync(ka, &keys, &nkeys), 0);
	assert_int_equal(nkeys, 2);
	assert_true(
		(!strcmp(keys[0], "room.1") &&
		 !strcmp(keys[1], "room.claim")) ||
		(!strcmp(keys[1], "room.1") && !strcmp(keys[0], "room.claim")));
	free(keys);

	ao_node_stats(a, &st);
	assert_true(st.kv_ops > 0);
	ao_node_stats(b, &st);
	assert_true(st.kv_conflicts > 0);

	assert_int_equal(ao_kv_destroy_bucket(ka), 0);
	kv_close(ka);
	kv_close(kb);
	free(revs);
	free(wins);
	node_down(a);
	node_down(b);
	fx_fini(&f);
}

struct kv_wait {
	struct ao_strand strand;
	int done; /* atomic */
	int err;
	int bad;
	uint64_t rev;
	char val[32];
	size_t len;
	size_t nkeys;
};

static void on_kv(int err, const struct ao_kv_entry *e, void *arg)
{
	struct kv_wait *w = arg;

	if (ao_strand_current() != &w->strand || !e || !e->key)
		w->bad++;
	w->err = err;
	if (e) {
		w->rev = e->revision;
		w->len = e->value && e->len < sizeof(w->val) ? e->len : 0;
		if (w->len)
			memcpy(w->val, e->value, w->len);
	}
	__atomic_add_fetch(&w->done, 1, __ATOMIC_RELEASE);
}

static void on_keys(int err, const char *const *keys, size_t n, void *arg)
{
	struct kv_wait *w = arg;

	(void)keys;
	if (ao_strand_current() != &w->strand)
		w->bad++;
	w->err = err;
	w->nkeys = n;
	__atomic_add_fetch(&w->done, 1, __ATOMIC_RELEASE);
}

#define KV_WAIT(w, call)                                                  \
	do {                                                              \
		__atomic_store_n(&(w)->done, 0, __ATOMIC_RELAXED);        \
		assert_int_equal((call), 0);                              \
		WAIT_UNTIL(__atomic_load_n(&(w)->done, __ATOMIC_ACQUIRE), \
			   20000);                                        \
		assert_int_equal((w)->bad, 0);                            \
	} while (0)

/* The asynchronous forms complete on the caller's strand. */
static void test_kv_async(void **state)
{
	struct fx f;
	struct ao_node *a;
	struct ao_kv *kv;
	struct kv_wait w = { 0 };
	uint64_t rev;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	a = node_up(&f, "kasync");
	assert_int_equal(kv_open(a, "AO_ASYNC", true, &kv), 0);
	ao_strand_init(&w.strand, f.ex);
	KV_WAIT(&w, ao_kv_create(kv, "p.1", "n1", 2, &w.strand, on_kv, &w));
	assert_int_equal(w.err, 0);
	rev = w.rev;
	assert_true(rev > 0);
	KV_WAIT(&w, ao_kv_create(kv, "p.1", "n2", 2, &w.strand, on_kv, &w));
	assert_int_equal(w.err, -EEXIST);
	KV_WAIT(&w, ao_kv_get(kv, "p.1", &w.strand, on_kv, &w));
	assert_int_equal(w.err, 0);
	assert_int_equal(w.rev, rev);
	assert_int_equal(w.len, 2);
	assert_memory_equal(w.val, "n1", 2);
	KV_WAIT(&w,
		ao_kv_update(kv, "p.1", "n3", 2, rev, &w.strand, on_kv, &w));
	assert_int_equal(w.err, 0);
	assert_true(w.rev > rev);
	KV_WAIT(&w,
		ao_kv_update(kv, "p.1", "n4", 2, rev, &w.strand, on_kv, &w));
	assert_int_equal(w.err, -ESTALE);
	KV_WAIT(&w, ao_kv_keys(kv, &w.strand, on_keys, &w));
	assert_int_equal(w.err, 0);
	assert_int_equal(w.nkeys, 1);
	KV_WAIT(&w, ao_kv_delete(kv, "p.1", 0, &w.strand, on_kv, &w));
	assert_int_equal(w.err, 0);
	KV_WAIT(&w, ao_kv_get(kv, "p.1", &w.strand, on_kv, &w));
	assert_int_equal(w.err, -ENOENT);
	KV_WAIT(&w, ao_kv_keys(kv, &w.strand, on_keys, &w));
	assert_int_equal(w.nkeys, 0);
	assert_int_equal(ao_kv_update(kv, "p.1", "x", 1, 0, NULL, on_kv, &w),
			 -EINVAL);
	assert_int_equal(ao_kv_get(kv, "p.1", NULL, NULL, &w), -EINVAL);
	assert_int_equal(ao_kv_destroy_bucket(kv), 0);
	kv_close(kv);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	assert_int_equal(ao_strand_destroy(&w.strand), 0);
	node_down(a);
	fx_fini(&f);
}

/* ---------------------------------------------------------------------
 * The server goes away and comes back
 */

static void test_server_restart(void **state)
{
	struct fx f;
	static struct natsd d;
	struct ao_node_config c;
	struct ao_node *a, *b;
	struct ao_sub *sub;
	struct ao_node_stats st;
	struct peer_log log = { 0 };
	struct waiter w = { 0 };
	struct rx *r;
	struct ao_kv *kv;
	static char big[16384];
	long i, seq;
	int err = 0, refused = 0;

	(void)state;
	SKIP_IF_NO_BUS();
	own_natsd_start(&d);
	fx_init(&f);
	r = calloc(1, sizeof(*r));
	assert_non_null(r);
	ao_strand_init(&r->strand, f.ex);
	r->pool = f.pool;
	node_cfg(&c, &f, "ra", d.url);
	c.on_bus = on_bus;
	c.arg = &log;
	c.pub_buffer = 256 * 1024;
	c.reconnect_ms = 100;
	a = node_create(&c);
	assert_int_equal(ao_node_start(a), 0);
	node_cfg(&c, &f, "rb", d.url);
	c.reconnect_ms = 100;
	b = node_create(&c);
	assert_int_equal(ao_node_start(b), 0);
	assert_int_equal(kv_open(a, "AO_GONE", true, &kv), 0);
	assert_int_equal(node_subscribe(b, "t.restart", NULL, &r->strand,
					rx_handler, r, &sub),
			 0);
	probe_until_seen(a, "t.restart", &r->probes);

	/* The server dies: publishes are buffered up to pub_buffer, then
	 * refused and counted; requests and KV fail at once. */
	natsd_kill(&d, SIGKILL);
	WAIT_UNTIL(!ao_node_connected(a), 10000);
	WAIT_UNTIL(__atomic_load_n(&log.bus_down, __ATOMIC_ACQUIRE) == 1,
		   10000);
	for (i = 0; i < 1000; i++) {
		err = ao_node_publish(a, "t.lost", big, sizeof(big));
		if (err)
			break;
	}
	assert_int_equal(err, -ENOBUFS);
	/* Bounded: at most pub_buffer bytes were taken. */
	assert_true(i * (long)sizeof(big) <= 256 * 1024);
	for (i = 0; i < 10; i++)
		if (ao_node_publish(a, "t.lost", big, sizeof(big)) == -ENOBUFS)
			refused++;
	assert_int_equal(refused, 10);
	ao_node_stats(a, &st);
	assert_true(st.pub_dropped >= 11);
	assert_false(st.connected);
	ao_strand_init(&w.strand, f.ex);
	assert_int_equal(ao_node_request(a, "svc.x", "x", 1, 1000, &w.strand,
					 on_reply, &w),
			 -ENOTCONN);
	assert_int_equal(ao_kv_create_sync(kv, "k", "v", 1, NULL), -ENOTCONN);

	/* It comes back on the same port: both nodes reconnect, their
	 * subscriptions with them. */
	assert_int_equal(natsd_run(&d), 0);
	WAIT_UNTIL(ao_node_connected(a) && ao_node_connected(b), 20000);
	WAIT_UNTIL(__atomic_load_n(&log.bus_up, __ATOMIC_ACQUIRE) == 1, 10000);
	ao_node_stats(a, &st);
	assert_true(st.reconnects >= 1);
	assert_true(st.disconnects >= 1);
	WAIT_UNTIL(ao_node_self_fresh(a, 1000), 10000);
	/* b's subscription is sent again on its reconnect, and reaches the
	 * server in its own time: probe until it has.  No numbered message
	 * went out before, so b's handler still expects 0. */
	__atomic_store_n(&r->probes, 0, __ATOMIC_RELAXED);
	probe_until_seen(a, "t.restart", &r->probes);
	assert_int_equal(__atomic_load_n(&r->got, __ATOMIC_ACQUIRE), 0);
	for (i = 0; i < 100; i++) {
		seq = i;
		assert_int_equal(
			ao_node_publish(a, "t.restart", &seq, sizeof(seq)), 0);
	}
	WAIT_UNTIL(__atomic_load_n(&r->got, __ATOMIC_ACQUIRE) == 100, 20000);
	assert_int_equal(__atomic_load_n(&r->bad, __ATOMIC_RELAXED), 0);
	/* The own reader's connection was made again (cnats' reconnect
	 * kicks it). */
	ao_node_stats(b, &st);
	assert_int_equal(st.direct_connects, direct ? 2 : 0);

	assert_int_equal(sub_close(sub), 0);
	kv_close(kv);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	for (i = 0; i < r->nkept; i++)
		ao_buf_put(r->kept[i]);
	assert_int_equal(ao_strand_destroy(&w.strand), 0);
	assert_int_equal(ao_strand_destroy(&r->strand), 0);
	node_down(a);
	node_down(b);
	free(r);
	fx_fini(&f);
	own_natsd_stop(&d);
}

/* The server hangs (SIGSTOP): only the pings can tell.  With ping_ms
 * 500 and 2 pings out the node drops the connection in a second or two
 * (cnats' default: 2 minutes); its own heartbeats stop coming back, so it
 * cannot show it is fresh (the fencing); after SIGCONT it reconnects. */
static void test_server_hang(void **state)
{
	struct fx f;
	static struct natsd d;
	struct ao_node_config c;
	struct ao_node *a;
	struct peer_log log = { 0 };
	uint64_t t0, dt;

	(void)state;
	SKIP_IF_NO_BUS();
	own_natsd_start(&d);
	fx_init(&f);
	node_cfg(&c, &f, "hung", d.url);
	c.on_bus = on_bus;
	c.arg = &log;
	c.reconnect_ms = 100;
	a = node_create(&c);
	assert_int_equal(ao_node_start(a), 0);
	WAIT_UNTIL(ao_node_self_fresh(a, 500), 10000);
	t0 = t_now_ns();
	kill(d.pid, SIGSTOP);
	WAIT_UNTIL(!ao_node_self_fresh(a, 500), 10000);
	WAIT_UNTIL(__atomic_load_n(&log.bus_down, __ATOMIC_ACQUIRE) == 1,
		   30000);
	dt = t_now_ns() - t0;
	print_message("a hung server noticed after %.0f ms (ping_ms %u, "
		      "pings_out %u)\n",
		      (double)dt / 1e6, AO_NODE_DEFAULT_PING_MS,
		      AO_NODE_DEFAULT_PINGS_OUT);
	assert_false(ao_node_connected(a));
	kill(d.pid, SIGCONT);
	WAIT_UNTIL(ao_node_connected(a), 20000);
	WAIT_UNTIL(ao_node_self_fresh(a, 500), 10000);
	node_down(a);
	fx_fini(&f);
	own_natsd_stop(&d);
}

/* ---------------------------------------------------------------------
 * Arguments and lifetimes without a server
 */

/* A subscription, then at once a publish whose answer comes back on it:
 * the server must have the subscription before the publish (with direct
 * they travel on two connections).  Every answer arrives, no probe. */
struct ask {
	struct ao_node *node;
	int got; /* atomic */
};

static void ask_rx(struct ao_msg *msg, void *arg)
{
	struct ask *k = arg;
	char subject[64];

	if (!msg->len || msg->len >= sizeof(subject))
		return;
	memcpy(subject, msg->data, msg->len);
	subject[msg->len] = '\0';
	assert_int_equal(ao_node_publish(k->node, subject, "a", 1), 0);
}

static void answer_rx(struct ao_msg *msg, void *arg)
{
	(void)msg;
	__atomic_add_fetch((int *)arg, 1, __ATOMIC_RELEASE);
}

static void test_sub_then_publish(void **state)
{
	struct ao_node *a, *b;
	struct ao_sub *ask_sub, *sub;
	struct ask k = { 0 };
	struct ao_node_stats st;
	char subject[64];
	int got = 0, i;
	struct fx f;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	a = node_up(&f, "sa");
	b = node_up(&f, "sb");
	k.node = b;
	assert_int_equal(node_subscribe(b, "t.ask", NULL, NULL, ask_rx, &k,
					&ask_sub),
			 0);
	/* b's interest in t.ask is in: a's answers below are then the only
	 * thing that can miss. */
	assert_int_equal(node_subscribe(a, "t.ask.probe", NULL, NULL, answer_rx,
					&got, &sub),
			 0);
	for (i = 0; i < 2000; i++) {
		assert_int_equal(ao_node_publish(a, "t.ask", "t.ask.probe", 11),
				 0);
		t_sleep_ns(2000000);
		if (__atomic_load_n(&got, __ATOMIC_ACQUIRE))
			break;
	}
	assert_true(__atomic_load_n(&got, __ATOMIC_ACQUIRE) > 0);
	assert_int_equal(sub_close(sub), 0);
	for (i = 0; i < 200; i++) {
		__atomic_store_n(&got, 0, __ATOMIC_RELEASE);
		snprintf(subject, sizeof(subject), "t.ans.%d", i);
		assert_int_equal(node_subscribe(a, subject, NULL, NULL,
						answer_rx, &got, &sub),
				 0);
		assert_int_equal(ao_node_publish(a, "t.ask", subject,
						 strlen(subject)),
				 0);
		WAIT_UNTIL(__atomic_load_n(&got, __ATOMIC_ACQUIRE) == 1, 5000);
		assert_int_equal(sub_close(sub), 0);
	}
	/* A publish whose subscription the server confirmed only after
	 * the 10 ms wait is counted, not failed: on a loaded machine (a
	 * debug build beside nats-server in CI) one was.  What this test
	 * is for held either way: every answer above arrived. */
	ao_node_stats(a, &st);
	if (st.direct_unsettled)
		printf("%llu publish(es) went before the server confirmed the "
		       "subscription (over 10 ms); every answer arrived\n",
		       (unsigned long long)st.direct_unsettled);
	assert_int_equal(sub_close(ask_sub), 0);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	node_down(a);
	node_down(b);
	fx_fini(&f);
}

/* A message larger than the pool's buffers (and, at 300 KiB, than the
 * own reader's receive buffer, which skips it) is dropped and counted,
 * and the ones after it arrive, in order.  The url carries credentials
 * (the server requires none): both connections send them. */
static void test_big_and_creds(void **state)
{
	static char huge[300 * 1024];
	struct ao_node_stats st;
	struct ao_sub *sub;
	struct ao_node *a, *b;
	struct ao_node_config c;
	char url[96];
	struct rx *r;
	struct fx f;
	long i;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	r = calloc(1, sizeof(*r));
	assert_non_null(r);
	ao_strand_init(&r->strand, f.ex);
	r->pool = f.pool;
	snprintf(url, sizeof(url), "nats://who:secret@%s",
		 natsd.url + strlen("nats://"));
	node_cfg(&c, &f, "ba", url);
	a = node_create(&c);
	assert_int_equal(ao_node_start(a), 0);
	b = node_up(&f, "bb");
	assert_int_equal(node_subscribe(a, "t.big", NULL, &r->strand,
					rx_handler, r, &sub),
			 0);
	probe_until_seen(b, "t.big", &r->probes);
	for (i = 0; i < 3; i++) {
		long seq = i;

		assert_int_equal(
			ao_node_publish(b, "t.big", huge, sizeof(huge)), 0);
		assert_int_equal(ao_node_publish(b, "t.big", &seq, sizeof(seq)),
				 0);
	}
	WAIT_UNTIL(__atomic_load_n(&r->got, __ATOMIC_ACQUIRE) == 3, 10000);
	assert_int_equal(__atomic_load_n(&r->bad, __ATOMIC_RELAXED), 0);
	ao_node_stats(a, &st);
	assert_int_equal(st.in_dropped, 3);
	assert_int_equal(st.direct_connects, direct ? 1 : 0);
	assert_int_equal(sub_close(sub), 0);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	for (i = 0; i < r->nkept; i++)
		ao_buf_put(r->kept[i]);
	assert_int_equal(ao_strand_destroy(&r->strand), 0);
	node_down(a);
	node_down(b);
	free(r);
	fx_fini(&f);
}

/* ---------------------------------------------------------------------
 * Long INFO lines
 *
 * A NATS cluster's INFO lists every server's connect_urls and can be
 * longer than any fixed line buffer; nats-server sends it again, to
 * every client, when the cluster changes.  A proxy between a node and the
 * server pads the first INFO of each connection to PAD_LEN bytes (an
 * extra field, which clients ignore) and sends it again, as an
 * asynchronous INFO, before every INFO_EVERY-th message.  Each connection
 * of the node goes through it: cnats' and the own reader's.
 */

#define PAD_LEN (20 * 1024)
#define INFO_EVERY 20
#define PROXY_PAIRS 4
#define PROXY_BUF (256 * 1024)

struct pair {
	int cfd, sfd; /* the client's side, the server's; -1: free */
	bool direct; /* the node's own reader (its CONNECT says so) */
	char *info; /* the padded INFO line, once the server's came */
	size_t info_len;
	char *buf; /* from the server, not yet forwarded */
	size_t len;
	long msgs;
};

struct proxy {
	int lfd;
	uint16_t port;
	char url[64];
	uint16_t to; /* nats-server's port */
	pthread_t thread;
	bool stop; /* atomic */
	int padded; /* atomic: first INFOs padded */
	int direct_infos; /* atomic: long INFOs sent to the own reader */
	struct pair p[PROXY_PAIRS];
};

static int send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void pair_close(struct pair *p)
{
	close(p->cfd);
	close(p->sfd);
	free(p->info);
	free(p->buf);
	memset(p, 0, sizeof(*p));
	p->cfd = p->sfd = -1;
}

/* "INFO {...}" (llen bytes, no CRLF) with "x_pad":"aaa..." added. */
static int pad_info(struct pair *p, const char *line, size_t llen)
{
	const char *end = line + llen;
	size_t head, at;

	while (end > line && end[-1] != '}')
		end--;
	if (end == line || strncmp(line, "INFO ", 5))
		return -1;
	head = (size_t)(end - 1 - line); /* up to the closing brace */
	p->info = malloc(head + PAD_LEN + 32);
	if (!p->info)
		return -1;
	memcpy(p->info, line, head);
	at = head;
	at += (size_t)sprintf(p->info + at, ",\"x_pad\":\"");
	memset(p->info + at, 'a', PAD_LEN);
	at += PAD_LEN;
	memcpy(p->info + at, "\"}\r\n", 4);
	p->info_len = at + 4;
	return 0;
}

/* The size at the end of a MSG or HMSG line, or -1. */
static long msg_size(const char *line, size_t llen)
{
	size_t i = llen;
	long v = 0, mul = 1;

	while (i && line[i - 1] >= '0' && line[i - 1] <= '9') {
		v += (line[i - 1] - '0') * mul;
		mul *= 10;
		i--;
	}
	return i < llen && i && line[i - 1] == ' ' ? v : -1;
}

/* The padded INFO again; every other one with its LF a moment after the
 * rest (the reader then has a lone CR at the end of what it read). */
static int send_info(struct pair *p)
{
	if (p->msgs % (2 * INFO_EVERY))
		return send_all(p->cfd, p->info, p->info_len);
	if (send_all(p->cfd, p->info, p->info_len - 1))
		return -1;
	t_sleep_ns(2000000);
	return send_all(p->cfd, "\n", 1);
}

/* Forward every whole item the server sent; -1: drop the pair. */
static int pair_forward(struct proxy *x, struct pair *p)
{
	size_t pos = 0;

	for (;;) {
		char *line = p->buf + pos;
		char *nl = memmem(line, p->len - pos, "\r\n", 2);
		size_t llen, n;
		long size;

		if (!nl)
			break;
		llen = (size_t)(nl - line);
		n = llen + 2;
		if (!p->info) {
			if (pad_info(p, line, llen) ||
			    send_all(p->cfd, p->info, p->info_len))
				return -1;
			__atomic_add_fetch(&x->padded, 1, __ATOMIC_RELAXED);
			pos += n;
			continue;
		}
		if ((llen > 4 && !strncmp(line, "MSG ", 4)) ||
		    (llen > 5 && !strncmp(line, "HMSG ", 5))) {
			size = msg_size(line, llen);
			if (size < 0)
				return -1;
			n += (size_t)size + 2;
			if (n > p->len - pos)
				break; /* the rest is still coming */
			if (++p->msgs % INFO_EVERY == 0) {
				if (send_info(p))
					return -1;
				if (p->direct)
					__atomic_add_fetch(&x->direct_infos, 1,
							   __ATOMIC_RELEASE);
			}
		}
		if (send_all(p->cfd, line, n))
			return -1;
		pos += n;
	}
	memmove(p->buf, p->buf + pos, p->len - pos);
	p->len -= pos;
	return p->len < PROXY_BUF ? 0 : -1;
}

static void proxy_accept(struct proxy *x)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct pair *p = NULL;
	int cfd, sfd, i;

	cfd = accept(x->lfd, NULL, NULL);
	if (cfd < 0)
		return;
	for (i = 0; i < PROXY_PAIRS && !p; i++)
		if (x->p[i].cfd < 0)
			p = &x->p[i];
	sfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_port = htons(x->to);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!p || sfd < 0 || connect(sfd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(cfd);
		if (sfd >= 0)
			close(sfd);
		return;
	}
	p->buf = malloc(PROXY_BUF);
	if (!p->buf) {
		close(cfd);
		close(sfd);
		return;
	}
	p->cfd = cfd;
	p->sfd = sfd;
}

static void *proxy_main(void *arg)
{
	struct proxy *x = arg;
	struct pollfd pfd[1 + 2 * PROXY_PAIRS];
	char tmp[16384];
	int i;

	while (!__atomic_load_n(&x->stop, __ATOMIC_ACQUIRE)) {
		pfd[0] = (struct pollfd){ .fd = x->lfd, .events = POLLIN };
		for (i = 0; i < PROXY_PAIRS; i++) {
			pfd[1 + 2 * i] = (struct pollfd){ .fd = x->p[i].cfd,
							  .events = POLLIN };
			pfd[2 + 2 * i] = (struct pollfd){ .fd = x->p[i].sfd,
							  .events = POLLIN };
		}
		if (poll(pfd, 1 + 2 * PROXY_PAIRS, 50) <= 0)
			continue;
		if (pfd[0].revents & POLLIN)
			proxy_accept(x);
		for (i = 0; i < PROXY_PAIRS; i++) {
			struct pair *p = &x->p[i];
			ssize_t r;

			if (p->cfd >= 0 && pfd[1 + 2 * i].revents) {
				r = recv(p->cfd, tmp, sizeof(tmp), 0);
				if (r > 0 &&
				    memmem(tmp, (size_t)r, "/direct\"", 8))
					p->direct = true;
				if (r <= 0 ||
				    send_all(p->sfd, tmp, (size_t)r)) {
					pair_close(p);
					continue;
				}
			}
			if (p->sfd >= 0 && pfd[2 + 2 * i].revents) {
				r = recv(p->sfd, p->buf + p->len,
					 PROXY_BUF - p->len, 0);
				if (r <= 0) {
					pair_close(p);
					continue;
				}
				p->len += (size_t)r;
				if (pair_forward(x, p))
					pair_close(p);
			}
		}
	}
	for (i = 0; i < PROXY_PAIRS; i++)
		if (x->p[i].cfd >= 0)
			pair_close(&x->p[i]);
	return NULL;
}

static void proxy_start(struct proxy *x, uint16_t to)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int i;

	memset(x, 0, sizeof(*x));
	x->to = to;
	for (i = 0; i < PROXY_PAIRS; i++)
		x->p[i].cfd = x->p[i].sfd = -1;
	x->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(x->lfd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(x->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(x->lfd, 8), 0);
	assert_int_equal(getsockname(x->lfd, (struct sockaddr *)&sa, &sl), 0);
	x->port = ntohs(sa.sin_port);
	snprintf(x->url, sizeof(x->url), "nats://127.0.0.1:%u", x->port);
	assert_int_equal(pthread_create(&x->thread, NULL, proxy_main, x), 0);
	left.proxy = x;
}

static void proxy_stop(struct proxy *x)
{
	left.proxy = NULL;
	__atomic_store_n(&x->stop, true, __ATOMIC_RELEASE);
	pthread_join(x->thread, NULL);
	close(x->lfd);
}

/* The node behind the proxy connects (each of its connections gets a
 * 20 KiB INFO first), and its subscription gets every numbered message,
 * in order, with a 20 KiB INFO before every 20th; the own reader's
 * connection was made once. */
static void test_long_info(void **state)
{
	struct ao_node_stats st;
	struct ao_node_config c;
	struct ao_node *a, *b;
	struct proxy *x;
	struct ao_sub *sub;
	struct rx *r;
	struct fx f;
	int infos;
	long i;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	x = calloc(1, sizeof(*x));
	r = calloc(1, sizeof(*r));
	assert_non_null(x);
	assert_non_null(r);
	proxy_start(x, natsd.port);
	ao_strand_init(&r->strand, f.ex);
	r->pool = f.pool;
	node_cfg(&c, &f, "la", x->url);
	c.connect_ms = 5000;
	a = node_create(&c);
	assert_int_equal(ao_node_start(a), 0);
	b = node_up(&f, "lb");
	assert_int_equal(node_subscribe(a, "t.long", NULL, &r->strand,
					rx_handler, r, &sub),
			 0);
	probe_until_seen(b, "t.long", &r->probes);
	for (i = 0; i < 200; i++) {
		long seq = i;

		assert_int_equal(
			ao_node_publish(b, "t.long", &seq, sizeof(seq)), 0);
		if (i % 50 == 49)
			t_sleep_ns(5000000);
	}
	WAIT_UNTIL(__atomic_load_n(&r->got, __ATOMIC_ACQUIRE) == 200, 20000);
	assert_int_equal(__atomic_load_n(&r->bad, __ATOMIC_RELAXED), 0);
	/* cnats' connection, and the own reader's. */
	assert_int_equal(__atomic_load_n(&x->padded, __ATOMIC_RELAXED),
			 direct ? 2 : 1);
	infos = __atomic_load_n(&x->direct_infos, __ATOMIC_ACQUIRE);
	assert_true(direct ? infos >= 200 / INFO_EVERY : infos == 0);
	ao_node_stats(a, &st);
	assert_int_equal(st.direct_connects, direct ? 1 : 0);
	assert_int_equal(st.reconnects, 0);
	assert_int_equal(sub_close(sub), 0);
	assert_int_equal(ao_exec_drain(f.ex), 0);
	for (i = 0; i < r->nkept; i++)
		ao_buf_put(r->kept[i]);
	assert_int_equal(ao_strand_destroy(&r->strand), 0);
	node_down(a);
	node_down(b);
	proxy_stop(x);
	free(x);
	free(r);
	fx_fini(&f);
}

static void test_refusals(void **state)
{
	struct fx f;
	struct ao_node_config c;
	struct ao_node *n;

	(void)state;
	SKIP_IF_NO_BUS();
	fx_init(&f);
	node_cfg(&c, &f, "bad name", natsd.url);
	assert_int_equal(ao_node_create(&c, &n), -EINVAL);
	assert_null(n);
	node_cfg(&c, &f, "x", NULL);
	assert_int_equal(ao_node_create(&c, &n), -EINVAL);
	node_cfg(&c, &f, "x", natsd.url);
	c.pool = NULL;
	assert_int_equal(ao_node_create(&c, &n), -EINVAL);
	/* Nobody listens there. */
	node_cfg(&c, &f, "x", "nats://127.0.0.1:1");
	c.connect_ms = 200;
	n = node_create(&c);
	assert_int_equal(ao_node_start(n), -ECONNREFUSED);
	assert_int_equal(ao_node_publish(n, "s", "x", 1), -ENOTCONN);
	assert_false(ao_node_connected(n));
	node_destroy(n);
	assert_int_equal(ao_node_destroy(NULL), 0);
	fx_fini(&f);
}

/* End what the test left (see struct left), in the reverse order of its
 * start, and say what there was. */
static void reclaim(void)
{
	struct left *l = &left;
	int i, threads = 0, subs = 0, kvs = 0, nodes = 0;
	bool proxy = l->proxy != NULL, fx = l->fx.ex != NULL;
	bool server = l->natsd != NULL;

	/* A server the test stopped (SIGSTOP) answers the nodes' goodbyes. */
	if (l->natsd && l->natsd->pid > 0)
		kill(l->natsd->pid, SIGCONT);
	for (i = 0; i < LEFT_MAX; i++) {
		if (!l->threads[i].on)
			continue;
		if (l->threads[i].stop)
			__atomic_store_n(l->threads[i].stop, 1,
					 __ATOMIC_RELEASE);
		pthread_join(l->threads[i].thread, NULL);
		l->threads[i].on = false;
		threads++;
	}
	for (i = 0; i < LEFT_MAX; i++) {
		if (l->subs[i]) {
			ao_sub_close(l->subs[i]);
			l->subs[i] = NULL;
			subs++;
		}
	}
	for (i = 0; i < LEFT_MAX; i++) {
		if (l->kvs[i]) {
			ao_kv_close(l->kvs[i]);
			l->kvs[i] = NULL;
			kvs++;
		}
	}
	for (i = 0; i < LEFT_MAX; i++) {
		if (l->nodes[i]) {
			ao_node_stop(l->nodes[i]);
			if (ao_node_destroy(l->nodes[i]))
				print_error("a node left behind is busy\n");
			l->nodes[i] = NULL;
			nodes++;
		}
	}
	if (l->proxy) {
		struct proxy *x = l->proxy;

		proxy_stop(x);
		free(x);
	}
	if (l->fx.ex) {
		/* The pool says which buffers are still out, if any. */
		ao_exec_drain(l->fx.ex);
		ao_timers_destroy(l->fx.ts, NULL);
		ao_exec_destroy(l->fx.ex);
		ao_bufpool_destroy(l->fx.pool);
		memset(&l->fx, 0, sizeof(l->fx));
	}
	if (l->natsd)
		own_natsd_stop(l->natsd);
	if (threads || subs || kvs || nodes || proxy || fx || server)
		print_message(
			"reclaimed what the test left: nodes %d, "
			"subscriptions %d, KV handles %d, threads %d%s%s%s\n",
			nodes, subs, kvs, threads, proxy ? ", its proxy" : "",
			fx ? ", its executor, timers and pool" : "",
			server ? ", its nats-server" : "");
}

/*
 * Where the tests run.  After a failure the test's threads, and the
 * handlers of its nodes, still use what was on its stack (arguments,
 * counters, waiters and their strands) until reclaim() has stopped them;
 * but CMocka's longjmp lands above the test, and its own calls, then the
 * teardown, use that stack again.  So a test runs below a pad that those
 * calls stay within, and reclaim() below a pad that spans the test's
 * frame: that frame is left alone until nothing uses it.
 */
#define RUN_PAD (32 * 1024)
/* Keep an array that nothing writes to in the frame up to here. */
#define KEEP(pad) __asm__ __volatile__("" : : "r"(pad) : "memory")

struct cluster_test {
	void (*fn)(void **state);
};

static void cluster_run(void **state)
{
	const struct cluster_test *t = *state;
	char pad[RUN_PAD];

	KEEP(pad);
	t->fn(state);
	KEEP(pad);
}

static int test_teardown(void **state)
{
	char pad[2 * RUN_PAD];

	(void)state;
	KEEP(pad);
	reclaim();
	KEEP(pad);
	return 0;
}

static int group_setup(void **state)
{
	struct ao_node_config c = AO_NODE_CONFIG_INIT;
	struct ao_node *n = NULL;
	int err;

	(void)state;
	if (ao_node_create(&c, &n) == -ENOSYS) {
		skip_why = "built without cnats (nats.h)";
	} else if (!natsd_binary()) {
		skip_why = "nats-server not installed (make deps)";
	} else {
		err = natsd_start(&natsd);
		if (err) {
			fprintf(stderr, "nats-server did not start: %d\n", err);
			return -1;
		}
	}
	if (skip_why)
		printf("SKIP: cluster tests: %s\n", skip_why);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (!skip_why)
		natsd_stop(&natsd);
	natsd_reap_all(); /* those of a test that failed half-way */
	return 0;
}

/* A test, run by cluster_run() with the teardown that ends what it left. */
#define CLUSTER_TEST(f)                                             \
	{                                                           \
		.name = #f, .test_func = cluster_run,               \
		.teardown_func = test_teardown,                     \
		.initial_state = &(struct cluster_test){ .fn = f }, \
	}

int main(void)
{
	const struct CMUnitTest tests[] = {
		CLUSTER_TEST(test_refusals),
		CLUSTER_TEST(test_pubsub_order),
		CLUSTER_TEST(test_queue_group),
		CLUSTER_TEST(test_request_reply),
		CLUSTER_TEST(test_request_timeout),
		CLUSTER_TEST(test_no_responders),
		CLUSTER_TEST(test_many_threads),
		CLUSTER_TEST(test_peers_up_and_dead),
		CLUSTER_TEST(test_kv_cas_race),
		CLUSTER_TEST(test_kv_async),
		CLUSTER_TEST(test_server_restart),
		CLUSTER_TEST(test_server_hang),
		CLUSTER_TEST(test_big_and_creds),
		CLUSTER_TEST(test_sub_then_publish),
		CLUSTER_TEST(test_long_info),
	};

	int failed;

	ao_clock_calibrate();
	atexit(natsd_reap_all); /* when the runner exits early too */
	t_watchdog_arm(300, "test_cluster");
	failed = cmocka_run_group_tests_name("cluster", tests, group_setup,
					     group_teardown);
	direct = true;
	failed += cmocka_run_group_tests_name("cluster, the node's own reader",
					      tests, group_setup,
					      group_teardown);
	return failed;
}
