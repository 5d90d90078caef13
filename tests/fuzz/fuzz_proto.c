// SPDX-License-Identifier: MIT
/*
 * Fuzz target: the tools' option-value parsers (tools/common/parse.c) and
 * the echo stream's frames (tools/common/echo_proto.c).
 *
 * Input: byte 0 picks the function, bytes 1-16 the bounds or the frame's
 * parameters, the rest is the string (NUL-terminated copy).  Each parser
 * is compared with a reference written from parse.h's description:
 *  - parse_count/parse_size: digits, an optional k/K, m/M, g/G suffix
 *    (x1000 / x1024), the value within [min, max], nothing after;
 *  - parse_duration: digits with an optional fraction, an optional
 *    us/ms/s/m/h suffix, the result in ns within [min, max] (the fraction is
 *    kept to 6 digits, as parse.c documents);
 *  - framing_parse: exactly "raw", "len16" or "len32", and framing_name()
 *    gives the name back;
 *  - on failure the output is untouched;
 *  - frame_build/frame_seq: the header holds the size, the payload starts
 *    with the sequence number and timestamp (big-endian, cut short), then
 *    the filler; frame_seq() reads back what fits of the sequence number;
 *    nothing is written outside the frame (ASan).
 */
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include "../../tools/common/echo_proto.h"
#include "../../tools/common/parse.h"
#include "fuzz.h"

#define PROTO_SENTINEL 0x5a5a5a5a5a5a5a5aull

/* parse.c stops before a digit that would take the value past
 * (UINT64_MAX - 9) / 10 * 10 + 9 (a conservative overflow test), so it
 * rejects every number from here up, although a few still fit 64 bits;
 * none of them is a sensible option value. */
#define PROTO_BIG 18446744073709551610ull

/* Digits at s: their value (saturated at UINT64_MAX), count in *nd. */
static unsigned __int128 proto_digits(const char **s, size_t *nd)
{
	unsigned __int128 v = 0;

	*nd = 0;
	for (; **s >= '0' && **s <= '9'; (*s)++, (*nd)++) {
		v = v * 10 + (unsigned)(**s - '0');
		if (v > UINT64_MAX)
			v = (unsigned __int128)UINT64_MAX + 1;
	}
	return v;
}

static void proto_scaled(const char *s, uint64_t k, uint64_t min, uint64_t max,
			 int got, uint64_t out)
{
	const char *p = s;
	size_t nd;
	unsigned __int128 v = proto_digits(&p, &nd), m = 1;
	bool ok;

	switch (*p) {
	case 'k':
	case 'K':
		m = k, p++;
		break;
	case 'm':
	case 'M':
		m = k * k, p++;
		break;
	case 'g':
	case 'G':
		m = k * k * k, p++;
		break;
	}
	ok = nd && !*p && v < PROTO_BIG;
	v *= m;
	ok = ok && v <= UINT64_MAX && v >= min && v <= max;
	FUZZ_CHECK(got == (ok ? 0 : -1));
	FUZZ_CHECK(ok ? out == (uint64_t)v : out == PROTO_SENTINEL);
}

static void proto_duration(const char *s, uint64_t min, uint64_t max, int got,
			   uint64_t out)
{
	const char *p = s;
	size_t nd, i;
	unsigned __int128 ip = proto_digits(&p, &nd), v;
	uint64_t unit = 0, frac6 = 0;
	bool ok = nd > 0;

	if (ok && *p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			ok = false;
		for (i = 0; *p >= '0' && *p <= '9'; p++, i++)
			if (i < 6)
				frac6 = frac6 * 10 + (uint64_t)(*p - '0');
		for (; i < 6; i++)
			frac6 *= 10;
	}
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
		ok = false;
	ok = ok && ip < PROTO_BIG;
	v = ip * unit + (unsigned __int128)frac6 * (unit / 1000000);
	ok = ok && v <= UINT64_MAX && v >= min && v <= max;
	FUZZ_CHECK(got == (ok ? 0 : -1));
	FUZZ_CHECK(ok ? out == (uint64_t)v : out == PROTO_SENTINEL);
}

