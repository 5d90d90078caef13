// SPDX-License-Identifier: MIT
/*
 * busbench: the bus layer (cluster/) on loopback, against a nats-server it
 * starts itself (free port, JetStream, scratch store), in one run.
 *
 *	oneway/MODE	node A publishes a message carrying its send time
 *			every 1 ms; node B's handler, on a strand, takes
 *			now - sent: publish to delivery, copy into a pooled
 *			buffer and hand-off to the strand included.
 *			MODE flusher: cnats' default, a flusher thread that
 *			waits up to 1 ms to batch; asap: send_asap, the
 *			publishing thread writes at once; direct: asap,
 *			and the subscriber reads with the node's own thread
 *			(cfg.direct), which runs the handler when the
 *			strand is free; cnats: the
 *			baseline, cnats alone (SendAsap, its callback on its
 *			delivery thread takes the time: no copy, no strand).
 *	request/MODE	A sends a request to an echo responder on B, one at
 *			a time; the time from ao_node_request() to the reply
 *			callback on A's strand (both nodes in MODE).
 *	noresp/MODE	a request nobody subscribes to: the time until the
 *			callback gets -EHOSTUNREACH (NATS' no-responders
 *			status), with a 10 s timeout that never fires.
 *	burst/MODE	A publishes 128-byte messages as fast as it can
 *			(-ENOBUFS: retried after 50 us) to B's handler, which
 *			counts them: messages per second delivered, and the
 *			process CPU per message (both nodes, cnats' threads
 *			and the server's not included: it is another process).
 *	kv-cas		ao_kv_update_sync() at the key's revision, one after
 *			another (memory storage, history 1): one JetStream
 *			publish with the expected revision and its ack.
 *	kv-conflict	the same at a stale revision: the refusal.
 *
 * Each cell reports p50, p99 and max in microseconds and the messages it
 * measured; the table ends with the ratios flusher/asap.  --json: one
 * object per cell.  Run it under flock /tmp/bench.lock (the machine is
 * shared); compare ratios within one run, not times across runs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/clock.h>
#include <aorta/cluster/kv.h>
#include <aorta/cluster/node.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/core/strand.h>
#include <aorta/core/timer.h>
#ifdef AO_HAVE_NATS
#include <nats/nats.h>
#endif
#include "bench.h"
#include "../../tests/test_cluster_natsd.h"

static struct bench_opts opts;
static struct natsd natsd;

struct env {
	struct ao_exec *ex;
	struct ao_timers *ts;
	struct ao_bufpool *pool;
	struct ao_node *a, *b;
};

struct samples {
	uint64_t *v;
	size_t n, cap;
};

struct cell_result {
	const char *cell;
	const char *mode;
	size_t n;
	double p50_us, p99_us, max_us;
};

/* How the nodes of a cell use the bus. */
enum mode { M_FLUSHER, M_ASAP, M_DIRECT };
static const char *const mode_names[] = { "flusher", "asap", "direct" };

static struct cell_result results[24];
static int nresults;

static void die(const char *what, int err)
{
	fprintf(stderr, "busbench: %s: %s\n", what, strerror(-err));
	natsd_stop(&natsd);
	exit(1);
}

static void env_up(struct env *e, enum mode mode)
{
	struct ao_exec_config ec = AO_EXEC_CONFIG_INIT;
	struct ao_timers_config tc = AO_TIMERS_CONFIG_INIT;
	struct ao_bufpool_params bp = { .buf_size = 2048, .count = 8192 };
	struct ao_node_config c = AO_NODE_CONFIG_INIT;
	int err;

	ec.workers = 2;
	ec.name = "bus-w";
	err = ao_exec_create(&ec, &e->ex);
	if (err)
		die("executor", err);
	tc.exec = e->ex;
	err = ao_timers_create(&tc, &e->ts);
	if (!err)
		err = ao_bufpool_create(&e->pool, &bp);
	if (err)
		die("timers or pool", err);
	c.url = natsd.url;
	c.exec = e->ex;
	c.pool = e->pool;
	c.send_asap = mode != M_FLUSHER;
	c.direct = mode == M_DIRECT;
	c.name = "bench-a";
	err = ao_node_create(&c, &e->a);
	if (!err)
		err = ao_node_start(e->a);
	if (err)
		die("node a", err);
	c.name = "bench-b";
	err = ao_node_create(&c, &e->b);
	if (!err)
		err = ao_node_start(e->b);
	if (err)
		die("node b", err);
}

