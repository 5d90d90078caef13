// SPDX-License-Identifier: MIT
/*
 * The tools' pure parts (tools/common): the log-linear histogram
 * (buckets, percentiles, merging, CSV), the framing and payload, and the
 * option-value parsers (server addresses included).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tools/common/echo_proto.h"
#include "../tools/common/hist.h"
#include "../tools/common/parse.h"
#include "helpers.h"

static struct hist *hist_new(void)
{
	struct hist *h = malloc(sizeof(*h));

	assert_non_null(h);
	hist_init(h);
	return h;
}

static void test_buckets(void **state)
{
	uint64_t v, prev_high = 0;
	unsigned int i;

	(void)state;
	/* Exact below 2 * HIST_SUB. */
	for (v = 0; v < 2 * HIST_SUB; v++) {
		assert_int_equal(hist_index(v), v);
		assert_int_equal(hist_bucket_low((unsigned int)v), v);
		assert_int_equal(hist_bucket_high((unsigned int)v), v);
	}
	/* Buckets tile the range without gaps or overlaps. */
	for (i = 1; i < HIST_BUCKETS; i++) {
		prev_high = hist_bucket_high(i - 1);
		assert_int_equal(hist_bucket_low(i), prev_high + 1);
		assert_true(hist_bucket_high(i) >= hist_bucket_low(i));
	}
	assert_int_equal(hist_bucket_high(HIST_BUCKETS - 1), UINT64_MAX);
	assert_int_equal(hist_index(UINT64_MAX), HIST_BUCKETS - 1);
	/* Every value lands in the bucket that covers it, within 1/HIST_SUB. */
	for (v = 1; v && v < (UINT64_MAX >> 1); v = v * 3 + 7) {
		i = hist_index(v);
		assert_true(i < HIST_BUCKETS);
		assert_true(hist_bucket_low(i) <= v);
		assert_true(hist_bucket_high(i) >= v);
		assert_true(hist_bucket_high(i) - hist_bucket_low(i) <=
			    v / HIST_SUB);
	}
	for (v = 2 * HIST_SUB; v < 70000; v++) {
		i = hist_index(v);
		assert_true(hist_bucket_low(i) <= v &&
			    v <= hist_bucket_high(i));
	}
}

static void test_percentiles(void **state)
{
	struct hist *h = hist_new();
	uint64_t v, p;

	(void)state;
	assert_int_equal(hist_percentile(h, 50), 0);
	assert_true(hist_mean(h) == 0.0);
	/* 1..100000 ns, once each. */
	for (v = 1; v <= 100000; v++)
		hist_record(h, v);
	assert_int_equal(h->total, 100000);
	assert_int_equal(h->min, 1);
	assert_int_equal(h->max, 100000);
	assert_true(hist_mean(h) == 50000.5);
	p = hist_percentile(h, 50);
	assert_true(p >= 50000 && p <= 50000 + 50000 / HIST_SUB);
	p = hist_percentile(h, 99);
	assert_true(p >= 99000 && p <= 99000 + 99000 / HIST_SUB);
	p = hist_percentile(h, 99.9);
	assert_true(p >= 99900 && p <= 100000);
	assert_int_equal(hist_percentile(h, 100), 100000);
	/* The smallest percentile is the smallest value. */
	assert_int_equal(hist_percentile(h, 0.0001), 1);
	free(h);

	/* One outlier: p99.9 of 999 fast and 1 slow is fast, max is not. */
	h = hist_new();
	for (v = 0; v < 999; v++)
		hist_record(h, 1000);
	hist_record(h, 5000000000ull);
	assert_true(hist_percentile(h, 99.9) <= 1000 + 1000 / HIST_SUB);
	assert_true(hist_percentile(h, 99.95) >= 4900000000ull);
	assert_int_equal(hist_percentile(h, 100), 5000000000ull);
	/* Clamped to the exact extremes. */
	assert_true(hist_percentile(h, 50) >= 1000);
	free(h);
}

static void test_merge(void **state)
{
	struct hist *a = hist_new(), *b = hist_new(), *all = hist_new();
	struct hist *m = hist_new();
	uint64_t v;
	unsigned int i;

	(void)state;
	for (v = 1; v < 200000; v += 3) {
		hist_record((v & 1) ? a : b, v * 7);
		hist_record(all, v * 7);
	}
	hist_merge(m, a);
	hist_merge(m, b);
	assert_int_equal(m->total, all->total);
	assert_int_equal(m->min, all->min);
	assert_int_equal(m->max, all->max);
	assert_int_equal(m->sum, all->sum);
	for (i = 0; i < HIST_BUCKETS; i++)
		assert_int_equal(m->counts[i], all->counts[i]);
	assert_int_equal(hist_percentile(m, 99), hist_percentile(all, 99));
	/* Merging an empty histogram changes nothing. */
	hist_init(a);
	hist_merge(m, a);
	assert_int_equal(m->min, all->min);
	assert_int_equal(m->total, all->total);
	free(a);
	free(b);
	free(all);
	free(m);
}

