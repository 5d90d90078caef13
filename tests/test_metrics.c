// SPDX-License-Identifier: MIT
/*
 * The Prometheus text writer (io/metrics.c): families and samples in the
 * exact text format, names and types checked, the buffer grows and keeps
 * its first error; and ao_server_metrics() on a running server: every
 * line well formed, each family's HELP and TYPE before its samples, once,
 * and the counters the server's own statistics give.
 */
#include <errno.h>
#include <locale.h>
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

/*
 * glibc's setlocale() loses the locale path it builds from LOCPATH
 * (__argz_add_sep), once per call: not a leak of ours, so LeakSanitizer
 * is told to let it be.
 */
#if T_ASAN
const char *__lsan_default_suppressions(void);
/* Looked up by the sanitizer's runtime: visible whatever the build's
 * default visibility. */
__attribute__((visibility("default"))) const char *
__lsan_default_suppressions(void)
{
	return "leak:__argz_add_sep\n";
}
#endif

/* The directory comma_locale() made a locale in, if any. */
static char t_locdir[64];

/*
 * A locale whose decimal point is a comma, in effect for the whole
 * process: one of a few common names, else one made with localedef(1)
 * into dir (LOCPATH) from glibc's sources.  False, with the reason in
 * why, when there is none.
 */
static bool comma_locale(char *dir, size_t cap, char *why, size_t wcap)
{
	static const char *const names[] = {
		"de_DE.UTF-8", "de_DE.utf8",  "fr_FR.UTF-8", "fr_FR.utf8",
		"ru_RU.UTF-8", "ru_RU.utf8",  "es_ES.UTF-8", "it_IT.UTF-8",
		"nl_NL.UTF-8", "pt_BR.UTF-8",
	};
	char cmd[512];
	size_t i;

	dir[0] = '\0';
	for (i = 0; i < ARRAY_SIZE(names); i++)
		if (setlocale(LC_ALL, names[i]) &&
		    !strcmp(localeconv()->decimal_point, ","))
			return true;
	setlocale(LC_ALL, "C");
	if (access("/usr/share/i18n/locales/de_DE", R_OK)) {
		snprintf(why, wcap,
			 "no comma-decimal locale installed, and "
			 "no /usr/share/i18n/locales/de_DE to "
			 "make one");
		return false;
	}
	snprintf(dir, cap, "/tmp/aorta-locale-XXXXXX");
	if (!mkdtemp(dir)) {
		snprintf(why, wcap, "mkdtemp: %s", strerror(errno));
		dir[0] = '\0';
		return false;
	}
	snprintf(cmd, sizeof(cmd),
		 "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1",
		 dir);
	if (system(cmd) != 0) {
		snprintf(why, wcap, "localedef -i de_DE -f UTF-8 failed");
		return false;
	}
	setenv("LOCPATH", dir, 1);
	if (setlocale(LC_ALL, "de_DE.UTF-8") &&
	    !strcmp(localeconv()->decimal_point, ","))
		return true;
	setlocale(LC_ALL, "C");
	snprintf(why, wcap,
		 "the de_DE.UTF-8 made with localedef has no "
		 "comma for a decimal point");
	return false;
}

/* Prometheus reads the numbers with a point, NaN and +-Inf, whatever
 * locale the program set for itself. */
static void test_locale(void **state)
{
	struct ao_metrics m;
	char why[160], tmp[32];
	bool ok = comma_locale(t_locdir, sizeof(t_locdir), why, sizeof(why));
	locale_t de;

	(void)state;
	if (ok) {
		/* It is in effect: printf itself writes a comma. */
		snprintf(tmp, sizeof(tmp), "%g", 0.5);
		assert_string_equal(tmp, "0,5");
		ao_metrics_init(&m);
		assert_int_equal(ao_metrics_double(&m, "y", NULL, 0.5), 0);
		assert_int_equal(ao_metrics_double(&m, "y", NULL, -1234.125),
				 0);
		assert_int_equal(ao_metrics_double(&m, "y", NULL, 0x1p-20), 0);
		assert_int_equal(ao_metrics_double(&m, "y", NULL, NAN), 0);
		assert_int_equal(ao_metrics_double(&m, "y", NULL, -NAN), 0);
		assert_int_equal(ao_metrics_double(&m, "y", NULL, INFINITY), 0);
		assert_int_equal(ao_metrics_double(&m, "y", NULL, -INFINITY),
				 0);
		assert_string_equal(m.buf, "y 0.5\n"
					   "y -1234.125\n"
					   "y 9.5367431640625e-07\n"
					   "y NaN\n"
					   "y NaN\n"
					   "y +Inf\n"
					   "y -Inf\n");
		ao_metrics_free(&m);
		/* The program's locale is left as it was. */
		snprintf(tmp, sizeof(tmp), "%g", 0.5);
		assert_string_equal(tmp, "0,5");
		/* A thread's own locale (uselocale()) too. */
		de = newlocale(LC_ALL_MASK, setlocale(LC_ALL, NULL),
			       (locale_t)0);
		setlocale(LC_ALL, "C");
		assert_non_null(de);
		uselocale(de);
		snprintf(tmp, sizeof(tmp), "%g", 0.5);
		assert_string_equal(tmp, "0,5");
		ao_metrics_init(&m);
		assert_int_equal(ao_metrics_double(&m, "y", NULL, 2.5), 0);
		assert_string_equal(m.buf, "y 2.5\n");
		ao_metrics_free(&m);
		assert_true(uselocale((locale_t)0) == de);
		uselocale(LC_GLOBAL_LOCALE);
		freelocale(de);
	}
	if (!ok) {
		print_message("skip: %s\n", why);
		skip();
	}
}

/* After test_locale, passed or not: the C locale, no made locale. */
static int locale_teardown(void **state)
{
	char cmd[128];

	(void)state;
	uselocale(LC_GLOBAL_LOCALE);
	setlocale(LC_ALL, "C");
	if (t_locdir[0]) {
		unsetenv("LOCPATH");
		snprintf(cmd, sizeof(cmd), "rm -rf %s", t_locdir);
		t_locdir[0] = '\0';
		if (system(cmd) != 0)
			return -1;
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_grows),
		cmocka_unit_test(test_server),
		cmocka_unit_test_teardown(test_locale, locale_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
