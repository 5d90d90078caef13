// SPDX-License-Identifier: MIT
/*
 * The tools' WebSocket client (tools/common/ws_client.c): base64 against
 * RFC 4648's vectors, the accept key of RFC 6455's example (the library's
 * SHA-1 is tested in tests/test_ws.c), the upgrade request and the checks
 * of its answer, masked frames, the handshake on a socket, and the
 * decoder of the server's frames fed in every segmentation.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tools/common/ws_client.h"
#include "fuzz/fuzz.h"
#include "helpers.h"

void fuzz_check_failed(const char *file, int line, const char *cond)
{
	_assert_true(0, cond, file, line);
}

static void test_base64_rfc4648(void **state)
{
	static const char *const v[][2] = {
		{ "", "" },
		{ "f", "Zg==" },
		{ "fo", "Zm8=" },
		{ "foo", "Zm9v" },
		{ "foob", "Zm9vYg==" },
		{ "fooba", "Zm9vYmE=" },
		{ "foobar", "Zm9vYmFy" },
	};
	char out[16];
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(v); i++) {
		assert_int_equal(wsc_base64(v[i][0], strlen(v[i][0]), out),
				 strlen(v[i][1]));
		assert_string_equal(out, v[i][1]);
	}
}

static void test_key_accept(void **state)
{
	char key[WSC_KEY_LEN + 1], key2[WSC_KEY_LEN + 1];
	char acc[WSC_ACCEPT_LEN + 1];
	uint64_t rng = wsc_seed(1), r2 = wsc_seed(1);

	(void)state;
	/* RFC 6455 section 1.3's example. */
	assert_int_equal(wsc_accept("dGhlIHNhbXBsZSBub25jZQ==", acc), 0);
	assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	/* Not a key: refused, here and by the answer's check. */
	assert_int_equal(wsc_accept("dGhlIHNhbXBsZSBub25jZQ=", acc), -EINVAL);
	assert_int_equal(wsc_accept("dGhlIHNhbXBsZSBub25jZQ==x", acc), -EINVAL);
	assert_int_equal(wsc_accept("", acc), -EINVAL);
	wsc_key(&rng, key);
	assert_int_equal(strlen(key), WSC_KEY_LEN);
	assert_string_equal(key + 22, "==");
	wsc_key(&rng, key2);
	assert_string_not_equal(key, key2);
	assert_true(wsc_rand(&r2) != 0);
	assert_true(wsc_seed(2) != 0);
}

static void test_request(void **state)
{
	char buf[512];
	int n;

	(void)state;
	n = wsc_request(buf, sizeof(buf), "127.0.0.1:80", "/arena",
			"dGhlIHNhbXBsZSBub25jZQ==", "aorta");
	assert_true(n > 0);
	assert_int_equal(strlen(buf), n);
	assert_true(!strncmp(buf, "GET /arena HTTP/1.1\r\n", 21));
	assert_non_null(strstr(buf, "\r\nHost: 127.0.0.1:80\r\n"));
	assert_non_null(strstr(buf, "\r\nUpgrade: websocket\r\n"));
	assert_non_null(strstr(buf, "\r\nConnection: Upgrade\r\n"));
	assert_non_null(strstr(buf, "\r\nSec-WebSocket-Version: 13\r\n"));
	assert_non_null(strstr(buf, "\r\nSec-WebSocket-Protocol: aorta\r\n"));
	assert_non_null(strstr(
		buf, "\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"));
	assert_int_equal(strcmp(buf + n - 4, "\r\n\r\n"), 0);
	n = wsc_request(buf, sizeof(buf), "h", NULL, "k", NULL);
	assert_true(n > 0);
	assert_true(!strncmp(buf, "GET / HTTP/1.1\r\n", 16));
	assert_null(strstr(buf, "Protocol"));
	assert_int_equal(wsc_request(buf, 40, "h", "/", "k", NULL), -ENOSPC);
}

