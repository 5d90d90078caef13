/* SPDX-License-Identifier: MIT */
/*
 * Prometheus' text exposition format (version 0.0.4): a growing text
 * buffer that families and samples are written to, and the counters of a
 * server (its connections, packets, bytes, WebSocket and HTTP, its pool,
 * executor and lock phases) written as aorta_* metrics.  What a program
 * adds of its own goes after them, under its own prefix.  Serve the text
 * as "text/plain; version=0.0.4".
 */
#ifndef AORTA_IO_METRICS_H
#define AORTA_IO_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <aorta/compiler.h>

struct ao_server;

/* A growing text buffer (malloc). */
struct ao_metrics {
	char *buf; /* NUL-terminated text, len bytes (NULL when empty) */
	size_t len, cap;
	int err; /* the first error (-ENOMEM), then every call returns it */
};

/* An empty buffer. */
AO_API void ao_metrics_init(struct ao_metrics *m);
/* Free the text; the buffer is empty again. */
AO_API void ao_metrics_free(struct ao_metrics *m);
/* "# HELP name help\n# TYPE name type\n", once per family (type
 * "counter" or "gauge"); 0, -EINVAL (a bad name or type), -ENOMEM. */
AO_API int ao_metrics_family(struct ao_metrics *m, const char *name,
			     const char *type, const char *help);
/* One sample: name{labels} value; labels "" (or NULL) or a label list
 * such as "reason=\"eof\"" (written as given); 0, -EINVAL, -ENOMEM.
 * A double has a decimal point whatever the locale, or is NaN, +Inf or
 * -Inf. */
AO_API int ao_metrics_u64(struct ao_metrics *m, const char *name,
			  const char *labels, uint64_t v);
AO_API int ao_metrics_double(struct ao_metrics *m, const char *name,
			     const char *labels, double v);
/* The server's counters (summed over its rings), its pool's, its
 * executor's and its pool locks' phases, as aorta_* families; 0, or
 * -ENOMEM. */
AO_API int ao_server_metrics(const struct ao_server *srv, struct ao_metrics *m);

#endif /* AORTA_IO_METRICS_H */
