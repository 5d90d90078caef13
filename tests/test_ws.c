// SPDX-License-Identifier: MIT
/*
 * WebSocket groundwork (io/ws_priv.h, not wired into the server yet):
 * SHA-1 against RFC 3174's test cases, base64 against RFC 4648's vectors,
 * RFC 6455's accept key example (and ao_ws_accept_key(), the public
 * face of it, with bad keys); the upgrade request parser on every rule
 * it checks, fed a byte at a time and at every split; the response
 * writers; the frame decoder on every rule of RFC 6455 section 5 with its
 * close code, each stream also fed at every byte boundary and a byte at a
 * time; the frame header writer; and the ws fuzz targets' seed corpora.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/io/server.h>
#include "../io/ws_priv.h"
#include "helpers.h"

#include "fuzz/fuzz.h"

/* The fuzz targets' checks fail this runner's test (their corpora are
 * replayed below). */
void fuzz_check_failed(const char *file, int line, const char *cond)
{
	_assert_true(0, cond, file, line);
}

/* ------------------------------------------------------------------ */
/* SHA-1 and base64 */

static void hex(const uint8_t *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_sha1(const void *m, size_t n, const char *want)
{
	uint8_t d[IO_SHA1_LEN];
	char h[2 * IO_SHA1_LEN + 1];

	io_sha1(m, n, d);
	hex(d, sizeof(d), h);
	assert_string_equal(h, want);
}

/* RFC 3174 section 7.3's four tests, and the empty message. */
static void test_sha1_rfc3174(void **state)
{
	static const char t2[] =
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	static const char t4[] = "0123456701234567012345670123456701234567"
				 "012345670123456701234567";
	uint8_t d[IO_SHA1_LEN], *big;
	char h[2 * IO_SHA1_LEN + 1];
	struct io_sha1 s;
	int i;

	(void)state;
	check_sha1("abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
	check_sha1(t2, strlen(t2), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
	check_sha1("", 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
	/* One million 'a': one shot, and in updates of odd sizes. */
	big = malloc(1000000);
	assert_non_null(big);
	memset(big, 'a', 1000000);
	check_sha1(big, 1000000, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
	io_sha1_init(&s);
	for (size_t off = 0, n = 1; off < 1000000; off += n, n = n * 7 % 997)
		io_sha1_update(&s, big + off,
			       n < 1000000 - off ? n : 1000000 - off);
	io_sha1_final(&s, d);
	hex(d, sizeof(d), h);
	assert_string_equal(h, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
	free(big);
	/* Test 4: the 64-byte string ten times, as ten updates. */
	assert_int_equal(strlen(t4), 64);
	io_sha1_init(&s);
	for (i = 0; i < 10; i++)
		io_sha1_update(&s, t4, 64);
	io_sha1_final(&s, d);
	hex(d, sizeof(d), h);
	assert_string_equal(h, "dea356a2cddd90c7a7ecedc5ebb563934f460452");
}

/* Every split of test 2 into two updates gives the same digest, padding
 * across a block boundary (56..63 bytes) included. */
static void test_sha1_splits(void **state)
{
	static const char m[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmn"
				"lmnomnopnopq0123456789";
	uint8_t d[IO_SHA1_LEN], ref[IO_SHA1_LEN];
	size_t n = strlen(m), len, cut;
	struct io_sha1 s;

	(void)state;
	for (len = 0; len <= n; len++) {
		io_sha1(m, len, ref);
		for (cut = 0; cut <= len; cut++) {
			io_sha1_init(&s);
			io_sha1_update(&s, m, cut);
			io_sha1_update(&s, m + cut, len - cut);
			io_sha1_final(&s, d);
			assert_memory_equal(d, ref, sizeof(d));
		}
	}
}

/* RFC 4648 section 10. */
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
	char enc[16];
	uint8_t dec[16];
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(v); i++) {
		size_t n = strlen(v[i][0]);

		assert_int_equal(io_base64_encode(v[i][0], n, enc),
				 strlen(v[i][1]));
		assert_string_equal(enc, v[i][1]);
		assert_int_equal(IO_BASE64_LEN(n), strlen(v[i][1]));
		assert_int_equal(io_base64_decode(v[i][1], strlen(v[i][1]), dec,
						  sizeof(dec)),
				 n);
		assert_memory_equal(dec, v[i][0], n);
	}
	/* Every byte value survives the round trip. */
	{
		uint8_t all[256], back[256];
		char e[IO_BASE64_LEN(256) + 1];

		for (i = 0; i < 256; i++)
			all[i] = (uint8_t)i;
		assert_int_equal(io_base64_encode(all, 256, e),
				 IO_BASE64_LEN(256));
		assert_int_equal(io_base64_decode(e, strlen(e), back, 256),
				 256);
		assert_memory_equal(all, back, 256);
	}
}

static void test_base64_strict(void **state)
{
	static const char *const bad[] = {
		"Zg=",	    "Zg",   "Z===",	"====",	  "Zg=a",
		"Zh==",	    "Zm9=", "Zm 9",	"Zm9v\n", "Zm9!",
		"Zg==Zg==", "=Zm9", "Zm9vYg=x", "Zm9-",	  "Zm9_",
	};
	uint8_t dec[16];
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_equal(io_base64_decode(bad[i], strlen(bad[i]), dec,
						  sizeof(dec)),
				 -EINVAL);
	assert_int_equal(io_base64_decode("Zm9vYmFy", 8, dec, 5), -ENOSPC);
	assert_int_equal(io_base64_decode("Zm9vYmE=", 8, dec, 5), 5);
}

/* RFC 6455 section 1.3. */
static void test_ws_accept_rfc6455(void **state)
{
	char acc[IO_WS_ACCEPT_LEN + 1];

	(void)state;
	io_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", 24, acc);
	assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

/* The public ao_ws_accept_key(): the same answer; a key that is not the
 * base64 of 16 bytes refused, out untouched. */
static void test_ws_accept_key(void **state)
{
	static const char *const bad[] = {
		"dGhlIHNhbXBsZSBub25jZQ=", /* 23 chars */
		"dGhlIHNhbXBsZSBub25jZQ===", /* 25 */
		"dGhlIHNhbXBsZSBub25jZQ!=", /* not base64 */
		"dGhlIHNhbXBsZSBub25jZQ.=", /* not base64 */
		"dGhlIHNhbXBsZSBub25jZR==", /* unused bits not zero */
		"dGhlIHNhbXBsZSBub25jZQAA", /* 18 bytes, not 16 */
		"dGhlIHNhbXBsZSBub25j=QZ=", /* padding inside */
		"dGhlIHNhbXBsZSBub25jZQ= ", /* a space */
		"",
	};
	char acc[AO_WS_ACCEPT_LEN + 1];
	size_t i;

	(void)state;
	assert_int_equal(AO_WS_ACCEPT_LEN, IO_WS_ACCEPT_LEN);
	assert_int_equal(ao_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==",
					  AO_WS_KEY_LEN, acc),
			 0);
	assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	/* The length given, not the NUL, ends the key. */
	assert_int_equal(ao_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==xyz",
					  AO_WS_KEY_LEN, acc),
			 0);
	assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		memset(acc, 'x', sizeof(acc));
		assert_int_equal(ao_ws_accept_key(bad[i], strlen(bad[i]), acc),
				 -EINVAL);
		assert_int_equal(acc[0], 'x');
	}
	/* A good key cut short, and no key or no room. */
	assert_int_equal(ao_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", 22, acc),
			 -EINVAL);
	assert_int_equal(ao_ws_accept_key(NULL, AO_WS_KEY_LEN, acc), -EINVAL);
	assert_int_equal(ao_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==",
					  AO_WS_KEY_LEN, NULL),
			 -EINVAL);
}

/* ------------------------------------------------------------------ */
/* The upgrade request */

static const char *const protos[] = { "arena.v2", "arena.v1" };
static const struct io_http_cfg hcfg = { .protocols = protos,
					 .n_protocols = 2 };

#define REQ_LINE "GET /play HTTP/1.1\r\n"
#define REQ_HOST "Host: 127.0.0.1:8080\r\n"
#define REQ_UP "Upgrade: websocket\r\n"
#define REQ_CONN "Connection: Upgrade\r\n"
#define REQ_KEY "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
#define REQ_VER "Sec-WebSocket-Version: 13\r\n"
#define REQ_OK REQ_LINE REQ_HOST REQ_UP REQ_CONN REQ_KEY REQ_VER

/* Parse a whole request in one call; returns the result. */
static int parse1(const char *s, struct io_http_req *req)
{
	memset(req, 0, sizeof(*req));
	return io_http_parse(&hcfg, (const uint8_t *)s, strlen(s), req);
}

/* The same request fed a byte at a time on one req, and with a fresh
 * req at every prefix: 0 until the end, then the same result. */
static int parse_split(const char *s, struct io_http_req *out)
{
	size_t n = strlen(s), i;
	struct io_http_req r, r2;
	int ret = 0, whole;

	whole = parse1(s, out);
	memset(&r, 0, sizeof(r));
	for (i = 1; i <= n; i++) {
		ret = io_http_parse(&hcfg, (const uint8_t *)s, i, &r);
		if (ret)
			break;
		memset(&r2, 0, sizeof(r2));
		assert_int_equal(
			io_http_parse(&hcfg, (const uint8_t *)s, i, &r2), 0);
	}
	assert_int_equal(ret, whole);
	if (whole > 0)
		assert_int_equal(i, (size_t)whole);
	assert_int_equal(r.kind, out->kind);
	assert_int_equal(r.status, out->status);
	assert_int_equal(r.protocol, out->protocol);
	return whole;
}

static void expect_status(const char *s, int status)
{
	struct io_http_req req;
	int ret = parse_split(s, &req);

	if (ret >= 0)
		fail_msg("expected %d, got %d for:\n%s", status, ret, s);
	assert_int_equal(ret, status == 413 ? -EMSGSIZE : -EPROTO);
	assert_int_equal(req.status, status);
	assert_int_equal(req.kind, IO_HTTP_NONE);
}

static void test_upgrade_ok(void **state)
{
	static const char s[] = REQ_OK "\r\n";
	static const char want[] =
		"HTTP/1.1 101 Switching Protocols\r\n"
		"Upgrade: websocket\r\n"
		"Connection: Upgrade\r\n"
		"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
	struct io_http_req req;
	char out[256];

	(void)state;
	assert_int_equal(parse_split(s, &req), strlen(s));
	assert_int_equal(req.kind, IO_HTTP_UPGRADE);
	assert_string_equal(req.key, "dGhlIHNhbXBsZSBub25jZQ==");
	assert_int_equal(req.protocol, -1);
	assert_int_equal(req.path_len, 5);
	assert_memory_equal(req.path, "/play", 5);
	assert_int_equal(io_ws_write_accept(out, sizeof(out), &hcfg, &req),
			 strlen(want));
	assert_string_equal(out, want);
	assert_int_equal(io_ws_write_accept(out, strlen(want), &hcfg, &req),
			 -ENOSPC);
}

/* Bytes after the head (a first frame) are not the head's. */
static void test_upgrade_pipelined(void **state)
{
	static const char s[] = REQ_OK "\r\n\x81\x80\x01\x02\x03\x04";
	struct io_http_req req;

	(void)state;
	memset(&req, 0, sizeof(req));
	assert_int_equal(io_http_parse(&hcfg, (const uint8_t *)s, sizeof(s) - 1,
				       &req),
			 sizeof(s) - 1 - 6);
	assert_int_equal(req.kind, IO_HTTP_UPGRADE);
}

/* A browser's request: lists, other cases, extensions offered. */
static void test_upgrade_browser(void **state)
{
	static const char s[] =
		"GET /ws?room=1 HTTP/1.1\r\n"
		"host: localhost\r\n"
		"Connection: keep-alive, UPGRADE\r\n"
		"Pragma: no-cache\r\n"
		"UPGRADE: h2c, WebSocket\r\n"
		"Origin: http://localhost\r\n"
		"sec-websocket-version:13\r\n"
		"Sec-WebSocket-Key:   x3JJHMbDL1EzLkh9GBhXDw==  \r\n"
		"Sec-WebSocket-Extensions: permessage-deflate; "
		"client_max_window_bits\r\n"
		"Sec-WebSocket-Protocol: chat, arena.v1\r\n"
		"Sec-WebSocket-Protocol: arena.v2\r\n"
		"\r\n";
	struct io_http_req req;
	char out[256];

	(void)state;
	assert_int_equal(parse_split(s, &req), strlen(s));
	assert_int_equal(req.kind, IO_HTTP_UPGRADE);
	assert_string_equal(req.key, "x3JJHMbDL1EzLkh9GBhXDw==");
	/* The server's preference, not the client's order. */
	assert_int_equal(req.protocol, 0);
	assert_true(io_ws_write_accept(out, sizeof(out), &hcfg, &req) > 0);
	assert_non_null(strstr(out, "Sec-WebSocket-Protocol: arena.v2\r\n"));
	/* RFC 6455 section 1.3's second key. */
	assert_non_null(strstr(
		out, "Sec-WebSocket-Accept: HSmrc0sMlYUkAGmm5OPpG2HaGWk=\r\n"));
	/* permessage-deflate is declined by not answering it. */
	assert_null(strstr(out, "Extensions"));
	assert_null(strstr(out, "deflate"));
}

static void test_upgrade_protocols(void **state)
{
	struct io_http_req req;

	(void)state;
	assert_true(parse1(REQ_OK "Sec-WebSocket-Protocol: arena.v1\r\n\r\n",
			   &req) > 0);
	assert_int_equal(req.protocol, 1);
	assert_true(parse1(REQ_OK "Sec-WebSocket-Protocol: arena.v2, "
				  "arena.v1\r\n\r\n",
			   &req) > 0);
	assert_int_equal(req.protocol, 0);
	/* No protocol in common, or a different case: none chosen. */
	assert_true(parse1(REQ_OK "Sec-WebSocket-Protocol: chat\r\n\r\n",
			   &req) > 0);
	assert_int_equal(req.protocol, -1);
	assert_true(parse1(REQ_OK "Sec-WebSocket-Protocol: ARENA.V1\r\n\r\n",
			   &req) > 0);
	assert_int_equal(req.protocol, -1);
	assert_true(parse1(REQ_OK
			   "Sec-WebSocket-Protocol: , arena.v1 ,\r\n\r\n",
			   &req) > 0);
	assert_int_equal(req.protocol, 1);
	/* A server with no protocols chooses none. */
	{
		struct io_http_cfg none = { 0 };
		static const char s[] = REQ_OK
			"Sec-WebSocket-Protocol: arena.v1\r\n\r\n";

		memset(&req, 0, sizeof(req));
		assert_true(io_http_parse(&none, (const uint8_t *)s, strlen(s),
					  &req) > 0);
		assert_int_equal(req.protocol, -1);
	}
}

static void test_upgrade_400(void **state)
{
	(void)state;
	/* Missing one of the required headers. */
	expect_status(REQ_LINE REQ_UP REQ_CONN REQ_KEY REQ_VER "\r\n", 400);
	expect_status(REQ_LINE REQ_HOST REQ_UP REQ_KEY REQ_VER "\r\n", 400);
	expect_status(REQ_LINE REQ_HOST REQ_UP REQ_CONN REQ_VER "\r\n", 400);
	expect_status(REQ_LINE REQ_HOST REQ_UP REQ_CONN REQ_KEY "\r\n", 400);
	/* Connection without the upgrade token, as a substring. */
	expect_status(REQ_LINE REQ_HOST REQ_UP
		      "Connection: keep-alive\r\n" REQ_KEY REQ_VER "\r\n",
		      400);
	expect_status(REQ_LINE REQ_HOST REQ_UP
		      "Connection: upgrades\r\n" REQ_KEY REQ_VER "\r\n",
		      400);
	/* Keys: not 16 bytes, not base64, two of them. */
	expect_status(REQ_LINE REQ_HOST REQ_UP REQ_CONN
		      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=\r\n" REQ_VER
		      "\r\n",
		      400);
	expect_status(REQ_LINE REQ_HOST REQ_UP REQ_CONN
		      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZWE=\r\n" REQ_VER
		      "\r\n",
		      400);
	expect_status(REQ_LINE REQ_HOST REQ_UP REQ_CONN
		      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZ!==\r\n" REQ_VER
		      "\r\n",
		      400);
	expect_status(REQ_OK REQ_KEY "\r\n", 400);
	/* Two hosts; two versions. */
	expect_status(REQ_OK REQ_HOST "\r\n", 400);
	expect_status(REQ_OK REQ_VER "\r\n", 400);
	/* An upgrade over HTTP/1.0. */
	expect_status("GET /play HTTP/1.0\r\n" REQ_HOST REQ_UP REQ_CONN REQ_KEY
			      REQ_VER "\r\n",
		      400);
	/* A body. */
	expect_status(REQ_OK "Content-Length: 5\r\n\r\n", 400);
	expect_status(REQ_OK "Transfer-Encoding: chunked\r\n\r\n", 400);
	/* Malformed heads. */
	expect_status("GET /play HTTP/1.1\n" REQ_HOST "\r\n", 400);
	expect_status(REQ_OK "X-A: b\nc\r\n\r\n", 400);
	expect_status(REQ_OK "X-A: b\rc\r\n\r\n", 400);
	expect_status(REQ_OK "X-A: b\rXY: c\r\n\r\n", 400);
	expect_status("GET / HTTP/1.1\rXHost: a\r\n\r\n", 400);
	expect_status(REQ_OK " folded\r\n\r\n", 400);
	expect_status(REQ_OK "X A: b\r\n\r\n", 400);
	expect_status(REQ_OK "X-A : b\r\n\r\n", 400);
	expect_status(REQ_OK ": b\r\n\r\n", 400);
	expect_status(REQ_OK "X-A\r\n\r\n", 400);
	expect_status(REQ_OK "X-A: \x01\r\n\r\n", 400);
	expect_status(REQ_OK "X-A: \x7f\r\n\r\n", 400);
	expect_status("GET  /play HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET /play  HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET /play HTTP/1.1 \r\n" REQ_HOST "\r\n", 400);
	expect_status("GET /play\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET /play HTTP/11\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET /play HTTX/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET * HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	/* Lines ended by LF alone never make CRLF CRLF: refused at the
	 * first bare LF, not left waiting for the deadline. */
	expect_status("GET / HTTP/1.1\nHost: a\n\n", 400);
	expect_status("GET / HTTP/1.0\n\n", 400);
	expect_status(REQ_LINE "Host: a\n\r\n", 400);
	expect_status("\n", 400);
}

/* A request's path, and its kind, parsed whole and split. */
static void expect_path(const char *s, enum io_http_kind kind, const char *path)
{
	struct io_http_req req;

	if (parse_split(s, &req) != (int)strlen(s))
		fail_msg("not parsed whole: %s", s);
	assert_int_equal(req.kind, kind);
	assert_int_equal(req.path_len, strlen(path));
	assert_memory_equal(req.path, path, strlen(path));
	/* In the request, as the server's buffer keeps it. */
	assert_true(req.path > s && req.path + req.path_len < s + strlen(s));
}

/*
 * RFC 9112 section 3.2.2: a server MUST accept the absolute-form; its
 * path is what the handler sees (scheme and authority ignored).  Section
 * 2.2: empty lines before the request line are ignored.
 */
static void test_target_forms(void **state)
{
	struct io_http_cfg small = { .max_request = 64 };
	struct io_http_req req;
	char s[80];

	(void)state;
	expect_path("GET http://a/play HTTP/1.1\r\n" REQ_HOST "\r\n",
		    IO_HTTP_GET, "/play");
	expect_path("GET HTTP://example.com:8080/a/b?c=d HTTP/1.1\r\n" REQ_HOST
		    "\r\n",
		    IO_HTTP_GET, "/a/b?c=d");
	expect_path("GET https://[::1]:80 HTTP/1.1\r\n" REQ_HOST "\r\n",
		    IO_HTTP_GET, "/");
	expect_path("HEAD x-y.z+1://h/ HTTP/1.0\r\n\r\n", IO_HTTP_GET, "/");
	expect_path(
		"GET http://127.0.0.1:8080/play HTTP/1.1\r\n" REQ_HOST REQ_UP
			REQ_CONN REQ_KEY REQ_VER "\r\n",
		IO_HTTP_UPGRADE, "/play");
	/* Not a target: no host, userinfo, no path before the query, not
	 * a scheme, asterisk-form. */
	expect_status("GET http:///a HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET http:// HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET http://u@h/ HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET http://h?q HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET http://h#f HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET 1http://h/ HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET http:/h/ HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET ht%tp://h/ HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET h/ HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("GET http HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	/* Empty lines first. */
	expect_path("\r\nGET /a HTTP/1.1\r\n" REQ_HOST "\r\n", IO_HTTP_GET,
		    "/a");
	expect_path("\r\n\r\n\r\n" REQ_OK "\r\n", IO_HTTP_UPGRADE, "/play");
	assert_int_equal(parse1("\r", &req), 0);
	assert_int_equal(parse1("\r\n", &req), 0);
	assert_int_equal(parse1("\r\n\r\n", &req), 0);
	assert_int_equal(parse1("\r\n\r\nGET / HTTP/1.1\r\n", &req), 0);
	/* ... but a bare LF or CR among them is still a 400 at once. */
	expect_status("\n", 400);
	expect_status("\r\n\n", 400);
	expect_status("\rGET / HTTP/1.1\r\n" REQ_HOST "\r\n", 400);
	expect_status("\r\nGET / HTTP/1.1\n" REQ_HOST "\r\n", 400);
	/* ... and they count in the bound. */
	memset(s, 0, sizeof(s));
	for (size_t i = 0; i < 64; i += 2)
		memcpy(s + i, "\r\n", 2);
	memset(&req, 0, sizeof(req));
	assert_int_equal(io_http_parse(&small, (uint8_t *)s, 62, &req), 0);
	assert_int_equal(io_http_parse(&small, (uint8_t *)s, 64, &req),
			 -EMSGSIZE);
	assert_int_equal(req.status, 413);
}

/* With a list of origins, an upgrade from another Origin is refused;
 * one with none (not a browser) is not. */
static void test_upgrade_origin(void **state)
{
	static const char *const origins[] = { "http://localhost:8080",
					       "https://game.example", NULL };
	const struct io_http_cfg ocfg = { .origins = origins };
	struct io_http_req req;
	char s[512];
	size_t i;
	static const struct {
		const char *origin;
		int ret; /* 1: upgrade, else the status */
	} cases[] = {
		{ NULL, 1 },
		{ "Origin: http://localhost:8080\r\n", 1 },
		{ "Origin: https://game.example\r\n", 1 },
		{ "origin:HTTPS://Game.Example  \r\n", 1 },
		{ "Origin: https://evil.example\r\n", 403 },
		{ "Origin: http://localhost\r\n", 403 },
		{ "Origin: http://localhost:80800\r\n", 403 },
		{ "Origin: https://game.example.evil\r\n", 403 },
		{ "Origin: https://game.exampl\r\n", 403 },
		{ "Origin: null\r\n", 403 },
		{ "Origin: \r\n", 403 },
		/* Two, even both allowed: not a browser's. */
		{ "Origin: https://game.example\r\n"
		  "Origin: https://game.example\r\n",
		  403 },
	};

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		snprintf(s, sizeof(s), "%s%s\r\n", REQ_OK,
			 cases[i].origin ? cases[i].origin : "");
		memset(&req, 0, sizeof(req));
		if (cases[i].ret == 1) {
			assert_int_equal(io_http_parse(&ocfg, (uint8_t *)s,
						       strlen(s), &req),
					 (int)strlen(s));
			assert_int_equal(req.kind, IO_HTTP_UPGRADE);
			continue;
		}
		assert_int_equal(io_http_parse(&ocfg, (uint8_t *)s, strlen(s),
					       &req),
				 -EPROTO);
		assert_int_equal(req.status, cases[i].ret);
		assert_int_equal(req.kind, IO_HTTP_NONE);
	}
	/* Without a list, any Origin. */
	expect_path(REQ_OK "Origin: https://evil.example\r\n\r\n",
		    IO_HTTP_UPGRADE, "/play");
	/* A bad upgrade is a 400 before its Origin is looked at. */
	snprintf(s, sizeof(s), "%s",
		 REQ_LINE REQ_HOST REQ_UP REQ_CONN REQ_VER
		 "Origin: https://evil.example\r\n\r\n");
	memset(&req, 0, sizeof(req));
	assert_int_equal(io_http_parse(&ocfg, (uint8_t *)s, strlen(s), &req),
			 -EPROTO);
	assert_int_equal(req.status, 400);
	/* Plain requests are not upgrades: their Origin is on_http's. */
	snprintf(s, sizeof(s), "%s",
		 "GET / HTTP/1.1\r\n" REQ_HOST
		 "Origin: https://evil.example\r\n\r\n");
	memset(&req, 0, sizeof(req));
	assert_int_equal(io_http_parse(&ocfg, (uint8_t *)s, strlen(s), &req),
			 (int)strlen(s));
	assert_int_equal(req.kind, IO_HTTP_GET);
	assert_true(io_http_write_error(s, sizeof(s), 403) > 0);
	assert_ptr_equal(strstr(s, "HTTP/1.1 403 Forbidden\r\n"), s);
}

static void test_upgrade_426_405_505(void **state)
{
	(void)state;
	expect_status(REQ_LINE REQ_HOST REQ_UP REQ_CONN REQ_KEY
		      "Sec-WebSocket-Version: 8\r\n\r\n",
		      426);
	expect_status(REQ_LINE REQ_HOST REQ_UP REQ_CONN REQ_KEY
		      "Sec-WebSocket-Version: 13, 8\r\n\r\n",
		      426);
	expect_status("POST /play HTTP/1.1\r\n" REQ_HOST REQ_UP REQ_CONN REQ_KEY
			      REQ_VER "\r\n",
		      405);
	expect_status("get /play HTTP/1.1\r\n" REQ_HOST "\r\n", 405);
	expect_status("head / HTTP/1.1\r\n" REQ_HOST "\r\n", 405);
	expect_status("HEADS / HTTP/1.1\r\n" REQ_HOST "\r\n", 405);
	expect_status("PUT / HTTP/1.1\r\n" REQ_HOST "\r\n", 405);
	expect_status("GET / HTTP/2.0\r\n" REQ_HOST "\r\n", 505);
}

static void test_upgrade_413(void **state)
{
	struct io_http_cfg small = { .max_request = 256 };
	struct io_http_req req;
	char s[600];
	size_t i;

	(void)state;
	/* The default bound, without ever seeing an end. */
	{
		char *big = malloc(IO_HTTP_MAX_REQUEST + 1);

		assert_non_null(big);
		memset(big, 'a', IO_HTTP_MAX_REQUEST);
		memcpy(big, "GET /", 5);
		memset(&req, 0, sizeof(req));
		assert_int_equal(io_http_parse(&hcfg, (uint8_t *)big,
					       IO_HTTP_MAX_REQUEST - 1, &req),
				 0);
		assert_int_equal(io_http_parse(&hcfg, (uint8_t *)big,
					       IO_HTTP_MAX_REQUEST, &req),
				 -EMSGSIZE);
		assert_int_equal(req.status, 413);
		free(big);
	}
	/* A configured bound, fed a byte at a time: 413 at 256 bytes. */
	snprintf(s, sizeof(s), "%s", REQ_OK);
	while (strlen(s) < 300)
		strcat(s, "X-Pad: 0123456789abcdef\r\n");
	strcat(s, "\r\n");
	memset(&req, 0, sizeof(req));
	for (i = 1; i < 256; i++)
		assert_int_equal(io_http_parse(&small, (uint8_t *)s, i, &req),
				 0);
	assert_int_equal(io_http_parse(&small, (uint8_t *)s, 256, &req),
			 -EMSGSIZE);
	assert_int_equal(req.status, 413);
	/* Whole, with its end past the bound. */
	memset(&req, 0, sizeof(req));
	assert_int_equal(io_http_parse(&small, (uint8_t *)s, strlen(s), &req),
			 -EMSGSIZE);
	assert_int_equal(req.status, 413);
	/* Exactly at the bound is fine. */
	small.max_request = strlen(s);
	memset(&req, 0, sizeof(req));
	assert_int_equal(io_http_parse(&small, (uint8_t *)s, strlen(s), &req),
			 (int)strlen(s));
}

static void test_plain_get(void **state)
{
	static const char s[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
				"Accept: text/plain\r\n\r\n";
	struct io_http_req req;

	(void)state;
	assert_int_equal(parse_split(s, &req), strlen(s));
	assert_int_equal(req.kind, IO_HTTP_GET);
	assert_int_equal(req.path_len, 8);
	assert_memory_equal(req.path, "/metrics", 8);
	assert_false(req.http10);
	/* HTTP/1.0 needs no Host. */
	assert_true(parse1("GET /index.html HTTP/1.0\r\n\r\n", &req) > 0);
	assert_int_equal(req.kind, IO_HTTP_GET);
	assert_true(req.http10);
	/* HTTP/1.1 does; another Upgrade is a plain GET. */
	expect_status("GET / HTTP/1.1\r\n\r\n", 400);
	assert_true(parse1("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n"
			   "Connection: Upgrade\r\n\r\n",
			   &req) > 0);
	assert_int_equal(req.kind, IO_HTTP_GET);
	/* A later 1.x minor version is 1.1. */
	assert_true(parse1("GET / HTTP/1.2\r\nHost: a\r\n\r\n", &req) > 0);
	assert_false(req.http10);
	assert_false(req.head);
}

/* HEAD is a plain request as GET is (RFC 9110 section 9.1), even with
 * the headers of an upgrade; its own rules are GET's. */
static void test_plain_head(void **state)
{
	static const char s[] = "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	struct io_http_req req;

	(void)state;
	assert_int_equal(parse_split(s, &req), strlen(s));
	assert_int_equal(req.kind, IO_HTTP_GET);
	assert_true(req.head);
	assert_int_equal(req.path_len, 8);
	assert_memory_equal(req.path, "/metrics", 8);
	assert_true(parse1("HEAD / HTTP/1.0\r\n\r\n", &req) > 0);
	assert_true(req.head);
	assert_true(req.http10);
	assert_true(parse1("HEAD /play HTTP/1.1\r\n" REQ_HOST REQ_UP REQ_CONN
				   REQ_KEY REQ_VER "\r\n",
			   &req) > 0);
	assert_int_equal(req.kind, IO_HTTP_GET);
	assert_true(req.head);
	assert_true(parse1(REQ_OK "\r\n", &req) > 0);
	assert_false(req.head);
	expect_status("HEAD / HTTP/1.1\r\n\r\n", 400);
	expect_status("HEAD / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n",
		      400);
}

static void test_http_errors_sniff(void **state)
{
	char out[256];
	int n;

	(void)state;
	assert_true(io_http_write_error(out, sizeof(out), 426) > 0);
	assert_true(!strncmp(out, "HTTP/1.1 426 Upgrade Required\r\n", 31));
	assert_non_null(strstr(out, "\r\nSec-WebSocket-Version: 13\r\n"));
	/* Its Upgrade header is named in Connection (hop-by-hop). */
	assert_non_null(strstr(out, "\r\nUpgrade: websocket\r\n"));
	assert_non_null(strstr(out, "\r\nConnection: Upgrade, close\r\n"));
	assert_true(io_http_write_error(out, sizeof(out), 405) > 0);
	assert_non_null(strstr(out, "\r\nAllow: GET, HEAD\r\n"));
	n = io_http_write_error(out, sizeof(out), 400);
	assert_int_equal(n, strlen(out));
	assert_string_equal(out, "HTTP/1.1 400 Bad Request\r\n"
				 "Content-Length: 0\r\n"
				 "Connection: close\r\n\r\n");
	assert_true(io_http_write_error(out, sizeof(out), 413) > 0);
	assert_non_null(strstr(out, " 413 Content Too Large\r\n"));
	assert_true(io_http_write_error(out, sizeof(out), 505) > 0);
	assert_int_equal(io_http_write_error(out, 20, 400), -ENOSPC);
	assert_int_equal(io_http_write_error(out, sizeof(out), 42), -EINVAL);
	assert_string_equal(io_http_reason(599), "Error");
	assert_string_equal(io_http_reason(404), "Not Found");
	assert_string_equal(io_http_reason(101), "Switching Protocols");
	assert_string_equal(io_http_reason(200), "OK");
	/* The server's own deadline answer has its phrase. */
	assert_string_equal(io_http_reason(408), "Request Timeout");

	assert_int_equal(io_http_sniff((const uint8_t *)"GET /", 5), 1);
	assert_int_equal(io_http_sniff((const uint8_t *)"GE", 2), -EAGAIN);
	assert_int_equal(io_http_sniff((const uint8_t *)"", 0), -EAGAIN);
	assert_int_equal(io_http_sniff((const uint8_t *)"\x00\x05", 2), 0);
	assert_int_equal(io_http_sniff((const uint8_t *)"GEx", 3), 0);
	assert_int_equal(io_http_sniff((const uint8_t *)"POST /", 6), 1);
	assert_int_equal(io_http_sniff((const uint8_t *)"POST", 4), -EAGAIN);
	assert_int_equal(io_http_sniff((const uint8_t *)"OPTIONS *", 9), 1);
	assert_int_equal(io_http_sniff((const uint8_t *)"ABCDEFGH", 8), 0);
	assert_int_equal(io_http_sniff((const uint8_t *)" GET", 4), 0);
	assert_int_equal(io_http_sniff((const uint8_t *)"G\x00", 2), 0);
}

/* ------------------------------------------------------------------ */
/* Frames */

static const uint8_t mkey[4] = { 0x37, 0xfa, 0x21, 0x3d };

/* A frame: first byte b0, the payload masked with mkey unless unmasked;
 * form 0 is the shortest length encoding, 16 or 64 forces one. */
static size_t frame_f(uint8_t *dst, uint8_t b0, const void *p, size_t n,
		      bool masked, int form)
{
	size_t o = 0, i;

	dst[o++] = b0;
	if (form == 0)
		form = n < 126 ? 7 : n <= 0xffff ? 16 : 64;
	if (form == 7) {
		dst[o++] = (uint8_t)n;
	} else if (form == 16) {
		dst[o++] = 126;
		dst[o++] = (uint8_t)(n >> 8);
		dst[o++] = (uint8_t)n;
	} else {
		dst[o++] = 127;
		for (i = 0; i < 8; i++)
			dst[o++] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
	}
	if (masked) {
		dst[1] |= 0x80;
		memcpy(dst + o, mkey, 4);
		o += 4;
	}
	for (i = 0; i < n; i++)
		dst[o + i] = ((const uint8_t *)p)[i] ^
			     (masked ? mkey[i & 3] : 0);
	return o + n;
}

static size_t frame(uint8_t *dst, uint8_t b0, const void *p, size_t n)
{
	return frame_f(dst, b0, p, n, true, 0);
}

/* What a decoder made of a stream. */
struct wev {
	int kind;
	uint8_t opcode;
	uint16_t code;
	size_t off, len;
};

struct wlog {
	struct wev ev[64];
	int n;
	int err; /* 0, or the close code of the failure */
	size_t mlen, dlen;
	uint8_t msg[1 << 18]; /* the open message */
	uint8_t data[1 << 18]; /* the events' payloads, one after another */
};

static struct wlog log_a, log_b;
static uint8_t work[1 << 18];

static void log_event(struct wlog *lg, const struct io_ws_event *ev)
{
	struct wev *w;

	if (ev->kind == IO_WS_EV_DATA) {
		/* The message's chunks, contiguous, as the io layer would
		 * reassemble them (controls may come in between). */
		assert_true(ev->opcode == IO_WS_OP_TEXT ||
			    ev->opcode == IO_WS_OP_BINARY);
		assert_true(lg->mlen + ev->len <= sizeof(lg->msg));
		if (ev->len)
			memcpy(lg->msg + lg->mlen, ev->data, ev->len);
		lg->mlen += ev->len;
		if (!ev->fin)
			return;
	} else {
		assert_true(ev->len <= IO_WS_CTL_MAX);
	}
	assert_true(lg->n < (int)ARRAY_SIZE(lg->ev));
	w = &lg->ev[lg->n++];
	*w = (struct wev){ ev->kind, ev->opcode, ev->code, lg->dlen,
			   ev->kind == IO_WS_EV_DATA ? lg->mlen : ev->len };
	assert_true(lg->dlen + w->len <= sizeof(lg->data));
	if (w->len)
		memcpy(lg->data + lg->dlen,
		       ev->kind == IO_WS_EV_DATA ? lg->msg : ev->data, w->len);
	lg->dlen += w->len;
	if (ev->kind == IO_WS_EV_DATA)
		lg->mlen = 0;
}

/*
 * Decode a stream (copied: it is unmasked in place) fed as a first chunk
 * of first bytes, then chunks of step bytes.
 */
static void run(struct wlog *lg, const uint8_t *s, size_t n, size_t first,
		size_t step, uint64_t max, unsigned int flags)
{
	struct io_ws_dec d;
	struct io_ws_event ev;
	size_t off = 0, c = first, used;
	int r;

	memset(lg, 0, offsetof(struct wlog, msg));
	assert_true(n <= sizeof(work));
	memcpy(work, s, n);
	io_ws_dec_init(&d, max, flags);
	while (off < n) {
		if (c > n - off)
			c = n - off;
		for (size_t at = off; at < off + c;) {
			r = io_ws_decode(&d, work + at, off + c - at, &used,
					 &ev);
			assert_true(used <= off + c - at);
			if (r < 0) {
				assert_int_equal(r, -EPROTO);
				lg->err = d.close_code;
				assert_true(lg->err == 1002 ||
					    lg->err == 1007 || lg->err == 1009);
				/* Failed for good. */
				assert_int_equal(io_ws_decode(&d, work, n,
							      &used, &ev),
						 -EPROTO);
				return;
			}
			if (r == 0) {
				assert_int_equal(used, off + c - at);
				break;
			}
			assert_int_equal(r, 1);
			if (ev.kind == IO_WS_EV_DATA)
				assert_true(ev.data >= work + at &&
					    ev.data + ev.len <=
						    work + at + used);
			at += used;
			log_event(lg, &ev);
		}
		off += c;
		c = step;
	}
}

static void log_equal(const struct wlog *a, const struct wlog *b)
{
	assert_int_equal(a->err, b->err);
	assert_int_equal(a->n, b->n);
	for (int i = 0; i < a->n; i++) {
		assert_int_equal(a->ev[i].kind, b->ev[i].kind);
		assert_int_equal(a->ev[i].opcode, b->ev[i].opcode);
		assert_int_equal(a->ev[i].code, b->ev[i].code);
		assert_int_equal(a->ev[i].len, b->ev[i].len);
		assert_memory_equal(a->data + a->ev[i].off,
				    b->data + b->ev[i].off, a->ev[i].len);
	}
}

/*
 * Decode s whole into log_a, and check that it decodes the same split at
 * every byte boundary and a byte at a time (for long streams, at a
 * sample of boundaries).  Returns log_a.
 */
static const struct wlog *decode_all(const uint8_t *s, size_t n, uint64_t max,
				     unsigned int flags)
{
	size_t stride = n > 2000 ? 97 : 1;

	run(&log_a, s, n, n, n, max, flags);
	for (size_t cut = 0; cut <= n; cut += stride) {
		run(&log_b, s, n, cut, n, max, flags);
		log_equal(&log_a, &log_b);
	}
	run(&log_b, s, n, 1, n > 2000 ? 7 : 1, max, flags);
	log_equal(&log_a, &log_b);
	return &log_a;
}

static void expect_fail(const uint8_t *s, size_t n, uint64_t max, int code)
{
	const struct wlog *lg = decode_all(s, n, max, 0);

	assert_int_equal(lg->err, code);
}

static uint8_t st[1 << 18];

/* RFC 6455 section 5.7's examples, as a server sees them. */
static void test_frame_rfc_examples(void **state)
{
	static const uint8_t hello[] = { 0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
					 0x7f, 0x9f, 0x4d, 0x51, 0x58 };
	const struct wlog *lg;
	struct io_ws_dec d;
	struct io_ws_event ev;
	uint8_t b[sizeof(hello)];
	size_t n = 0, used;

	(void)state;
	/* Unmasked in place, one event for the whole message. */
	memcpy(b, hello, sizeof(b));
	io_ws_dec_init(&d, 0, 0);
	assert_int_equal(io_ws_decode(&d, b, sizeof(b), &used, &ev), 1);
	assert_int_equal(used, sizeof(b));
	assert_int_equal(ev.kind, IO_WS_EV_DATA);
	assert_int_equal(ev.opcode, IO_WS_OP_TEXT);
	assert_true(ev.fin);
	assert_ptr_equal(ev.data, b + 6);
	assert_memory_equal(b + 6, "Hello", 5);
	assert_int_equal(io_ws_decode(&d, b, 0, &used, &ev), 0);

	/* A fragmented "Hello" with a ping between the fragments. */
	n += frame(st + n, 0x01, "Hel", 3);
	n += frame(st + n, 0x89, "Hello", 5);
	n += frame(st + n, 0x80, "lo", 2);
	n += frame(st + n, 0x8a, "Hello", 5);
	lg = decode_all(st, n, 0, 0);
	assert_int_equal(lg->err, 0);
	assert_int_equal(lg->n, 3);
	assert_int_equal(lg->ev[0].kind, IO_WS_EV_PING);
	assert_int_equal(lg->ev[1].kind, IO_WS_EV_DATA);
	assert_int_equal(lg->ev[1].opcode, IO_WS_OP_TEXT);
	assert_int_equal(lg->ev[1].len, 5);
	assert_memory_equal(lg->data + lg->ev[1].off, "Hello", 5);
	assert_int_equal(lg->ev[2].kind, IO_WS_EV_PONG);
	assert_memory_equal(lg->data + lg->ev[2].off, "Hello", 5);
}

/* 7-, 16- and 64-bit lengths, minimal or not; empty messages and
 * fragments; binary is not checked as UTF-8. */
static void test_frame_lengths(void **state)
{
	static uint8_t pay[70000];
	const struct wlog *lg;
	size_t n = 0, i;

	(void)state;
	for (i = 0; i < sizeof(pay); i++)
		pay[i] = (uint8_t)(i * 7 + (i >> 8));
	n += frame(st + n, 0x82, pay, 125);
	n += frame(st + n, 0x82, pay, 126);
	n += frame(st + n, 0x82, pay, 65535);
	n += frame(st + n, 0x82, pay, 65536);
	n += frame(st + n, 0x82, pay, 70000);
	n += frame_f(st + n, 0x82, pay, 5, true, 16);
	n += frame_f(st + n, 0x82, pay, 5, true, 64);
	n += frame_f(st + n, 0x82, pay, 300, true, 64);
	n += frame(st + n, 0x81, "", 0);
	n += frame(st + n, 0x02, "", 0);
	n += frame(st + n, 0x00, "ab", 2);
	n += frame(st + n, 0x00, "", 0);
	n += frame(st + n, 0x80, "", 0);
	lg = decode_all(st, n, 0, 0);
	assert_int_equal(lg->err, 0);
	assert_int_equal(lg->n, 10);
	static const size_t lens[] = { 125, 126, 65535, 65536, 70000,
				       5,   5,	 300,	0,     2 };
	for (i = 0; i < ARRAY_SIZE(lens); i++) {
		assert_int_equal(lg->ev[i].kind, IO_WS_EV_DATA);
		assert_int_equal(lg->ev[i].len, lens[i]);
		assert_memory_equal(lg->data + lg->ev[i].off,
				    i == 9 ? (const uint8_t *)"ab" : pay,
				    lens[i]);
	}
	assert_int_equal(lg->ev[8].opcode, IO_WS_OP_TEXT);
	assert_int_equal(lg->ev[9].opcode, IO_WS_OP_BINARY);
}

static void test_frame_masking(void **state)
{
	const struct wlog *lg;
	size_t n;

	(void)state;
	/* A server fails an unmasked client frame... */
	n = frame_f(st, 0x82, "abc", 3, false, 0);
	expect_fail(st, n, 0, 1002);
	n = frame_f(st, 0x89, "", 0, false, 0);
	expect_fail(st, n, 0, 1002);
	/* ...and a client a masked server frame. */
	n = frame_f(st, 0x82, "abc", 3, true, 0);
	lg = decode_all(st, n, 0, IO_WS_DEC_CLIENT);
	assert_int_equal(lg->err, 1002);
	n = frame_f(st, 0x82, "abc", 3, false, 0);
	n += frame_f(st + n, 0x89, "p", 1, false, 0);
	lg = decode_all(st, n, 0, IO_WS_DEC_CLIENT);
	assert_int_equal(lg->err, 0);
	assert_int_equal(lg->n, 2);
	assert_memory_equal(lg->data, "abcp", 4);
}

static void test_frame_rsv_opcodes(void **state)
{
	size_t n;
	int op;

	(void)state;
	for (int rsv = 0x10; rsv <= 0x40; rsv <<= 1) {
		n = frame(st, (uint8_t)(0x82 | rsv), "abc", 3);
		expect_fail(st, n, 0, 1002);
		n = frame(st, (uint8_t)(0x89 | rsv), "", 0);
		expect_fail(st, n, 0, 1002);
	}
	for (op = 3; op <= 0xf; op++) {
		if (op >= 8 && op <= 0xa)
			continue;
		n = frame(st, (uint8_t)(0x80 | op), "abc", 3);
		expect_fail(st, n, 0, 1002);
		/* After a good frame too, and inside a message. */
		n = frame(st, 0x82, "x", 1);
		n += frame(st + n, 0x02, "y", 1);
		n += frame(st + n, (uint8_t)(0x80 | op), "", 0);
		expect_fail(st, n, 0, 1002);
	}
}

static void test_frame_control(void **state)
{
	static uint8_t pay[200];
	const struct wlog *lg;
	size_t n;

	(void)state;
	memset(pay, 'p', sizeof(pay));
	/* 125 bytes is the most, for each control opcode. */
	n = frame(st, 0x89, pay, 125);
	n += frame(st + n, 0x8a, pay, 125);
	lg = decode_all(st, n, 0, 0);
	assert_int_equal(lg->err, 0);
	assert_int_equal(lg->n, 2);
	assert_int_equal(lg->ev[0].len, 125);
	for (uint8_t op = 0x8; op <= 0xa; op++) {
		n = frame(st, (uint8_t)(0x80 | op), pay, 126);
		expect_fail(st, n, 0, 1002);
		/* 5 bytes in a 16-bit length is still over 7 bits. */
		n = frame_f(st, (uint8_t)(0x80 | op), pay, 5, true, 16);
		expect_fail(st, n, 0, 1002);
		/* Not fragmented. */
		n = frame(st, op, "", 0);
		expect_fail(st, n, 0, 1002);
	}
	/* A ping, a pong and a close between fragments. */
	n = frame(st, 0x02, "ab", 2);
	n += frame(st + n, 0x89, "1", 1);
	n += frame(st + n, 0x00, "cd", 2);
	n += frame(st + n, 0x8a, "2", 1);
	n += frame(st + n, 0x80, "ef", 2);
	lg = decode_all(st, n, 0, 0);
	assert_int_equal(lg->err, 0);
	assert_int_equal(lg->n, 3);
	assert_int_equal(lg->ev[2].kind, IO_WS_EV_DATA);
	assert_memory_equal(lg->data + lg->ev[2].off, "abcdef", 6);
	n = frame(st, 0x02, "ab", 2);
	n += frame(st + n, 0x88, "\x03\xe8", 2);
	lg = decode_all(st, n, 0, 0);
	assert_int_equal(lg->n, 1);
	assert_int_equal(lg->ev[0].kind, IO_WS_EV_CLOSE);
	assert_int_equal(lg->ev[0].code, 1000);
}

static void test_frame_fragmentation(void **state)
{
	size_t n;

	(void)state;
	/* Continuation without a start, alone and after a whole message. */
	n = frame(st, 0x80, "a", 1);
	expect_fail(st, n, 0, 1002);
	n = frame(st, 0x00, "a", 1);
	expect_fail(st, n, 0, 1002);
	n = frame(st, 0x81, "a", 1);
	n += frame(st + n, 0x80, "b", 1);
	expect_fail(st, n, 0, 1002);
	/* A new data frame inside a fragmented message. */
	for (uint8_t op = 1; op <= 2; op++) {
		n = frame(st, 0x01, "a", 1);
		n += frame(st + n, (uint8_t)(0x80 | op), "b", 1);
		expect_fail(st, n, 0, 1002);
		n = frame(st, 0x02, "a", 1);
		n += frame(st + n, 0x00, "b", 1);
		n += frame(st + n, op, "c", 1);
		expect_fail(st, n, 0, 1002);
	}
}

static void test_frame_too_big(void **state)
{
	static uint8_t pay[300];
	const struct wlog *lg;
	size_t n;

	(void)state;
	memset(pay, 'x', sizeof(pay));
	n = frame(st, 0x82, pay, 100);
	lg = decode_all(st, n, 100, 0);
	assert_int_equal(lg->err, 0);
	assert_int_equal(lg->ev[0].len, 100);
	n = frame(st, 0x82, pay, 101);
	expect_fail(st, n, 100, 1009);
	/* Fragments: 60 + 40 fit, a 41 after 60 does not. */
	n = frame(st, 0x01, pay, 60);
	n += frame(st + n, 0x80, pay, 40);
	assert_int_equal(decode_all(st, n, 100, 0)->err, 0);
	n = frame(st, 0x01, pay, 60);
	n += frame(st + n, 0x00, pay, 41);
	expect_fail(st, n, 100, 1009);
	/* Judged at the header: nothing of the payload need come. */
	n = frame(st, 0x82, pay, 101) - 101;
	expect_fail(st, n, 100, 1009);
	/* The bound is per message. */
	n = frame(st, 0x82, pay, 100);
	n += frame(st + n, 0x82, pay, 100);
	assert_int_equal(decode_all(st, n, 100, 0)->n, 2);
	/* A 64-bit length with the top bit set, and the largest one. */
	n = frame_f(st, 0x82, pay, 0, true, 64);
	st[2] = 0x80;
	expect_fail(st, n, 0, 1002);
	st[2] = 0x7f;
	expect_fail(st, n, 0, 1009);
	st[2] = 0x7f;
	memset(st + 3, 0xff, 7);
	expect_fail(st, n, UINT64_MAX, 0);
}

static void test_utf8(void **state)
{
	static const char *const good[] = {
		"",
		"abc",
		"\xc2\x80",
		"\xdf\xbf",
		"\xe0\xa0\x80",
		"\xed\x9f\xbf",
		"\xee\x80\x80",
		"\xef\xbf\xbf",
		"\xf0\x90\x80\x80",
		"\xf4\x8f\xbf\xbf",
		"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5", /* kosme */
		"0123456789abcdef0123456789abcdef\xe2\x82\xac",
	};
	static const char *const bad[] = {
		"\x80",
		"\xbf",
		"\xc0\x80",
		"\xc1\xbf",
		"\xe0\x80\x80",
		"\xe0\x9f\xbf",
		"\xed\xa0\x80",
		"\xed\xbf\xbf",
		"\xf0\x80\x80\x80",
		"\xf0\x8f\xbf\xbf",
		"\xf4\x90\x80\x80",
		"\xf5\x80\x80\x80",
		"\xff",
		"\xfe",
		"\xc2\x41",
		"\xe2\x82\x41",
		"0123456789abcdef0123456789abcdef\x80",
	};
	static const char *const part[] = { "\xc2", "\xe2\x82",
					    "\xf0\x9f\x98" };
	struct io_utf8 u;
	size_t i, cut, n;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(good); i++) {
		n = strlen(good[i]);
		for (cut = 0; cut <= n; cut++) {
			io_utf8_init(&u);
			assert_true(io_utf8_feed(&u, (const uint8_t *)good[i],
						 cut));
			assert_true(io_utf8_feed(
				&u, (const uint8_t *)good[i] + cut, n - cut));
			assert_true(io_utf8_complete(&u));
		}
	}
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		n = strlen(bad[i]);
		for (cut = 0; cut <= n; cut++) {
			io_utf8_init(&u);
			assert_false(io_utf8_feed(&u, (const uint8_t *)bad[i],
						  cut) &&
				     io_utf8_feed(&u,
						  (const uint8_t *)bad[i] + cut,
						  n - cut));
		}
	}
	for (i = 0; i < ARRAY_SIZE(part); i++) {
		io_utf8_init(&u);
		assert_true(io_utf8_feed(&u, (const uint8_t *)part[i],
					 strlen(part[i])));
		assert_false(io_utf8_complete(&u));
	}
}

static void test_frame_utf8(void **state)
{
	static const char euro[] = "\xe2\x82\xac";
	static const char smile[] = "\xf0\x9f\x98\x80";
	const struct wlog *lg;
	size_t n, cut;

	(void)state;
	/* A code point split across fragments at every position, with a
	 * ping between the fragments. */
	for (cut = 0; cut <= 4; cut++) {
		n = frame(st, 0x01, smile, cut);
		n += frame(st + n, 0x89, "", 0);
		n += frame(st + n, 0x80, smile + cut, 4 - cut);
		lg = decode_all(st, n, 0, 0);
		assert_int_equal(lg->err, 0);
		assert_int_equal(lg->ev[1].len, 4);
		assert_memory_equal(lg->data + lg->ev[1].off, smile, 4);
	}
	for (cut = 1; cut < 3; cut++) {
		/* Cut short at the end of the message. */
		n = frame(st, 0x81, euro, cut);
		expect_fail(st, n, 0, 1007);
		n = frame(st, 0x01, euro, cut);
		n += frame(st + n, 0x80, "", 0);
		expect_fail(st, n, 0, 1007);
		/* Broken across fragments. */
		n = frame(st, 0x01, euro, cut);
		n += frame(st + n, 0x80, "A", 1);
		expect_fail(st, n, 0, 1007);
	}
	/* Invalid at once, before the message ends. */
	n = frame(st, 0x01, "ok\xed\xa0\x80", 5);
	expect_fail(st, n, 0, 1007);
	n = frame(st, 0x01, "\xc0", 1);
	expect_fail(st, n, 0, 1007);
	/* Binary messages are not text. */
	n = frame(st, 0x82, "\xff\xc0", 2);
	assert_int_equal(decode_all(st, n, 0, 0)->err, 0);
	/* Each message checks on its own: text after a binary one. */
	n = frame(st, 0x82, "\xe2", 1);
	n += frame(st + n, 0x81, "\x82\xac", 2);
	expect_fail(st, n, 0, 1007);
}

static void test_frame_close(void **state)
{
	static const unsigned int good[] = { 1000, 1001, 1002, 1003, 1007,
					     1008, 1009, 1010, 1011, 3000,
					     3999, 4000, 4999 };
	static const unsigned int bad[] = { 0,	  1,	999,  1004, 1005, 1006,
					    1012, 1013, 1014, 1015, 1016, 1100,
					    2000, 2999, 5000, 65535 };
	const struct wlog *lg;
	uint8_t p[125];
	size_t n, i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(good); i++) {
		assert_true(io_ws_close_code_valid(good[i]));
		n = io_ws_close_payload(p, (uint16_t)good[i],
					"bye \xe2\x82\xac");
		assert_int_equal(n, 9);
		n = frame(st, 0x88, p, n);
		lg = decode_all(st, n, 0, 0);
		assert_int_equal(lg->err, 0);
		assert_int_equal(lg->n, 1);
		assert_int_equal(lg->ev[0].kind, IO_WS_EV_CLOSE);
		assert_int_equal(lg->ev[0].code, good[i]);
		assert_int_equal(lg->ev[0].len, 7);
		assert_memory_equal(lg->data + lg->ev[0].off,
				    "bye \xe2\x82\xac", 7);
	}
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_false(io_ws_close_code_valid(bad[i]));
		n = io_ws_close_payload(p, (uint16_t)bad[i], NULL);
		assert_int_equal(n, 2);
		n = frame(st, 0x88, p, n);
		expect_fail(st, n, 0, 1002);
	}
	/* No payload: 1005 reported.  One byte: 1002.  Bad reason: 1007. */
	n = frame(st, 0x88, "", 0);
	lg = decode_all(st, n, 0, 0);
	assert_int_equal(lg->n, 1);
	assert_int_equal(lg->ev[0].code, IO_WS_CLOSE_NO_STATUS);
	assert_int_equal(lg->ev[0].len, 0);
	n = frame(st, 0x88, "\x03", 1);
	expect_fail(st, n, 0, 1002);
	n = frame(st, 0x88, "\x03\xe8\xe2\x82", 4);
	expect_fail(st, n, 0, 1007);
	n = frame(st, 0x88, "\x03\xe8\xff", 3);
	expect_fail(st, n, 0, 1007);
	/* Nothing after a close is read, not even garbage. */
	n = frame(st, 0x88, "\x03\xe8", 2);
	n += frame(st + n, 0x82, "late", 4);
	memcpy(st + n, "\xff\xff\xff", 3);
	n += 3;
	lg = decode_all(st, n, 0, 0);
	assert_int_equal(lg->err, 0);
	assert_int_equal(lg->n, 1);
	assert_int_equal(lg->ev[0].code, 1000);
}