#define KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define ACC "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

static int resp(const char *s, const char *proto, int *status)
{
	return wsc_response(s, strlen(s), KEY, proto, status);
}

static void test_response(void **state)
{
	static const char ok[] = "HTTP/1.1 101 Switching Protocols\r\n"
				 "Upgrade: WebSocket\r\n"
				 "connection: keep-alive, Upgrade\r\n"
				 "Sec-WebSocket-Accept: " ACC "\r\n"
				 "\r\n\x82\x01x";
	char big[WSC_RESPONSE_MAX + 10];
	int st;
	size_t i;

	(void)state;
	assert_int_equal(resp(ok, NULL, &st), sizeof(ok) - 1 - 3);
	assert_int_equal(st, 101);
	/* Incomplete, at every length. */
	for (i = 0; i < sizeof(ok) - 1 - 3; i++)
		assert_int_equal(wsc_response(ok, i, KEY, NULL, &st), 0);
	/* Another status. */
	assert_int_equal(resp("HTTP/1.1 404 Not Found\r\n\r\n", NULL, &st),
			 -EPROTO);
	assert_int_equal(st, 404);
	assert_int_equal(resp("HTTP/1.0 101 x\r\n\r\n", NULL, &st), -EPROTO);
	assert_int_equal(st, 0);
	/* A wrong accept key, a missing header. */
	assert_int_equal(
		resp("HTTP/1.1 101 S\r\nUpgrade: websocket\r\n"
		     "Connection: Upgrade\r\n"
		     "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOO=\r\n\r\n",
		     NULL, &st),
		-EPROTO);
	assert_int_equal(resp("HTTP/1.1 101 S\r\nUpgrade: websocket\r\n"
			      "Sec-WebSocket-Accept: " ACC "\r\n\r\n",
			      NULL, &st),
			 -EPROTO);
	assert_int_equal(resp("HTTP/1.1 101 S\r\nConnection: Upgrade\r\n"
			      "Sec-WebSocket-Accept: " ACC "\r\n\r\n",
			      NULL, &st),
			 -EPROTO);
	/* The subprotocol: the one offered, or none; an extension: no. */
	assert_true(
		resp("HTTP/1.1 101 S\r\nUpgrade: websocket\r\n"
		     "Connection: Upgrade\r\nSec-WebSocket-Protocol: aorta\r\n"
		     "Sec-WebSocket-Accept: " ACC "\r\n\r\n",
		     "aorta", &st) > 0);
	assert_true(resp("HTTP/1.1 101 S\r\nUpgrade: websocket\r\n"
			 "Connection: Upgrade\r\n"
			 "Sec-WebSocket-Accept: " ACC "\r\n\r\n",
			 "aorta", &st) > 0);
	assert_int_equal(
		resp("HTTP/1.1 101 S\r\nUpgrade: websocket\r\n"
		     "Connection: Upgrade\r\nSec-WebSocket-Protocol: x\r\n"
		     "Sec-WebSocket-Accept: " ACC "\r\n\r\n",
		     "aorta", &st),
		-EPROTO);
	assert_int_equal(
		resp("HTTP/1.1 101 S\r\nUpgrade: websocket\r\n"
		     "Connection: Upgrade\r\nSec-WebSocket-Protocol: x\r\n"
		     "Sec-WebSocket-Accept: " ACC "\r\n\r\n",
		     NULL, &st),
		-EPROTO);
	assert_int_equal(resp("HTTP/1.1 101 S\r\nUpgrade: websocket\r\n"
			      "Connection: Upgrade\r\n"
			      "Sec-WebSocket-Extensions: permessage-deflate\r\n"
			      "Sec-WebSocket-Accept: " ACC "\r\n\r\n",
			      NULL, &st),
			 -EPROTO);
	assert_int_equal(resp("HTTP/1.1 101 S\r\nbroken\r\n\r\n", NULL, &st),
			 -EPROTO);
	/* A key that is not one: no accept key to compare. */
	assert_int_equal(wsc_response(ok, strlen(ok), "not a key", NULL, &st),
			 -EINVAL);
	/* Too long a head. */
	memset(big, 'a', sizeof(big));
	assert_int_equal(wsc_response(big, sizeof(big), KEY, NULL, &st),
			 -EMSGSIZE);
}