static void env_down(struct env *e)
{
	ao_node_stop(e->a);
	ao_node_stop(e->b);
	ao_exec_drain(e->ex);
	if (ao_node_destroy(e->a) || ao_node_destroy(e->b))
		fprintf(stderr, "busbench: a node would not go\n");
	ao_timers_destroy(e->ts, NULL);
	ao_exec_destroy(e->ex);
	ao_bufpool_destroy(e->pool);
}

static void record(const char *cell, const char *mode, uint64_t *v, size_t n)
{
	struct cell_result *r = &results[nresults++];

	bench_sort_u64(v, n);
	r->cell = cell;
	r->mode = mode;
	r->n = n;
	r->p50_us = n ? (double)bench_pct_u64(v, n, 50) / 1e3 : 0;
	r->p99_us = n ? (double)bench_pct_u64(v, n, 99) / 1e3 : 0;
	r->max_us = n ? (double)v[n - 1] / 1e3 : 0;
	if (opts.json) {
		bench_json_begin("busbench");
		bench_json_str("cell", cell);
		bench_json_str("mode", mode);
		bench_json_int("n", (long long)n);
		bench_json_num("p50_us", r->p50_us);
		bench_json_num("p99_us", r->p99_us);
		bench_json_num("max_us", r->max_us);
		bench_json_end();
	} else {
		printf("%-12s %-8s %8zu %10.1f %10.1f %10.1f\n", cell, mode, n,
		       r->p50_us, r->p99_us, r->max_us);
		fflush(stdout);
	}
}

static void msleep_us(unsigned int us)
{
	struct timespec ts = { 0, (long)us * 1000L };

	nanosleep(&ts, NULL);
}

/* ---- one way ---- */

struct oneway {
	struct ao_strand strand;
	uint64_t *lat;
	size_t n; /* atomic */
	size_t cap;
	int probes; /* atomic */
};

static void oneway_rx(struct ao_msg *msg, void *arg)
{
	struct oneway *o = arg;
	uint64_t now = bench_now_ns(), sent;
	size_t i;

	if (msg->len != sizeof(sent)) {
		__atomic_add_fetch(&o->probes, 1, __ATOMIC_RELEASE);
		return;
	}
	memcpy(&sent, msg->data, sizeof(sent));
	i = __atomic_load_n(&o->n, __ATOMIC_RELAXED);
	if (i < o->cap) {
		o->lat[i] = now - sent;
		__atomic_store_n(&o->n, i + 1, __ATOMIC_RELEASE);
	}
}

static void run_oneway(enum mode m, size_t count)
{
	const char *mode = mode_names[m];
	struct oneway o = { 0 };
	struct ao_sub *sub;
	struct env e;
	char cell[32];
	size_t i;
	int err;

	snprintf(cell, sizeof(cell), "oneway/%s", mode);
	if (!bench_selected(&opts, cell))
		return;
	env_up(&e, m);
	o.lat = calloc(count, sizeof(*o.lat));
	o.cap = count;
	ao_strand_init(&o.strand, e.ex);
	err = ao_node_subscribe(e.b, "bench.oneway", NULL, &o.strand, oneway_rx,
				&o, &sub);
	if (err)
		die("subscribe", err);
	for (i = 0; i < 5000 && !__atomic_load_n(&o.probes, __ATOMIC_ACQUIRE);
	     i++) {
		ao_node_publish(e.a, "bench.oneway", "p", 1);
		msleep_us(1000);
	}
	for (i = 0; i < count; i++) {
		uint64_t now = bench_now_ns();

		ao_node_publish(e.a, "bench.oneway", &now, sizeof(now));
		msleep_us(1000);
	}
	for (i = 0; i < 2000 && __atomic_load_n(&o.n, __ATOMIC_ACQUIRE) < count;
	     i++)
		msleep_us(1000);
	ao_sub_close(sub);
	ao_exec_drain(e.ex);
	record("oneway", mode, o.lat, __atomic_load_n(&o.n, __ATOMIC_ACQUIRE));
	ao_strand_destroy(&o.strand);
	free(o.lat);
	env_down(&e);
}

#ifdef AO_HAVE_NATS
/* The baseline: the same one way with cnats alone. */
static void raw_rx(natsConnection *nc, natsSubscription *ns, natsMsg *m,
		   void *arg)
{
	struct oneway *o = arg;
	uint64_t now = bench_now_ns(), sent;
	size_t i;

	(void)nc;
	(void)ns;
	if (natsMsg_GetDataLength(m) != (int)sizeof(sent)) {
		__atomic_add_fetch(&o->probes, 1, __ATOMIC_RELEASE);
	} else {
		memcpy(&sent, natsMsg_GetData(m), sizeof(sent));
		i = __atomic_load_n(&o->n, __ATOMIC_RELAXED);
		if (i < o->cap) {
			o->lat[i] = now - sent;
			__atomic_store_n(&o->n, i + 1, __ATOMIC_RELEASE);
		}
	}
	natsMsg_Destroy(m);
}

