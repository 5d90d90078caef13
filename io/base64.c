// SPDX-License-Identifier: MIT
/*
 * base64 (RFC 4648 section 4), for the WebSocket handshake: encoding the
 * accept key, and decoding Sec-WebSocket-Key strictly to check it is 16
 * bytes.  Own code for the same reason as io/sha1.c; tests/test_ws.c
 * checks it against RFC 4648 section 10's vectors.
 */
#include <errno.h>
#include "ws_priv.h"

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t io_base64_encode(const void *src, size_t n, char *dst)
{
	const uint8_t *p = src;
	size_t o = 0;
	uint32_t v;

	for (; n >= 3; p += 3, n -= 3) {
		v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
		dst[o++] = b64_alphabet[v >> 18];
		dst[o++] = b64_alphabet[(v >> 12) & 63];
		dst[o++] = b64_alphabet[(v >> 6) & 63];
		dst[o++] = b64_alphabet[v & 63];
	}
	if (n) {
		v = (uint32_t)p[0] << 16 | (n > 1 ? (uint32_t)p[1] << 8 : 0);
		dst[o++] = b64_alphabet[v >> 18];
		dst[o++] = b64_alphabet[(v >> 12) & 63];
		dst[o++] = n > 1 ? b64_alphabet[(v >> 6) & 63] : '=';
		dst[o++] = '=';
	}
	dst[o] = '\0';
	return o;
}

/* The value of one alphabet character, or -1. */
static int b64_value(char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+')
		return 62;
	if (ch == '/')
		return 63;
	return -1;
}

ssize_t io_base64_decode(const char *src, size_t n, uint8_t *dst, size_t cap)
{
	size_t i, o = 0;

	if (n % 4)
		return -EINVAL;
	for (i = 0; i < n; i += 4) {
		int v[4], pad = 0, j;
		uint32_t w;

		for (j = 0; j < 4; j++) {
			if (src[i + j] == '=' && i + 4 == n && j >= 2) {
				v[j] = 0;
				pad++;
				continue;
			}
			/* A character after padding, or outside the
			 * alphabet. */
			if (pad)
				return -EINVAL;
			v[j] = b64_value(src[i + j]);
			if (v[j] < 0)
				return -EINVAL;
		}
		w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
		    (uint32_t)v[2] << 6 | (uint32_t)v[3];
		/* Canonical only: the bits padding drops must be zero. */
		if ((pad == 1 && (w & 0xff)) || (pad == 2 && (w & 0xffff)))
			return -EINVAL;
		if (o + 3 - (size_t)pad > cap)
			return -ENOSPC;
		dst[o++] = (uint8_t)(w >> 16);
		if (pad < 2)
			dst[o++] = (uint8_t)(w >> 8);
		if (pad < 1)
			dst[o++] = (uint8_t)w;
	}
	return (ssize_t)o;
}