/* Unmask a client frame as a server would: the payload's offset. */
static size_t unmask(uint8_t *f, size_t len, uint64_t *plen)
{
	size_t h = 2, i;
	uint64_t n = f[1] & 0x7f;

	assert_true(f[1] & 0x80);
	if (n == 126) {
		n = (uint64_t)f[2] << 8 | f[3];
		h = 4;
	} else if (n == 127) {
		for (n = 0, i = 0; i < 8; i++)
			n = n << 8 | f[2 + i];
		h = 10;
	}
	assert_int_equal(h + 4 + n, len);
	for (i = 0; i < n; i++)
		f[h + 4 + i] ^= f[h + (i & 3)];
	*plen = n;
	return h + 4;
}

static void test_frames(void **state)
{
	static const size_t sizes[] = { 0, 1, 125, 126, 127, 65535, 65536 };
	uint8_t *src = malloc(70000), *dst = malloc(70000 + WSC_HDR_MAX);
	uint64_t rng = wsc_seed(7), plen;
	uint32_t mask;
	size_t i, k, len, off;

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	for (k = 0; k < 70000; k++)
		src[k] = (uint8_t)(k * 7 + 3);
	assert_int_equal(wsc_hdr_len(125), 6);
	assert_int_equal(wsc_hdr_len(126), 8);
	assert_int_equal(wsc_hdr_len(65535), 8);
	assert_int_equal(wsc_hdr_len(65536), 14);
	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		mask = (uint32_t)wsc_rand(&rng) | 1;
		len = wsc_frame(dst, WSC_BINARY, src, sizes[i], mask);
		assert_int_equal(len, wsc_hdr_len(sizes[i]) + sizes[i]);
		assert_int_equal(dst[0], 0x82);
		if (sizes[i] >= 4)
			assert_true(memcmp(dst + wsc_hdr_len(sizes[i]), src,
					   4) != 0);
		off = unmask(dst, len, &plen);
		assert_int_equal(plen, sizes[i]);
		assert_memory_equal(dst + off, src, sizes[i]);
	}
	/* In place. */
	memcpy(dst + 6, "hello", 5);
	len = wsc_frame_inplace(dst, WSC_TEXT, 5, 0x01020304);
	assert_int_equal(len, 11);
	assert_int_equal(dst[0], 0x81);
	unmask(dst, len, &plen);
	assert_memory_equal(dst + 6, "hello", 5);
	/* Close with and without a code. */
	len = wsc_close_frame(dst, 1000, 0xdeadbeef);
	assert_int_equal(len, 8);
	assert_int_equal(dst[0], 0x88);
	unmask(dst, len, &plen);
	assert_int_equal(dst[6] << 8 | dst[7], 1000);
	assert_int_equal(wsc_close_frame(dst, 0, 1), 6);
	free(src);
	free(dst);
}

/* What the decoder handed on. */
struct sink {
	uint8_t data[4096];
	size_t n;
	unsigned int msgs, ends, pings, pongs, closes, code;
	int64_t first_len;
	uint8_t ping[WSC_CTL_MAX];
	size_t ping_len;
};

static int sink_data(void *arg, const uint8_t *p, size_t n, bool first,
		     bool fin, int64_t msg_len)
{
	struct sink *s = arg;

	assert_true(s->n + n <= sizeof(s->data));
	memcpy(s->data + s->n, p, n);
	s->n += n;
	if (first) {
		s->msgs++;
		if (s->msgs == 1)
			s->first_len = msg_len;
	}
	if (fin)
		s->ends++;
	return 0;
}

