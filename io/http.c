// SPDX-License-Identifier: MIT
/*
 * WebSocket and plain HTTP connections of the server: see io/ws.c for the
 * design.
 */
#include <errno.h>
#include <aorta/io/conn.h>
#include "io_priv.h"

enum ao_conn_proto ao_conn_proto(const struct ao_conn *c)
{
	(void)c;
	return AO_CONN_FRAMED;
}

int ao_http_reply(struct ao_conn *c, int status, const char *content_type,
		  const void *body, size_t len)
{
	(void)c;
	(void)status;
	(void)content_type;
	(void)body;
	(void)len;
	return -ENOSYS;
}