/* A long mixed stream, split everywhere. */
static void test_frame_mixed_splits(void **state)
{
	static uint8_t pay[1000];
	const struct wlog *lg;
	size_t n = 0, i;

	(void)state;
	for (i = 0; i < sizeof(pay); i++)
		pay[i] = (uint8_t)('a' + i % 26);
	n += frame(st + n, 0x81, pay, 10);
	n += frame(st + n, 0x02, pay, 200);
	n += frame(st + n, 0x89, pay, 125);
	n += frame(st + n, 0x00, pay, 0);
	n += frame(st + n, 0x8a, pay, 0);
	n += frame(st + n, 0x80, pay, 300);
	n += frame_f(st + n, 0x81, pay, 3, true, 64);
	n += frame(st + n, 0x01, "\xe2", 1);
	n += frame(st + n, 0x00, "\x82", 1);
	n += frame(st + n, 0x80, "\xac!", 2);
	n += frame(st + n, 0x88, "\x0f\xa0ok", 4);
	lg = decode_all(st, n, 600, 0);
	assert_int_equal(lg->err, 0);
	assert_int_equal(lg->n, 7);
	assert_int_equal(lg->ev[3].len, 500);
	assert_int_equal(lg->ev[5].len, 4);
	assert_int_equal(lg->ev[6].code, 4000);
	/* The same with a failure at its end: at every split, 1009. */
	n -= 2 + 4 + 4;
	n += frame(st + n, 0x82, pay, 601);
	expect_fail(st, n, 600, 1009);
}