static natsConnection *raw_connect(void)
{
	natsConnection *nc = NULL;
	natsOptions *o;

	if (natsOptions_Create(&o) != NATS_OK)
		return NULL;
	if (natsOptions_SetURL(o, natsd.url) == NATS_OK &&
	    natsOptions_SetSendAsap(o, true) == NATS_OK)
		natsConnection_Connect(&nc, o);
	natsOptions_Destroy(o);
	return nc;
}

static void run_oneway_raw(size_t count)
{
	natsConnection *a, *b;
	natsSubscription *ns = NULL;
	struct oneway o = { 0 };
	size_t i;

	if (!bench_selected(&opts, "oneway/cnats"))
		return;
	a = raw_connect();
	b = raw_connect();
	if (!a || !b ||
	    natsConnection_Subscribe(&ns, b, "bench.raw", raw_rx, &o) !=
		    NATS_OK ||
	    natsConnection_Flush(b) != NATS_OK)
		die("cnats alone", -ECONNREFUSED);
	o.lat = calloc(count, sizeof(*o.lat));
	o.cap = o.lat ? count : 0;
	for (i = 0; i < 5000 && !__atomic_load_n(&o.probes, __ATOMIC_ACQUIRE);
	     i++) {
		natsConnection_Publish(a, "bench.raw", "p", 1);
		msleep_us(1000);
	}
	for (i = 0; i < count; i++) {
		uint64_t now = bench_now_ns();

		natsConnection_Publish(a, "bench.raw", &now, sizeof(now));
		msleep_us(1000);
	}
	for (i = 0; i < 2000 && __atomic_load_n(&o.n, __ATOMIC_ACQUIRE) < count;
	     i++)
		msleep_us(1000);
	natsSubscription_Unsubscribe(ns);
	natsSubscription_Destroy(ns);
	natsConnection_Destroy(a);
	natsConnection_Destroy(b);
	record("oneway", "cnats", o.lat,
	       __atomic_load_n(&o.n, __ATOMIC_ACQUIRE));
	free(o.lat);
}
#else
static void run_oneway_raw(size_t count)
{
	(void)count;
}
#endif

/* ---- burst ---- */

struct counter {
	struct ao_strand strand;
	long got; /* atomic */
	int probes; /* atomic */
};

static void count_rx(struct ao_msg *msg, void *arg)
{
	struct counter *k = arg;

	if (msg->len == 1)
		__atomic_add_fetch(&k->probes, 1, __ATOMIC_RELEASE);
	else
		__atomic_add_fetch(&k->got, 1, __ATOMIC_RELEASE);
}

static void run_burst(enum mode m, long count)
{
	const char *mode = mode_names[m];
	struct counter k = { 0 };
	static char payload[128];
	struct ao_sub *sub;
	struct env e;
	uint64_t t0, c0, dt, dc;
	char cell[32];
	long i;
	int err;

	snprintf(cell, sizeof(cell), "burst/%s", mode);
	if (!bench_selected(&opts, cell))
		return;
	env_up(&e, m);
	ao_strand_init(&k.strand, e.ex);
	err = ao_node_subscribe(e.b, "bench.burst", NULL, &k.strand, count_rx,
				&k, &sub);
	if (err)
		die("subscribe", err);
	for (i = 0; i < 5000 && !__atomic_load_n(&k.probes, __ATOMIC_ACQUIRE);
	     i++) {
		ao_node_publish(e.a, "bench.burst", "p", 1);
		msleep_us(1000);
	}
	t0 = bench_now_ns();
	c0 = bench_proc_cpu_ns();
	for (i = 0; i < count; i++) {
		while (ao_node_publish(e.a, "bench.burst", payload,
				       sizeof(payload)) == -ENOBUFS)
			msleep_us(50);
	}
	for (i = 0;
	     i < 20000 && __atomic_load_n(&k.got, __ATOMIC_ACQUIRE) < count;
	     i++)
		msleep_us(500);
	dt = bench_now_ns() - t0;
	dc = bench_proc_cpu_ns() - c0;
	i = __atomic_load_n(&k.got, __ATOMIC_ACQUIRE);
	if (opts.json) {
		bench_json_begin("busbench");
		bench_json_str("cell", "burst");
		bench_json_str("mode", mode);
		bench_json_int("sent", count);
		bench_json_int("delivered", i);
		bench_json_num("msgs_per_s", (double)i * 1e9 / (double)dt);
		bench_json_num("cpu_ns_per_msg", (double)dc / (double)count);
		bench_json_end();
	} else {
		printf("%-12s %-8s %8ld delivered of %ld: %.0f msgs/s, %.0f ns "
		       "CPU a message\n",
		       "burst", mode, i, count, (double)i * 1e9 / (double)dt,
		       (double)dc / (double)count);
	}
	ao_sub_close(sub);
	ao_exec_drain(e.ex);
	ao_strand_destroy(&k.strand);
	env_down(&e);
}