static int sink_ctl(void *arg, enum wsc_opcode op, const uint8_t *p, size_t n,
		    unsigned int code)
{
	struct sink *s = arg;

	if (op == WSC_PING) {
		s->pings++;
		memcpy(s->ping, p, n);
		s->ping_len = n;
	} else if (op == WSC_PONG) {
		s->pongs++;
	} else {
		s->closes++;
		s->code = code;
	}
	return 0;
}

static const struct wsc_dec_ops sink_ops = { sink_data, sink_ctl };

/* A server's stream: "abc" (one frame), a ping between the fragments of
 * "de"+"fg", 300 bytes (16-bit length), then close 1001. */
static size_t server_stream(uint8_t *b)
{
	size_t n = 0, i;

	b[n++] = 0x82, b[n++] = 3, memcpy(b + n, "abc", 3), n += 3;
	b[n++] = 0x02, b[n++] = 2, memcpy(b + n, "de", 2), n += 2;
	b[n++] = 0x89, b[n++] = 2, memcpy(b + n, "pi", 2), n += 2;
	b[n++] = 0x80, b[n++] = 2, memcpy(b + n, "fg", 2), n += 2;
	b[n++] = 0x8a, b[n++] = 0;
	b[n++] = 0x82, b[n++] = 126, b[n++] = 1, b[n++] = 44;
	for (i = 0; i < 300; i++)
		b[n++] = (uint8_t)i;
	b[n++] = 0x88, b[n++] = 2, b[n++] = 0x03, b[n++] = 0xe9;
	return n;
}

static void check_sink(const struct sink *s)
{
	size_t i;

	assert_int_equal(s->n, 3 + 4 + 300);
	assert_memory_equal(s->data, "abcdefg", 7);
	for (i = 0; i < 300; i++)
		assert_int_equal(s->data[7 + i], (uint8_t)i);
	assert_int_equal(s->msgs, 3);
	assert_int_equal(s->ends, 3);
	assert_int_equal(s->first_len, 3);
	assert_int_equal(s->pings, 1);
	assert_memory_equal(s->ping, "pi", 2);
	assert_int_equal(s->pongs, 1);
	assert_int_equal(s->closes, 1);
	assert_int_equal(s->code, 1001);
}

static void test_decode_segmented(void **state)
{
	uint8_t b[512];
	size_t n = server_stream(b), cut, cut2;
	struct wsc_dec d;
	struct sink *s = malloc(sizeof(*s));

	(void)state;
	assert_non_null(s);
	/* Whole, byte by byte, and cut at every pair of points. */
	for (cut = 0; cut <= n; cut++) {
		for (cut2 = cut; cut2 <= n; cut2 += 7) {
			memset(s, 0, sizeof(*s));
			wsc_dec_init(&d, 0);
			assert_int_equal(wsc_feed(&d, b, cut, &sink_ops, s), 0);
			assert_int_equal(wsc_feed(&d, b + cut, cut2 - cut,
						  &sink_ops, s),
					 0);
			assert_int_equal(wsc_feed(&d, b + cut2, n - cut2,
						  &sink_ops, s),
					 0);
			check_sink(s);
		}
	}
	memset(s, 0, sizeof(*s));
	wsc_dec_init(&d, 0);
	for (cut = 0; cut < n; cut++)
		assert_int_equal(wsc_feed(&d, b + cut, 1, &sink_ops, s), 0);
	check_sink(s);
	free(s);
}

static int feed_one(const uint8_t *b, size_t n, uint64_t max,
		    unsigned int *code)
{
	struct sink *s = calloc(1, sizeof(*s));
	struct wsc_dec d;
	int r;

	assert_non_null(s);
	wsc_dec_init(&d, max);
	r = wsc_feed(&d, b, n, &sink_ops, s);
	*code = d.err_code;
	free(s);
	return r;
}