static void test_frame_writer(void **state)
{
	static const struct {
		uint64_t len;
		unsigned int hl;
		uint8_t b[10];
	} v[] = {
		{ 0, 2, { 0x82, 0 } },
		{ 125, 2, { 0x82, 125 } },
		{ 126, 4, { 0x82, 126, 0, 126 } },
		{ 65535, 4, { 0x82, 126, 0xff, 0xff } },
		{ 65536, 10, { 0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0 } },
		{ 1ull << 32, 10, { 0x82, 127, 0, 0, 0, 1, 0, 0, 0, 0 } },
	};
	uint8_t h[IO_WS_HDR_MAX], buf[64], *p;
	struct io_ws_dec d;
	struct io_ws_event ev;
	size_t used, i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(v); i++) {
		assert_int_equal(io_ws_hdr_len(v[i].len), v[i].hl);
		assert_int_equal(io_ws_write_hdr(h, IO_WS_OP_BINARY, true,
						 v[i].len),
				 v[i].hl);
		assert_memory_equal(h, v[i].b, v[i].hl);
	}
	assert_int_equal(io_ws_write_hdr(h, IO_WS_OP_TEXT, false, 3), 2);
	assert_int_equal(h[0], 0x01);
	/* In the headroom: ends at the payload; too little room fails. */
	memset(buf, 0, sizeof(buf));
	memcpy(buf + 16, "hello", 5);
	p = io_ws_frame_in_headroom(buf + 16, 16, IO_WS_OP_TEXT, 5);
	assert_ptr_equal(p, buf + 14);
	assert_int_equal(p[0], 0x81);
	assert_int_equal(p[1], 5);
	assert_null(io_ws_frame_in_headroom(buf + 16, 3, IO_WS_OP_TEXT, 126));
	assert_ptr_equal(io_ws_frame_in_headroom(buf + 16, 4, IO_WS_OP_TEXT,
						 126),
			 buf + 12);
	assert_null(
		io_ws_frame_in_headroom(buf + 16, 9, IO_WS_OP_BINARY, 70000));
	assert_null(io_ws_frame_in_headroom(buf + 16, 1, IO_WS_OP_BINARY, 0));
	/* A client decoder reads what the writer wrote. */
	p = io_ws_frame_in_headroom(buf + 16, 16, IO_WS_OP_TEXT, 5);
	io_ws_dec_init(&d, 0, IO_WS_DEC_CLIENT);
	assert_int_equal(io_ws_decode(&d, p, 7, &used, &ev), 1);
	assert_int_equal(used, 7);
	assert_true(ev.fin);
	assert_int_equal(ev.len, 5);
	assert_memory_equal(ev.data, "hello", 5);
}

