// SPDX-License-Identifier: MIT
/*
 * Prometheus' text format, and a server's counters in it: see
 * aorta/io/metrics.h.  The names follow Prometheus' conventions
 * (snake_case, counters end in _total, seconds and bytes as units), so
 * that `promtool check metrics` finds nothing to say.
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/core/bufpool.h>
#include <aorta/core/exec.h>
#include <aorta/io/conn.h>
#include <aorta/io/metrics.h>
#include <aorta/io/server.h>

void ao_metrics_init(struct ao_metrics *m)
{
	memset(m, 0, sizeof(*m));
}

void ao_metrics_free(struct ao_metrics *m)
{
	free(m->buf);
	ao_metrics_init(m);
}

/* Room for n more bytes and the NUL. */
static int reserve(struct ao_metrics *m, size_t n)
{
	size_t cap = m->cap ? m->cap : 1024;
	char *p;

	if (m->err)
		return m->err;
	if (m->len + n + 1 <= m->cap)
		return 0;
	while (cap < m->len + n + 1) {
		if (cap > SIZE_MAX / 2)
			return m->err = -ENOMEM;
		cap *= 2;
	}
	p = realloc(m->buf, cap);
	if (!p)
		return m->err = -ENOMEM;
	m->buf = p;
	m->cap = cap;
	return 0;
}

static int put(struct ao_metrics *m, const char *s, size_t n)
{
	int err = reserve(m, n);

	if (err)
		return err;
	memcpy(m->buf + m->len, s, n);
	m->len += n;
	m->buf[m->len] = '\0';
	return 0;
}

static int puts_(struct ao_metrics *m, const char *s)
{
	return put(m, s, strlen(s));
}