static void test_decode_errors(void **state)
{
	static const struct {
		uint8_t b[16];
		size_t n;
		int err;
		unsigned int code;
	} v[] = {
		{ { 0x82, 0x81, 1, 2, 3, 4, 'x' },
		  7,
		  -EPROTO,
		  1002 }, /* masked */
		{ { 0xc2, 0x01, 'x' }, 3, -EPROTO, 1002 }, /* RSV1 */
		{ { 0x83, 0x00 }, 2, -EPROTO, 1002 }, /* opcode 3 */
		{ { 0x8b, 0x00 }, 2, -EPROTO, 1002 }, /* opcode 0xb */
		{ { 0x09, 0x00 }, 2, -EPROTO, 1002 }, /* fragmented ping */
		{ { 0x89, 126, 0, 126 }, 4, -EPROTO, 1002 }, /* long ping */
		{ { 0x80, 0x00 }, 2, -EPROTO, 1002 }, /* stray continuation */
		{ { 0x02, 0x00, 0x82, 0x00 }, 4, -EPROTO, 1002 }, /* nested */
		{ { 0x88, 0x01, 3 }, 3, -EPROTO, 1002 }, /* close of 1 byte */
		{ { 0x88, 0x00, 0x82, 0x00 },
		  4,
		  -EPROTO,
		  1002 }, /* after close */
		{ { 0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0 }, 10, -EPROTO, 1002 },
		{ { 0x82, 126, 0, 200 }, 4, -EMSGSIZE, 1009 }, /* over max */
	};
	unsigned int code;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(v); i++) {
		assert_int_equal(feed_one(v[i].b, v[i].n, 100, &code),
				 v[i].err);
		assert_int_equal(code, v[i].code);
	}
	/* A close without a code is 1005; an empty message is one. */
	{
		static const uint8_t b[] = { 0x82, 0x00, 0x88, 0x00 };
		struct sink *s = calloc(1, sizeof(*s));
		struct wsc_dec d;

		assert_non_null(s);
		wsc_dec_init(&d, 0);
		assert_int_equal(wsc_feed(&d, b, sizeof(b), &sink_ops, s), 0);
		assert_int_equal(s->msgs, 1);
		assert_int_equal(s->ends, 1);
		assert_int_equal(s->first_len, 0);
		assert_int_equal(s->code, 1005);
		free(s);
	}
}

static int stop_data(void *arg, const uint8_t *p, size_t n, bool first,
		     bool fin, int64_t msg_len)
{
	(void)arg, (void)p, (void)n, (void)first, (void)fin, (void)msg_len;
	return -ECANCELED;
}

static void test_decode_callback_error(void **state)
{
	static const struct wsc_dec_ops ops = { stop_data, NULL };
	static const uint8_t b[] = { 0x82, 0x01, 'x', 0x89, 0x00 };
	struct wsc_dec d;

	(void)state;
	wsc_dec_init(&d, 0);
	assert_int_equal(wsc_feed(&d, b, sizeof(b), &ops, NULL), -ECANCELED);
	/* No on_ctl: control frames are decoded and dropped. */
	wsc_dec_init(&d, 0);
	assert_int_equal(wsc_feed(&d, b + 3, 2, &ops, NULL), 0);
}

/* A server on the other end of a socketpair: reads the request, answers
 * mode 0: 101 in two pieces and a frame with it; 1: 404; 2: closes;
 * 3: nothing (the client times out). */
struct fake_server {
	int fd;
	int mode;
	char req[1024];
};