static void test_csv(void **state)
{
	struct hist *h = hist_new();
	char line[256], *buf = NULL;
	unsigned long long lo, hi, cnt, cum, prev_cum = 0;
	double pct = 0;
	size_t len = 0;
	FILE *f;
	int rows = 0;

	(void)state;
	hist_record(h, 10);
	hist_record(h, 10);
	hist_record(h, 1000);
	hist_record(h, 123456789);
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(hist_write_csv(h, f), 0);
	fclose(f);
	f = fmemopen(buf, len, "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	assert_string_equal(line,
			    "low_ns,high_ns,count,cumulative,percentile\n");
	while (fgets(line, sizeof(line), f)) {
		assert_int_equal(sscanf(line, "%llu,%llu,%llu,%llu,%lf", &lo,
					&hi, &cnt, &cum, &pct),
				 5);
		assert_true(lo <= hi);
		assert_int_equal(cum, prev_cum + cnt);
		prev_cum = cum;
		rows++;
	}
	assert_int_equal(rows, 3);
	assert_int_equal(prev_cum, 4);
	assert_true(pct == 100.0);
	fclose(f);
	free(buf);
	free(h);
}

static void test_framing(void **state)
{
	uint8_t pat[200 + PATTERN_SPAN], buf[4 + 200], buf2[4 + 200];
	enum framing f;

	(void)state;
	assert_int_equal(framing_parse("raw", &f), 0);
	assert_int_equal(f, FRAMING_RAW);
	assert_int_equal(framing_parse("len16", &f), 0);
	assert_int_equal(f, FRAMING_LEN16);
	assert_int_equal(framing_parse("len32", &f), 0);
	assert_int_equal(f, FRAMING_LEN32);
	assert_int_equal(framing_parse("len8", &f), -1);
	assert_int_equal(framing_parse("", &f), -1);
	assert_string_equal(framing_name(FRAMING_LEN16), "len16");
	assert_int_equal(framing_hdr_len(FRAMING_RAW), 0);
	assert_int_equal(framing_hdr_len(FRAMING_LEN16), 2);
	assert_int_equal(framing_hdr_len(FRAMING_LEN32), 4);
	assert_int_equal(framing_max_payload(FRAMING_LEN16), 65535);

	assert_int_equal(pattern_len(200), sizeof(pat));
	pattern_fill(pat, sizeof(pat), 1);
	/* len16: 2-byte big-endian payload length, then seq and time. */
	frame_build(buf, FRAMING_LEN16, 200, 0x0102030405060708ull,
		    0x1112131415161718ull, pat);
	assert_int_equal(buf[0], 0);
	assert_int_equal(buf[1], 200);
	assert_int_equal(buf[2], 0x01);
	assert_int_equal(buf[9], 0x08);
	assert_int_equal(buf[10], 0x11);
	assert_int_equal(buf[17], 0x18);
	assert_int_equal(frame_seq(buf, FRAMING_LEN16, 200),
			 0x0102030405060708ull);
	/* len32: 4-byte header. */
	frame_build(buf, FRAMING_LEN32, 200, 7, 9, pat);
	assert_memory_equal(buf, "\0\0\0\xc8", 4);
	assert_int_equal(frame_seq(buf, FRAMING_LEN32, 200), 7);
	/* The filler depends on the sequence number. */
	frame_build(buf2, FRAMING_LEN32, 200, 8, 9, pat);
	assert_memory_not_equal(buf + 4 + PAYLOAD_HDR, buf2 + 4 + PAYLOAD_HDR,
				200 - PAYLOAD_HDR);
	/* Raw, and a payload shorter than seq + time: cut short. */
	memset(buf, 0xee, sizeof(buf));
	frame_build(buf, FRAMING_RAW, 5, 0x0102030405060708ull, 1, pat);
	assert_memory_equal(buf, "\x01\x02\x03\x04\x05\xee", 6);
	assert_int_equal(frame_seq(buf, FRAMING_RAW, 5), 0x0102030405ull);
}

