// SPDX-License-Identifier: MIT
/* The tools' option values: see parse.h. */
#include <stdbool.h>
#include <string.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include "parse.h"

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
	else if (!strcmp(p, "us"))
		unit = 1000ull;
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
