// SPDX-License-Identifier: MIT
/* Framing, payload and option values of ao-load: see proto.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include "proto.h"

static const char *const framing_names[] = {
	[FRAMING_RAW] = "raw",
	[FRAMING_LEN16] = "len16",
	[FRAMING_LEN32] = "len32",
};

int framing_parse(const char *s, enum framing *f)
{
	unsigned int i;

	for (i = 0; i < sizeof(framing_names) / sizeof(framing_names[0]); i++) {
		if (!strcmp(s, framing_names[i])) {
			*f = (enum framing)i;
			return 0;
		}
	}
	return -1;
}

const char *framing_name(enum framing f)
{
	return framing_names[f];
}

size_t framing_hdr_len(enum framing f)
{
	return f == FRAMING_LEN16 ? 2 : f == FRAMING_LEN32 ? 4 : 0;
}

size_t framing_max_payload(enum framing f)
{
	return f == FRAMING_LEN16 ? 65535 : PAYLOAD_MAX;
}

size_t pattern_len(size_t size)
{
	return size + PATTERN_SPAN;
}

void pattern_fill(uint8_t *pattern, size_t len, uint32_t salt)
{
	uint32_t x = salt * 2654435761u + 0x9e3779b9u;
	size_t i;

	/* xorshift32: cheap bytes that do not repeat with a short period. */
	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		pattern[i] = (uint8_t)(x >> 24);
	}
}

static void put_be64(uint8_t *p, uint64_t v)
{
	int i;

	for (i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

void frame_build(uint8_t *buf, enum framing f, size_t size, uint64_t seq,
		 uint64_t ts_ns, const uint8_t *pattern)
{
	uint8_t hdr[PAYLOAD_HDR];

	switch (f) {
	case FRAMING_LEN16:
		buf[0] = (uint8_t)(size >> 8);
		buf[1] = (uint8_t)size;
		buf += 2;
		break;
	case FRAMING_LEN32:
		buf[0] = (uint8_t)(size >> 24);
		buf[1] = (uint8_t)(size >> 16);
		buf[2] = (uint8_t)(size >> 8);
		buf[3] = (uint8_t)size;
		buf += 4;
		break;
	case FRAMING_RAW:
		break;
	}
	put_be64(hdr, seq);
	put_be64(hdr + 8, ts_ns);
	if (size <= PAYLOAD_HDR) {
		memcpy(buf, hdr, size);
		return;
	}
	memcpy(buf, hdr, PAYLOAD_HDR);
	memcpy(buf + PAYLOAD_HDR, pattern + seq % PATTERN_SPAN,
	       size - PAYLOAD_HDR);
}

uint64_t frame_seq(const uint8_t *buf, enum framing f, size_t size)
{
	uint64_t v = 0;
	size_t i, n = size < 8 ? size : 8;

	buf += framing_hdr_len(f);
	for (i = 0; i < n; i++)
		v = v << 8 | buf[i];
	return v;
}

/* Decimal digits with an optional fraction: the integer part and the
 * fraction in units of 1e-9; end points after them. */
static int parse_decimal(const char *s, int frac_ok, uint64_t *ip,
			 uint64_t *frac, const char **end)
{
	uint64_t v = 0, fr = 0, scale = 100000000;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.' && frac_ok) {
		p++;
		if (*p < '0' || *p > '9')
			return -1;
		for (; *p >= '0' && *p <= '9'; p++) {
			fr += (uint64_t)(*p - '0') * scale;
			scale /= 10;
		}
	}
	*ip = v;
	*frac = fr;
	*end = p;
	return 0;
}

static int mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	if (b && a > UINT64_MAX / b)
		return -1;
	*out = a * b;
	return 0;
}

static int parse_scaled(const char *s, uint64_t k, uint64_t min, uint64_t max,
			uint64_t *out)
{
	uint64_t v, fr, m = 1;
	const char *p;

	if (parse_decimal(s, 0, &v, &fr, &p))
		return -1;
	switch (*p) {
	case 'k':
	case 'K':
		m = k;
		p++;
		break;
	case 'm':
	case 'M':
		m = k * k;
		p++;
		break;
	case 'g':
	case 'G':
		m = k * k * k;
		p++;
		break;
	}
	if (*p || mul_ok(v, m, &v) || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	return parse_scaled(s, 1000, min, max, out);
}

int parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	return parse_scaled(s, 1024, min, max, out);
}

int parse_duration(const char *s, uint64_t min_ns, uint64_t max_ns,
		   uint64_t *out)
{
	uint64_t ip, fr, unit, v, f;
	const char *p;

	if (parse_decimal(s, 1, &ip, &fr, &p))
		return -1;
	if (!*p || !strcmp(p, "s"))
		unit = 1000000000ull;
	else if (!strcmp(p, "ms"))
		unit = 1000000ull;
	else if (!strcmp(p, "m"))
		unit = 60000000000ull;
	else if (!strcmp(p, "h"))
		unit = 3600000000000ull;
	else
		return -1;
	if (mul_ok(ip, unit, &v))
		return -1;
	/* fr is in 1e-9 units; unit / 1e6 <= 3.6e6 keeps this exact enough */
	f = fr / 1000 * (unit / 1000000);
	if (v > UINT64_MAX - f)
		return -1;
	v += f;
	if (v < min_ns || v > max_ns)
		return -1;
	*out = v;
	return 0;
}

int parse_addr(const char *s, uint16_t port, struct sockaddr_storage *sa,
	       socklen_t *len)
{
	struct addrinfo hints = {
		.ai_flags = AI_NUMERICHOST,
		.ai_socktype = SOCK_STREAM,
	};
	struct addrinfo *res;
	char host[NI_MAXHOST];
	struct in_addr a4;
	size_t n = strlen(s);
	bool bracket = n >= 2 && s[0] == '[' && s[n - 1] == ']';
	int r = -1;

	if (n >= sizeof(host))
		return -1;
	memcpy(host, s + bracket, n - 2 * bracket);
	host[n - 2 * bracket] = '\0';
	if (!host[0] || getaddrinfo(host, NULL, &hints, &res))
		return -1;
	if (res->ai_addrlen <= sizeof(*sa) &&
	    (res->ai_family == AF_INET6 ||
	     (res->ai_family == AF_INET && !bracket &&
	      inet_pton(AF_INET, host, &a4) == 1))) {
		memset(sa, 0, sizeof(*sa));
		memcpy(sa, res->ai_addr, res->ai_addrlen);
		if (res->ai_family == AF_INET6)
			((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
		else
			((struct sockaddr_in *)sa)->sin_port = htons(port);
		*len = res->ai_addrlen;
		r = 0;
	}
	freeaddrinfo(res);
	return r;
}
