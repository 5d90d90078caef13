// SPDX-License-Identifier: MIT
/* The echo stream the tools speak (framing, payload): see echo_proto.h. */
#include <string.h>
#include "echo_proto.h"

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
