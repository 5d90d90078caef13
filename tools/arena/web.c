// SPDX-License-Identifier: MIT
/*
 * ao-arena's plain HTTP, on the game's port (AO_SERVER_HTTP): GET /metrics
 * in Prometheus' text format, GET / (the viewer's index.html) and the
 * viewer's files, embedded in the program at build time (embed.sh), and
 * 404 for anything else.  io/ answers a HEAD as its GET without the body
 * and the other methods with 405, bounds the request head and closes the
 * connection after the answer.
 */
#include <string.h>
#include <aorta/io/conn.h>
#include <aorta/io/metrics.h>
#include <aorta/io/server.h>
#include "arena.h"

static const struct arena_file *find_file(const char *path, size_t n)
{
	const struct arena_file *f;

	if (n == 1 && path[0] == '/') {
		path = "/index.html";
		n = strlen(path);
	}
	for (f = arena_files; f->path; f++)
		if (strlen(f->path) == n && !memcmp(f->path, path, n))
			return f;
	return NULL;
}

void arena_on_http(struct ao_conn *c, const struct ao_http_request *req,
		   void *arg)
{
	static const char not_found[] = "not found\n";
	struct arena *a = arg;
	const struct arena_file *f;
	const char *q;
	size_t n = req->path_len;

	/* The query string does not choose the resource. */
	q = memchr(req->path, '?', n);
	if (q)
		n = (size_t)(q - req->path);
	if (n == 8 && !memcmp(req->path, "/metrics", 8)) {
		struct ao_metrics m;

		ao_metrics_init(&m);
		if (arena_metrics(a, &m))
			ao_http_reply(c, 500, "text/plain", "no memory\n", 10);
		else
			ao_http_reply(c, 200,
				      "text/plain; version=0.0.4; "
				      "charset=utf-8",
				      m.buf, m.len);
		ao_metrics_free(&m);
		return;
	}
	f = find_file(req->path, n);
	if (f)
		ao_http_reply(c, 200, f->type, f->data, f->len);
	else
		ao_http_reply(c, 404, "text/plain", not_found,
			      sizeof(not_found) - 1);
}