static int __attribute__((format(printf, 2, 3)))
putf(struct ao_metrics *m, const char *fmt, ...)
{
	char tmp[64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -EINVAL;
	return put(m, tmp, (size_t)n);
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* */
static bool good_name(const char *s)
{
	if (!s || !*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == ':'))
			return false;
	return true;
}

int ao_metrics_family(struct ao_metrics *m, const char *name, const char *type,
		      const char *help)
{
	const char *h;

	if (m->err)
		return m->err;
	if (!good_name(name) || !type ||
	    (strcmp(type, "counter") && strcmp(type, "gauge")))
		return -EINVAL;
	puts_(m, "# HELP ");
	puts_(m, name);
	puts_(m, " ");
	/* The help text escapes a backslash and a newline. */
	for (h = help ? help : ""; *h; h++) {
		if (*h == '\\')
			puts_(m, "\\\\");
		else if (*h == '\n')
			puts_(m, "\\n");
		else
			put(m, h, 1);
	}
	puts_(m, "\n# TYPE ");
	puts_(m, name);
	puts_(m, " ");
	puts_(m, type);
	return puts_(m, "\n");
}

static int sample_head(struct ao_metrics *m, const char *name,
		       const char *labels)
{
	if (m->err)
		return m->err;
	if (!good_name(name) || (labels && strchr(labels, '\n')))
		return -EINVAL;
	puts_(m, name);
	if (labels && *labels) {
		puts_(m, "{");
		puts_(m, labels);
		puts_(m, "}");
	}
	return puts_(m, " ");
}

int ao_metrics_u64(struct ao_metrics *m, const char *name, const char *labels,
		   uint64_t v)
{
	int err = sample_head(m, name, labels);

	if (err)
		return err;
	return putf(m, "%llu\n", (unsigned long long)v);
}

/*
 * The "C" locale's numbers: made once and never freed (like the
 * process's own locales).  A race to make it frees the loser's.
 */
static locale_t c_numeric(void)
{
	static locale_t loc;
	locale_t l = __atomic_load_n(&loc, __ATOMIC_ACQUIRE), none = NULL;

	if (l)
		return l;
	l = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	if (!l)
		return NULL;
	/* Acq_rel: the locale's contents before its pointer; the acquire
	 * load above pairs with it. */
	if (!__atomic_compare_exchange_n(&loc, &none, l, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		freelocale(l);
		l = none;
	}
	return l;
}

/*
 * printf's %g writes the decimal point of the thread's locale: "0,5"
 * after the program's setlocale(LC_ALL, "") in a German locale, which
 * Prometheus cannot parse.  So the number is written under the "C"
 * locale, on this thread only (uselocale(), not setlocale(), which
 * would change every thread's), and the caller's is put back.
 */
static int put_double(struct ao_metrics *m, double v)
{
	locale_t c = c_numeric(), old;
	char tmp[64];
	int n;

	if (!c)
		return m->err = -ENOMEM;
	old = uselocale(c);
	n = snprintf(tmp, sizeof(tmp), "%.17g\n", v);
	uselocale(old);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -EINVAL;
	return put(m, tmp, (size_t)n);
}

int ao_metrics_double(struct ao_metrics *m, const char *name,
		      const char *labels, double v)
{
	int err = sample_head(m, name, labels);

	if (err)
		return err;
	if (isnan(v))
		return puts_(m, "NaN\n");
	if (isinf(v))
		return puts_(m, v > 0 ? "+Inf\n" : "-Inf\n");
	return put_double(m, v);
}

/* ------------------------------------------------------------------ */
/* A server's counters */

/* A family of one sample without labels. */
static void one(struct ao_metrics *m, const char *name, const char *type,
		const char *help, uint64_t v)
{
	ao_metrics_family(m, name, type, help);
	ao_metrics_u64(m, name, NULL, v);
}

/* reason="slow_consumer": the close reason's name, in snake_case. */
static void reason_label(char *out, size_t n, enum ao_close_reason why)
{
	const char *s = ao_close_reason_name(why);
	size_t i = (size_t)snprintf(out, n, "reason=\"");

	for (; *s && i + 3 < n; s++)
		out[i++] = (*s >= 'a' && *s <= 'z') ||
					   (*s >= '0' && *s <= '9') ?
				   *s :
				   '_';
	out[i++] = '"';
	out[i] = '\0';
}

static void io_metrics(struct ao_metrics *m, const struct ao_io_stats *st)
{
	char label[64];
	int i;

	one(m, "aorta_connections_accepted_total", "counter",
	    "Connections accepted and opened.", st->accepted);
	one(m, "aorta_connections_rejected_total", "counter",
	    "Connections accepted and closed at once (limit, stopping).",
	    st->rejected);
	one(m, "aorta_connections_open", "gauge", "Connections open now.",
	    st->open);
	ao_metrics_family(m, "aorta_connection_closes_total", "counter",
			  "Connections closed, by reason.");
	for (i = 0; i < AO_CLOSE_NR; i++) {
		reason_label(label, sizeof(label), (enum ao_close_reason)i);
		ao_metrics_u64(m, "aorta_connection_closes_total", label,
			       st->closes[i]);
	}
	one(m, "aorta_connections_aborted_total", "counter",
	    "Closes that ended with a reset (slow consumers, drain or "
	    "linger out of time).",
	    st->aborted);
	one(m, "aorta_packets_received_total", "counter",
	    "Packets (messages) handed to the handlers.", st->packets_in);
	one(m, "aorta_packets_sent_total", "counter", "Buffers fully sent.",
	    st->packets_out);
	one(m, "aorta_received_bytes_total", "counter", "Bytes received.",
	    st->bytes_in);
	one(m, "aorta_sent_bytes_total", "counter",
	    "Bytes sent, framing included.", st->bytes_out);
	one(m, "aorta_receive_pauses_total", "counter",
	    "Receives paused for a full backlog (backpressure).", st->pauses);
	one(m, "aorta_receive_nobufs_total", "counter",
	    "Receives that found no pool buffer.", st->enobufs);
	one(m, "aorta_accept_errors_total", "counter",
	    "Accept failures (EMFILE, ...).", st->accept_errors);
	one(m, "aorta_ring_assisted_total", "counter",
	    "Strand items a ring thread ran itself.", st->assisted);
	one(m, "aorta_websocket_upgrades_total", "counter",
	    "WebSocket upgrades completed.", st->ws_upgrades);
	one(m, "aorta_websocket_frames_received_total", "counter",
	    "WebSocket frames received.", st->ws_frames_in);
	one(m, "aorta_websocket_frame_headers_written_total", "counter",
	    "WebSocket frame headers written into a buffer's headroom.",
	    st->ws_frames_written);
	one(m, "aorta_websocket_frames_shared_total", "counter",
	    "WebSocket sends that reused a header already written.",
	    st->ws_frames_shared);
	one(m, "aorta_websocket_inline_headers_total", "counter",
	    "WebSocket sends with the header beside the buffer.",
	    st->ws_inline_headers);
	one(m, "aorta_websocket_pings_sent_total", "counter",
	    "Pings sent to silent WebSocket connections.", st->ws_pings);
	one(m, "aorta_websocket_pongs_sent_total", "counter",
	    "Pongs sent to the peers' pings.", st->ws_pongs);
	one(m, "aorta_http_requests_total", "counter", "Plain HTTP requests.",
	    st->http_requests);
	one(m, "aorta_http_errors_total", "counter",
	    "HTTP requests refused or timed out.", st->http_errors);
}

static void pool_metrics(struct ao_metrics *m, const struct ao_bufpool *pool)
{
	static const char *const phase[4] = { "fast", "spin", "yield",
					      "sleep" };
	struct ao_bufpool_stats st;
	struct ao_bufpool_info info;
	char label[32];
	uint64_t n[4];
	int i;

	ao_bufpool_info(pool, &info);
	ao_bufpool_stats(pool, &st);
	one(m, "aorta_pool_buffers", "gauge", "Buffers in the pool.",
	    info.count);
	one(m, "aorta_pool_buffer_bytes", "gauge",
	    "The capacity of each pool buffer.", info.buf_size);
	one(m, "aorta_pool_buffers_in_use", "gauge", "Pool buffers out now.",
	    st.in_use);
	one(m, "aorta_pool_gets_total", "counter",
	    "Buffers handed out by the shards.", st.sum.gets);
	one(m, "aorta_pool_cache_gets_total", "counter",
	    "Gets served through a thread cache.", st.cache_gets);
	one(m, "aorta_pool_steals_total", "counter",
	    "Gets served by another shard than the home one.", st.sum.steals);
	one(m, "aorta_pool_exhausted_total", "counter",
	    "Gets that found the pool empty.", st.exhausted);
	/* The shard locks: the sync/ lock's phases (all 0 when the
	 * library is built without lock statistics). */
	n[0] = st.sum.lock.fast;
	n[1] = st.sum.lock.phase1;
	n[2] = st.sum.lock.phase2;
	n[3] = st.sum.lock.phase3;
	ao_metrics_family(m, "aorta_pool_lock_acquisitions_total", "counter",
			  "Pool shard lock acquisitions, by the phase that "
			  "took the lock (fast, spin, yield, sleep).");
	for (i = 0; i < 4; i++) {
		snprintf(label, sizeof(label), "phase=\"%s\"", phase[i]);
		ao_metrics_u64(m, "aorta_pool_lock_acquisitions_total", label,
			       n[i]);
	}
	one(m, "aorta_pool_lock_handoffs_total", "counter",
	    "Pool shard lock sleepers handed the lock by an unlock.",
	    st.sum.lock.handoffs);
	ao_metrics_family(m, "aorta_pool_lock_wait_seconds_total", "counter",
			  "Time spent waiting for pool shard locks.");
	ao_metrics_double(m, "aorta_pool_lock_wait_seconds_total", NULL,
			  (double)st.sum.lock.wait_ns / 1e9);
}

static void exec_metrics(struct ao_metrics *m, const struct ao_exec *ex)
{
	struct ao_exec_stats st;

	if (ao_exec_stats(ex, &st))
		return;
	one(m, "aorta_executor_workers", "gauge", "Executor worker threads.",
	    st.workers);
	one(m, "aorta_executor_submitted_total", "counter",
	    "Work items submitted.", st.submitted);
	one(m, "aorta_executor_executed_total", "counter",
	    "Work items run by the workers.", st.executed);
	one(m, "aorta_executor_rejected_total", "counter",
	    "Submissions refused (full, or shutting down).", st.rejected);
	one(m, "aorta_executor_stolen_total", "counter",
	    "Work items taken from another worker's deque.", st.stolen);
	one(m, "aorta_executor_parks_total", "counter",
	    "Times a worker went to sleep.", st.parks);
	one(m, "aorta_executor_wakeups_total", "counter",
	    "Sleeps ended by a notify.", st.wakeups);
	one(m, "aorta_executor_queued", "gauge", "Work items queued now.",
	    st.queued);
}

int ao_server_metrics(const struct ao_server *srv, struct ao_metrics *m)
{
	struct ao_io_stats st;
	struct ao_bufpool *pool;
	struct ao_exec *ex;

	if (m->err)
		return m->err;
	if (!ao_server_stats(srv, -1, &st))
		io_metrics(m, &st);
	pool = ao_server_pool(srv);
	if (pool)
		pool_metrics(m, pool);
	ex = ao_server_exec(srv);
	if (ex)
		exec_metrics(m, ex);
	return m->err;
}
