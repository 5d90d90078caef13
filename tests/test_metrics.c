// SPDX-License-Identifier: MIT
/*
 * The Prometheus text writer (io/metrics.c): families and samples in the
 * exact text format, names and types checked, the buffer grows and keeps
 * its first error; and ao_server_metrics() on a running server: every
 * line well formed, each family's HELP and TYPE before its samples, once,
 * and the counters the server's own statistics give.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <aorta/core/bufpool.h>
#include <aorta/io/conn.h>
#include <aorta/io/metrics.h>
#include <aorta/io/server.h>
#include "helpers.h"

static void test_text(void **state)
{
	struct ao_metrics m;

	(void)state;
	ao_metrics_init(&m);
	assert_null(m.buf);
	assert_int_equal(ao_metrics_family(&m, "x_total", "counter",
					   "Things.\nback\\slash"),
			 0);
	assert_int_equal(ao_metrics_u64(&m, "x_total", "", 0), 0);
	assert_int_equal(ao_metrics_u64(&m, "x_total", "reason=\"eof\"",
					18446744073709551615ull),
			 0);
	assert_int_equal(ao_metrics_family(&m, "y", "gauge", "Y."), 0);
	assert_int_equal(ao_metrics_double(&m, "y", NULL, 0.25), 0);
	assert_int_equal(ao_metrics_double(&m, "y", "a=\"1\"", NAN), 0);
	assert_int_equal(ao_metrics_double(&m, "y", "a=\"2\"", INFINITY), 0);
	assert_int_equal(ao_metrics_double(&m, "y", "a=\"3\"", -INFINITY), 0);
	assert_string_equal(m.buf,
			    "# HELP x_total Things.\\nback\\\\slash\n"
			    "# TYPE x_total counter\n"
			    "x_total 0\n"
			    "x_total{reason=\"eof\"} 18446744073709551615\n"
			    "# HELP y Y.\n"
			    "# TYPE y gauge\n"
			    "y 0.25\n"
			    "y{a=\"1\"} NaN\n"
			    "y{a=\"2\"} +Inf\n"
			    "y{a=\"3\"} -Inf\n");
	assert_int_equal(m.len, strlen(m.buf));
	ao_metrics_free(&m);
	assert_null(m.buf);
	assert_int_equal(m.len, 0);
}

static void test_refused(void **state)
{
	struct ao_metrics m;

	(void)state;
	ao_metrics_init(&m);
	assert_int_equal(ao_metrics_family(&m, "9x", "gauge", "h"), -EINVAL);
	assert_int_equal(ao_metrics_family(&m, "", "gauge", "h"), -EINVAL);
	assert_int_equal(ao_metrics_family(&m, "a-b", "gauge", "h"), -EINVAL);
	assert_int_equal(ao_metrics_family(&m, "a", "histogram", "h"), -EINVAL);
	assert_int_equal(ao_metrics_family(&m, "a", NULL, "h"), -EINVAL);
	assert_int_equal(ao_metrics_u64(&m, "a b", NULL, 1), -EINVAL);
	assert_int_equal(ao_metrics_u64(&m, "a", "x=\"1\n\"", 1), -EINVAL);
	assert_int_equal(ao_metrics_double(&m, NULL, NULL, 1), -EINVAL);
	/* Nothing was written, and the buffer has no error. */
	assert_int_equal(m.len, 0);
	assert_int_equal(m.err, 0);
	assert_int_equal(ao_metrics_u64(&m, "ns:a_b9", NULL, 1), 0);
	assert_string_equal(m.buf, "ns:a_b9 1\n");
	/* The first error stays: every call returns it, nothing more is
	 * written. */
	m.err = -ENOMEM;
	assert_int_equal(ao_metrics_u64(&m, "a", NULL, 2), -ENOMEM);
	assert_int_equal(ao_metrics_family(&m, "a", "gauge", "h"), -ENOMEM);
	assert_int_equal(ao_metrics_double(&m, "a", NULL, 2), -ENOMEM);
	assert_string_equal(m.buf, "ns:a_b9 1\n");
	ao_metrics_free(&m);
	assert_int_equal(m.err, 0);
}

/* The buffer grows past its first size, many times, with nothing lost. */
static void test_grows(void **state)
{
	struct ao_metrics m;
	char want[64];
	const char *p;
	int i;

	(void)state;
	ao_metrics_init(&m);
	assert_int_equal(ao_metrics_family(&m, "n", "gauge", "N."), 0);
	for (i = 0; i < 20000; i++) {
		snprintf(want, sizeof(want), "i=\"%d\"", i);
		assert_int_equal(ao_metrics_u64(&m, "n", want, (uint64_t)i), 0);
	}
	assert_true(m.cap >= m.len + 1);
	p = strstr(m.buf, "# TYPE n gauge\n") + strlen("# TYPE n gauge\n");
	for (i = 0; i < 20000; i++) {
		int n = snprintf(want, sizeof(want), "n{i=\"%d\"} %d\n", i, i);

		assert_memory_equal(p, want, (size_t)n);
		p += n;
	}
	assert_int_equal(*p, '\0');
	ao_metrics_free(&m);
}

/* ---- a server's metrics ---- */

static void h_open(struct ao_conn *c, void *arg)
{
	(void)c;
	(void)arg;
}