static void proto_framing(const char *s)
{
	enum framing f = (enum framing)77;
	int r = framing_parse(s, &f);
	bool ok = !strcmp(s, "raw") || !strcmp(s, "len16") ||
		  !strcmp(s, "len32");

	FUZZ_CHECK(r == (ok ? 0 : -1));
	if (ok)
		FUZZ_CHECK(!strcmp(framing_name(f), s));
	else
		FUZZ_CHECK(f == (enum framing)77);
}

static void proto_frame(const uint8_t *prm)
{
	enum framing f = (enum framing)(prm[0] % 3);
	size_t hl = framing_hdr_len(f);
	size_t size = ((size_t)prm[1] | (size_t)prm[2] << 8) % 2100;
	uint64_t seq = 0, ts = 0, got, want;
	size_t plen = pattern_len(size), n, i;
	uint8_t *pattern = malloc(plen), *buf = malloc(hl + size + 1);

	FUZZ_CHECK(pattern && buf);
	for (i = 0; i < 8; i++) {
		seq |= (uint64_t)prm[3 + i] << (8 * i);
		ts |= (uint64_t)prm[8 + i] << (8 * (7 - i));
	}
	pattern_fill(pattern, plen, prm[0]);
	/* One byte more than the frame: frame_build must not touch it
	 * (ASan would not see a write into the slack of a malloc). */
	buf[hl + size] = 0xa5;
	frame_build(buf, f, size, seq, ts, pattern);
	FUZZ_CHECK(buf[hl + size] == 0xa5);
	if (hl == 2)
		FUZZ_CHECK(((size_t)buf[0] << 8 | buf[1]) == size);
	if (hl == 4)
		FUZZ_CHECK(((size_t)buf[0] << 24 | (size_t)buf[1] << 16 |
			    (size_t)buf[2] << 8 | buf[3]) == size);
	for (i = 0; i < size && i < PAYLOAD_HDR; i++) {
		uint64_t field = i < 8 ? seq : ts;

		FUZZ_CHECK(buf[hl + i] ==
			   (uint8_t)(field >> (8 * (7 - i % 8))));
	}
	if (size > PAYLOAD_HDR)
		FUZZ_CHECK(!memcmp(buf + hl + PAYLOAD_HDR,
				   pattern + seq % PATTERN_SPAN,
				   size - PAYLOAD_HDR));
	n = size < 8 ? size : 8;
	got = frame_seq(buf, f, size);
	want = n ? seq >> (8 * (8 - n)) : 0;
	FUZZ_CHECK(got == want);
	FUZZ_CHECK(framing_max_payload(f) ==
		   (f == FRAMING_LEN16 ? 65535 : PAYLOAD_MAX));
	free(pattern);
	free(buf);
}

int fuzz_proto(const uint8_t *data, size_t size)
{
	uint64_t min, max, out = PROTO_SENTINEL;
	uint8_t prm[17] = { 0 };
	char *s;
	int r;

	memcpy(prm, data, size < sizeof(prm) ? size : sizeof(prm));
	data += size < sizeof(prm) ? size : sizeof(prm);
	size -= size < sizeof(prm) ? size : sizeof(prm);
	/* Bounds: small ones mostly, so that the range checks are hit. */
	min = 0;
	max = UINT64_MAX;
	for (int i = 0; i < 8; i++) {
		min |= (uint64_t)prm[1 + i] << (8 * i);
		max ^= (uint64_t)prm[9 + i] << (8 * (7 - i));
	}
	if (prm[0] & 0x80)
		min >>= prm[1] & 63;
	else
		min = 0;
	s = malloc(size + 1);
	FUZZ_CHECK(s);
	memcpy(s, data, size);
	s[size] = '\0';
	switch (prm[0] % 5) {
	case 0:
		r = parse_count(s, min, max, &out);
		proto_scaled(s, 1000, min, max, r, out);
		break;
	case 1:
		r = parse_size(s, min, max, &out);
		proto_scaled(s, 1024, min, max, r, out);
		break;
	case 2:
		r = parse_duration(s, min, max, &out);
		proto_duration(s, min, max, r, out);
		break;
	case 3:
		proto_framing(s);
		break;
	default:
		proto_frame(prm + 1);
		break;
	}
	free(s);
	return 0;
}