static void test_close_payload(void **state)
{
	char reason[200];
	uint8_t p[IO_WS_CTL_MAX];
	struct io_utf8 u;
	size_t n;

	(void)state;
	/* Cut at 123 bytes, back to a code point boundary. */
	memset(reason, 'a', sizeof(reason));
	reason[199] = '\0';
	memcpy(reason + 121, "\xe2\x82\xac", 3);
	n = io_ws_close_payload(p, 1001, reason);
	assert_int_equal(n, 2 + 121);
	assert_int_equal(p[0], 0x03);
	assert_int_equal(p[1], 0xe9);
	memcpy(reason + 121, "ab\xe2\x82\xac", 5);
	assert_int_equal(io_ws_close_payload(p, 1001, reason), 125);
	io_utf8_init(&u);
	assert_true(io_utf8_feed(&u, p + 2, 123) && io_utf8_complete(&u));
}

/* ------------------------------------------------------------------ */
/* The fuzz targets' seed corpora. */

static void test_corpus_ws_frame(void **state)
{
	(void)state;
	t_replay_corpus("ws_frame", fuzz_ws_frame);
}

static void test_corpus_ws_upgrade(void **state)
{
	(void)state;
	t_replay_corpus("ws_upgrade", fuzz_ws_upgrade);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha1_rfc3174),
		cmocka_unit_test(test_sha1_splits),
		cmocka_unit_test(test_base64_rfc4648),
		cmocka_unit_test(test_base64_strict),
		cmocka_unit_test(test_ws_accept_rfc6455),
		cmocka_unit_test(test_ws_accept_key),
		cmocka_unit_test(test_upgrade_ok),
		cmocka_unit_test(test_upgrade_pipelined),
		cmocka_unit_test(test_upgrade_browser),
		cmocka_unit_test(test_upgrade_protocols),
		cmocka_unit_test(test_upgrade_400),
		cmocka_unit_test(test_target_forms),
		cmocka_unit_test(test_upgrade_origin),
		cmocka_unit_test(test_upgrade_426_405_505),
		cmocka_unit_test(test_upgrade_413),
		cmocka_unit_test(test_plain_get),
		cmocka_unit_test(test_plain_head),
		cmocka_unit_test(test_http_errors_sniff),
		cmocka_unit_test(test_frame_rfc_examples),
		cmocka_unit_test(test_frame_lengths),
		cmocka_unit_test(test_frame_masking),
		cmocka_unit_test(test_frame_rsv_opcodes),
		cmocka_unit_test(test_frame_control),
		cmocka_unit_test(test_frame_fragmentation),
		cmocka_unit_test(test_frame_too_big),
		cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_frame_utf8),
		cmocka_unit_test(test_frame_close),
		cmocka_unit_test(test_frame_mixed_splits),
		cmocka_unit_test(test_frame_writer),
		cmocka_unit_test(test_close_payload),
		cmocka_unit_test(test_corpus_ws_frame),
		cmocka_unit_test(test_corpus_ws_upgrade),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