static int h_echo(struct ao_conn *c, struct ao_buf *pkt, void *arg)
{
	(void)arg;
	ao_conn_send_packet(c, pkt);
	return 0;
}

static void h_close(struct ao_conn *c, enum ao_close_reason why, void *arg)
{
	(void)c;
	(void)why;
	(void)arg;
}

/* The value of the sample "name" (exactly, labels included), or -1. */
static long long sample(const char *text, const char *name)
{
	size_t n = strlen(name);
	const char *p = text;

	while (p && *p) {
		if (!strncmp(p, name, n) && p[n] == ' ')
			return atoll(p + n + 1);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

/* Every line: a HELP, then its TYPE, then samples of that family only;
 * no family twice. */
static void check_format(const char *text)
{
	char fam[128] = "", seen[16384] = " ";
	const char *p = text;

	while (*p) {
		const char *e = strchr(p, '\n');
		size_t n;

		assert_non_null(e);
		n = (size_t)(e - p);
		if (!strncmp(p, "# HELP ", 7)) {
			const char *sp = memchr(p + 7, ' ', n - 7);
			char key[140];

			assert_non_null(sp);
			snprintf(fam, sizeof(fam), "%.*s", (int)(sp - p - 7),
				 p + 7);
			snprintf(key, sizeof(key), " %s ", fam);
			assert_null(strstr(seen, key));
			assert_true(strlen(seen) + strlen(key) < sizeof(seen));
			strcat(seen, key + 1);
			/* The TYPE line follows. */
			assert_int_equal(strncmp(e + 1, "# TYPE ", 7), 0);
			assert_int_equal(strncmp(e + 8, fam, strlen(fam)), 0);
			e = strchr(e + 1, '\n');
			assert_non_null(e);
		} else {
			size_t k = strlen(fam);

			assert_true(k > 0);
			assert_int_equal(strncmp(p, fam, k), 0);
			assert_true(p[k] == ' ' || p[k] == '{');
			assert_non_null(memchr(p, ' ', n));
		}
		p = e + 1;
	}
}

static void test_server(void **state)
{
	struct ao_server_config cfg;
	struct ao_io_stats st;
	struct ao_server *srv;
	struct ao_metrics m;
	uint8_t out[8] = { 0, 3, 'a', 'b', 'c' }, in[5];
	int fd;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.backend = AO_IO_EPOLL;
	cfg.framing.kind = AO_FRAME_LEN16;
	cfg.framing.max_packet = 256;
	cfg.pool_buffers = 256;
	cfg.flags = AO_SERVER_QUIET;
	cfg.handlers.on_open = h_open;
	cfg.handlers.on_packet = h_echo;
	cfg.handlers.on_close = h_close;
	assert_int_equal(ao_server_create(&cfg, &srv), 0);
	assert_int_equal(ao_server_start(srv), 0);
	fd = t_cl_connect(ao_server_port(srv));
	t_cl_write(fd, out, 5);
	assert_int_equal(t_cl_read(fd, in, 5), 0);
	assert_memory_equal(in, out, 5);
	close(fd);
	WAIT_UNTIL(ao_server_stats(srv, -1, &st) == 0 &&
			   st.closes[AO_CLOSE_EOF] == 1,
		   5000);

	ao_metrics_init(&m);
	assert_int_equal(ao_server_metrics(srv, &m), 0);
	assert_non_null(m.buf);
	check_format(m.buf);
	assert_int_equal(sample(m.buf, "aorta_connections_accepted_total"), 1);
	assert_int_equal(sample(m.buf, "aorta_connections_open"), 0);
	assert_int_equal(sample(m.buf, "aorta_connection_closes_total"
				       "{reason=\"eof\"}"),
			 1);
	assert_int_equal(sample(m.buf, "aorta_packets_received_total"), 1);
	assert_int_equal(sample(m.buf, "aorta_packets_sent_total"), 1);
	assert_int_equal(sample(m.buf, "aorta_received_bytes_total"), 5);
	assert_int_equal(sample(m.buf, "aorta_sent_bytes_total"), 5);
	assert_int_equal(sample(m.buf, "aorta_pool_buffers"), 256);
	assert_true(sample(m.buf, "aorta_pool_lock_acquisitions_total"
				  "{phase=\"fast\"}") >= 0);
	assert_true(sample(m.buf, "aorta_executor_workers") >= 1);
	assert_true(sample(m.buf, "aorta_executor_executed_total") >= 1);
	/* Every close reason has its sample. */
	for (int i = 0; i < AO_CLOSE_NR; i++) {
		char name[128];
		const char *r = ao_close_reason_name((enum ao_close_reason)i);
		size_t k = (size_t)snprintf(name, sizeof(name),
					    "aorta_connection_closes_total"
					    "{reason=\"");

		for (; *r; r++)
			name[k++] = (*r >= 'a' && *r <= 'z') ||
						    (*r >= '0' && *r <= '9') ?
					    *r :
					    '_';
		name[k++] = '"';
		name[k++] = '}';
		name[k] = '\0';
		assert_true(sample(m.buf, name) >= 0);
	}
	ao_metrics_free(&m);
	assert_int_equal(ao_server_stop(srv), 0);
	assert_int_equal(ao_bufpool_in_use(ao_server_pool(srv)), 0);
	assert_int_equal(ao_server_destroy(srv), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_grows),
		cmocka_unit_test(test_server),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