/* ---- requests ---- */

struct echo {
	struct ao_node *node;
	int probes; /* atomic */
};

static void echo_rx(struct ao_msg *msg, void *arg)
{
	struct echo *ec = arg;

	if (msg->reply)
		ao_node_respond(ec->node, msg, msg->data, msg->len);
	else
		__atomic_add_fetch(&ec->probes, 1, __ATOMIC_RELEASE);
}

struct rtt {
	struct ao_strand strand;
	uint64_t t0;
	uint64_t dt;
	int err;
	int done; /* atomic */
};

static void rtt_done(int err, struct ao_msg *reply, void *arg)
{
	struct rtt *r = arg;

	(void)reply;
	r->dt = bench_now_ns() - r->t0;
	r->err = err;
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
}

static size_t rtt_loop(struct env *e, const char *subject, uint64_t *lat,
		       size_t count, int want)
{
	struct rtt r = { 0 };
	size_t i, n = 0;
	int k;

	ao_strand_init(&r.strand, e->ex);
	for (i = 0; i < count; i++) {
		__atomic_store_n(&r.done, 0, __ATOMIC_RELAXED);
		r.t0 = bench_now_ns();
		if (ao_node_request(e->a, subject, "ping", 4, 10000, &r.strand,
				    rtt_done, &r))
			continue;
		for (k = 0;
		     k < 200000 && !__atomic_load_n(&r.done, __ATOMIC_ACQUIRE);
		     k++)
			msleep_us(20);
		if (__atomic_load_n(&r.done, __ATOMIC_ACQUIRE) && r.err == want)
			lat[n++] = r.dt;
		msleep_us(200);
	}
	ao_exec_drain(e->ex);
	ao_strand_destroy(&r.strand);
	return n;
}

static void run_request(enum mode m, size_t count)
{
	const char *mode = mode_names[m];
	struct echo ec = { 0 };
	struct ao_sub *sub;
	struct env e;
	uint64_t *lat;
	size_t i, n;
	char cell[32], noresp[32];
	int err;

	snprintf(cell, sizeof(cell), "request/%s", mode);
	snprintf(noresp, sizeof(noresp), "noresp/%s", mode);
	if (!bench_selected(&opts, cell) && !bench_selected(&opts, noresp))
		return;
	env_up(&e, m);
	lat = calloc(count, sizeof(*lat));
	ec.node = e.b;
	err = ao_node_subscribe(e.b, "bench.echo", NULL, NULL, echo_rx, &ec,
				&sub);
	if (err)
		die("subscribe", err);
	for (i = 0; i < 5000 && !__atomic_load_n(&ec.probes, __ATOMIC_ACQUIRE);
	     i++) {
		ao_node_publish(e.a, "bench.echo", "p", 1);
		msleep_us(1000);
	}
	if (bench_selected(&opts, cell)) {
		n = rtt_loop(&e, "bench.echo", lat, count, 0);
		record("request", mode, lat, n);
	}
	snprintf(cell, sizeof(cell), "noresp/%s", mode);
	if (bench_selected(&opts, cell)) {
		n = rtt_loop(&e, "bench.nobody", lat, count, -EHOSTUNREACH);
		record("noresp", mode, lat, n);
	}
	ao_sub_close(sub);
	free(lat);
	env_down(&e);
}

/* ---- KV ---- */