static void test_parse(void **state)
{
	uint64_t v = 42;

	(void)state;
	assert_int_equal(parse_count("64", 1, 100, &v), 0);
	assert_int_equal(v, 64);
	assert_int_equal(parse_count("10k", 1, UINT64_MAX, &v), 0);
	assert_int_equal(v, 10000);
	assert_int_equal(parse_count("2M", 1, UINT64_MAX, &v), 0);
	assert_int_equal(v, 2000000);
	v = 42;
	assert_int_equal(parse_count("0", 1, 100, &v), -1);
	assert_int_equal(parse_count("101", 1, 100, &v), -1);
	assert_int_equal(parse_count("", 1, 100, &v), -1);
	assert_int_equal(parse_count("-1", 0, 100, &v), -1);
	assert_int_equal(parse_count("12x", 0, 100, &v), -1);
	assert_int_equal(parse_count("1.5", 0, 100, &v), -1);
	assert_int_equal(parse_count("99999999999999999999", 0, UINT64_MAX, &v),
			 -1);
	assert_int_equal(parse_count("20000000000G", 0, UINT64_MAX, &v), -1);
	assert_int_equal(v, 42);
	assert_int_equal(parse_size("4k", 1, UINT64_MAX, &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(parse_size("1M", 1, UINT64_MAX, &v), 0);
	assert_int_equal(v, 1048576);

	assert_int_equal(parse_duration("10", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 10000000000ull);
	assert_int_equal(parse_duration("2.5s", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 2500000000ull);
	assert_int_equal(parse_duration("500ms", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 500000000ull);
	assert_int_equal(parse_duration("1.5ms", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 1500000ull);
	assert_int_equal(parse_duration("2m", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 120000000000ull);
	assert_int_equal(parse_duration("1h", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 3600000000000ull);
	assert_int_equal(parse_duration("0", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 0);
	v = 42;
	assert_int_equal(parse_duration("0", 1, UINT64_MAX, &v), -1);
	assert_int_equal(parse_duration("1.", 0, UINT64_MAX, &v), -1);
	assert_int_equal(parse_duration(".5", 0, UINT64_MAX, &v), -1);
	assert_int_equal(parse_duration("20us", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 20000ull);
	assert_int_equal(parse_duration("1.5us", 0, UINT64_MAX, &v), 0);
	assert_int_equal(v, 1000ull);
	v = 42;
	assert_int_equal(parse_duration("5ns", 0, UINT64_MAX, &v), -1);
	assert_int_equal(parse_duration("5 s", 0, UINT64_MAX, &v), -1);
	assert_int_equal(parse_duration("", 0, UINT64_MAX, &v), -1);
	assert_int_equal(parse_duration("10s", 0, 1000, &v), -1);
	assert_int_equal(parse_duration("9999999999999h", 0, UINT64_MAX, &v),
			 -1);
	assert_int_equal(v, 42);
}

/* parse_addr: numeric IPv4 (dotted quad) or IPv6, brackets optional, the
 * port set; anything else refused with *sa untouched. */
static void test_parse_addr(void **state)
{
	static const char *const bad[] = {
		"",	    "localhost", "1.2.3",     "256.0.0.1",
		"1.2.3.4 ", " ::1",	 "[1.2.3.4]", "[::1",
		"::1]",	    "[]",	 "::g",	      "1.2.3.4:80",
	};
	struct sockaddr_storage ss, before;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	socklen_t len = 0;
	struct in6_addr a6;

	(void)state;
	assert_int_equal(parse_addr("127.0.0.1", 7000, &ss, &len), 0);
	assert_int_equal(len, sizeof(*s4));
	assert_int_equal(s4->sin_family, AF_INET);
	assert_int_equal(ntohs(s4->sin_port), 7000);
	assert_int_equal(ntohl(s4->sin_addr.s_addr), INADDR_LOOPBACK);
	for (int b = 0; b < 2; b++) {
		assert_int_equal(parse_addr(b ? "[::1]" : "::1", 80, &ss, &len),
				 0);
		assert_int_equal(len, sizeof(*s6));
		assert_int_equal(s6->sin6_family, AF_INET6);
		assert_int_equal(ntohs(s6->sin6_port), 80);
		assert_true(IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr));
	}
	assert_int_equal(parse_addr("[2001:db8::7]", 1, &ss, &len), 0);
	assert_int_equal(inet_pton(AF_INET6, "2001:db8::7", &a6), 1);
	assert_memory_equal(&s6->sin6_addr, &a6, sizeof(a6));
	assert_int_equal(parse_addr("::", 0, &ss, &len), 0);
	assert_true(IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr));
	assert_int_equal(parse_addr("fe80::1%lo", 9, &ss, &len), 0);
	assert_int_equal(s6->sin6_scope_id, 1); /* lo is interface 1 */
	memset(&before, 0x5a, sizeof(before));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		memcpy(&ss, &before, sizeof(ss));
		if (!parse_addr(bad[i], 1, &ss, &len))
			fail_msg("parse_addr took '%s'", bad[i]);
		assert_memory_equal(&ss, &before, sizeof(ss));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets),
		cmocka_unit_test(test_percentiles),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_csv),
		cmocka_unit_test(test_framing),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_parse_addr),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