static void *fake_server_main(void *arg)
{
	struct fake_server *f = arg;
	char acc[WSC_ACCEPT_LEN + 1], key[WSC_KEY_LEN + 1], out[512];
	size_t got = 0;
	const char *k;
	ssize_t n;
	int len;

	while (!strstr(f->req, "\r\n\r\n") && got < sizeof(f->req) - 1) {
		n = read(f->fd, f->req + got, sizeof(f->req) - 1 - got);
		if (n <= 0)
			return NULL;
		got += (size_t)n;
		f->req[got] = '\0';
	}
	k = strstr(f->req, "Sec-WebSocket-Key: ");
	if (!k)
		return NULL;
	memcpy(key, k + 19, WSC_KEY_LEN);
	key[WSC_KEY_LEN] = '\0';
	wsc_accept(key, acc);
	if (f->mode == 0) {
		len = snprintf(out, sizeof(out),
			       "HTTP/1.1 101 Switching Protocols\r\n"
			       "Upgrade: websocket\r\nConnection: Upgrade\r\n"
			       "Sec-WebSocket-Accept: %s\r\n\r\n\x82\x01x",
			       acc);
		if (write(f->fd, out, 20) != 20)
			return NULL;
		usleep(20000);
		if (write(f->fd, out + 20, (size_t)len - 20) != len - 20)
			return NULL;
	} else if (f->mode == 1) {
		len = snprintf(out, sizeof(out),
			       "HTTP/1.1 404 Not Found\r\n\r\n");
		if (write(f->fd, out, (size_t)len) != len)
			return NULL;
	} else if (f->mode == 2) {
		shutdown(f->fd, SHUT_RDWR);
	}
	return NULL;
}

static int handshake_with(int mode, int *status, char *after, size_t *nafter)
{
	struct fake_server f = { .mode = mode };
	uint64_t rng = wsc_seed(3);
	pthread_t th;
	int sv[2], r;
	ssize_t n;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	f.fd = sv[1];
	assert_int_equal(pthread_create(&th, NULL, fake_server_main, &f), 0);
	r = wsc_handshake_fd(sv[0], "localhost", "/", NULL, &rng,
			     mode == 3 ? 50000000ull : 5000000000ull, status);
	if (after) {
		n = recv(sv[0], after, 16, MSG_DONTWAIT);
		*nafter = n > 0 ? (size_t)n : 0;
	}
	shutdown(sv[0], SHUT_RDWR);
	pthread_join(th, NULL);
	close(sv[0]);
	close(sv[1]);
	assert_non_null(strstr(f.req, "GET / HTTP/1.1\r\n"));
	return r;
}

static void test_handshake_fd(void **state)
{
	char after[16];
	size_t na = 0;
	int st = -1;

	(void)state;
	/* The head is taken, the frame after it stays in the socket. */
	assert_int_equal(handshake_with(0, &st, after, &na), 0);
	assert_int_equal(st, 101);
	assert_int_equal(na, 3);
	assert_memory_equal(after, "\x82\x01x", 3);
	assert_int_equal(handshake_with(1, &st, NULL, NULL), -EPROTO);
	assert_int_equal(st, 404);
	assert_int_equal(handshake_with(2, &st, NULL, NULL), -ECONNRESET);
	assert_int_equal(handshake_with(3, &st, NULL, NULL), -ETIMEDOUT);
}

/* The fuzz target's checks on a few inputs. */
static void test_fuzz_seeds(void **state)
{
	uint8_t b[512];
	size_t n = server_stream(b);

	(void)state;
	fuzz_ws_client(b, n);
	fuzz_ws_client((const uint8_t *)"\x07\x82\x7f\xff", 4);
	fuzz_ws_client((const uint8_t *)"", 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base64_rfc4648),
		cmocka_unit_test(test_key_accept),
		cmocka_unit_test(test_request),
		cmocka_unit_test(test_response),
		cmocka_unit_test(test_frames),
		cmocka_unit_test(test_decode_segmented),
		cmocka_unit_test(test_decode_errors),
		cmocka_unit_test(test_decode_callback_error),
		cmocka_unit_test(test_handshake_fd),
		cmocka_unit_test(test_fuzz_seeds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