static void run_kv(size_t count)
{
	struct ao_kv *kv;
	struct env e;
	uint64_t *lat, rev, t0;
	size_t i, n = 0;
	int err;

	if (!bench_selected(&opts, "kv-cas") &&
	    !bench_selected(&opts, "kv-conflict"))
		return;
	env_up(&e, M_FLUSHER);
	lat = calloc(count, sizeof(*lat));
	err = ao_kv_open(e.a, "AO_BENCH", true, &kv);
	if (!err)
		err = ao_kv_create_sync(kv, "room.1", "n0", 2, &rev);
	if (err)
		die("kv", err);
	for (i = 0; i < count; i++) {
		t0 = bench_now_ns();
		err = ao_kv_update_sync(kv, "room.1", "n1", 2, rev, &rev);
		if (!err)
			lat[n++] = bench_now_ns() - t0;
	}
	if (bench_selected(&opts, "kv-cas"))
		record("kv-cas", "sync", lat, n);
	for (n = 0, i = 0; i < count; i++) {
		t0 = bench_now_ns();
		err = ao_kv_update_sync(kv, "room.1", "n2", 2, rev - 1, NULL);
		if (err == -ESTALE)
			lat[n++] = bench_now_ns() - t0;
	}
	if (bench_selected(&opts, "kv-conflict"))
		record("kv-conflict", "sync", lat, n);
	ao_kv_destroy_bucket(kv);
	ao_kv_close(kv);
	free(lat);
	env_down(&e);
}

static const struct cell_result *find(const char *cell, const char *mode)
{
	int i;

	for (i = 0; i < nresults; i++)
		if (!strcmp(results[i].cell, cell) &&
		    !strcmp(results[i].mode, mode))
			return &results[i];
	return NULL;
}

/* The ratio of mode top to mode bottom in one cell, and the difference. */
static void ratio(const char *cell, const char *top, const char *bottom)
{
	const struct cell_result *t = find(cell, top);
	const struct cell_result *b = find(cell, bottom);
	char mode[32];

	if (!t || !b || !b->p50_us || !b->p99_us)
		return;
	snprintf(mode, sizeof(mode), "%s/%s", top, bottom);
	if (opts.json) {
		bench_json_begin("busbench");
		bench_json_str("cell", cell);
		bench_json_str("mode", mode);
		bench_json_num("p50_ratio", t->p50_us / b->p50_us);
		bench_json_num("p99_ratio", t->p99_us / b->p99_us);
		bench_json_end();
	} else {
		printf("%-12s %s: p50 %.2fx (%+.1f us), p99 %.2fx\n", cell,
		       mode, t->p50_us / b->p50_us, t->p50_us - b->p50_us,
		       t->p99_us / b->p99_us);
	}
}

static void ratios(void)
{
	static const char *const cells[] = { "oneway", "request", "noresp" };
	size_t i;

	for (i = 0; i < sizeof(cells) / sizeof(cells[0]); i++)
		ratio(cells[i], "flusher", "asap");
	/* What the node's own reader saves (both with send_asap). */
	for (i = 0; i < sizeof(cells) / sizeof(cells[0]); i++)
		ratio(cells[i], "asap", "direct");
	/* What the copy and the strand add to cnats alone. */
	ratio("oneway", "asap", "cnats");
}

int main(int argc, char **argv)
{
	struct ao_node_config c = AO_NODE_CONFIG_INIT;
	struct ao_node *n = NULL;
	size_t count;
	int err;

	bench_parse(argc, argv, &opts, 1, 1, NULL, NULL);
	ao_clock_calibrate();
	if (ao_node_create(&c, &n) == -ENOSYS) {
		printf("busbench: SKIP: built without cnats (nats.h)\n");
		return 0;
	}
	err = natsd_start(&natsd);
	if (err == -ENOENT) {
		printf("busbench: SKIP: nats-server not installed (make "
		       "deps)\n");
		return 0;
	}
	if (err)
		die("nats-server", err);
	count = opts.quick ? 300 : 2000;
	if (!opts.json) {
		printf("busbench: nats-server %s, loopback, %zu samples a cell"
		       " (microseconds)\n",
		       natsd.url, count);
		printf("%-12s %-8s %8s %10s %10s %10s\n", "cell", "mode", "n",
		       "p50", "p99", "max");
	}
	run_oneway(M_FLUSHER, count);
	run_oneway(M_ASAP, count);
	run_oneway(M_DIRECT, count);
	run_oneway_raw(count);
	run_burst(M_FLUSHER, opts.quick ? 20000 : 200000);
	run_burst(M_ASAP, opts.quick ? 20000 : 200000);
	run_burst(M_DIRECT, opts.quick ? 20000 : 200000);
	run_request(M_FLUSHER, count);
	run_request(M_ASAP, count);
	run_request(M_DIRECT, count);
	run_kv(count);
	ratios();
	natsd_stop(&natsd);
	return 0;
}
