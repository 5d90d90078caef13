/* SPDX-License-Identifier: MIT */
/*
 * The tools' option values: counts, sizes, durations and numeric
 * addresses, parsed the same way by every tool.  No I/O; cli.h's need_*()
 * turn a malformed value into a usage error.
 */
#ifndef AO_TOOLS_PARSE_H
#define AO_TOOLS_PARSE_H

#include <stdint.h>
#include <sys/socket.h>

/*
 * Each returns 0, or -1 for a malformed or out-of-range
 * value (out untouched).
 *  parse_count: decimal, optional k/M/G suffix (x1000), within [min, max];
 *  parse_size: decimal, optional k/K/m/M suffix (x1024), within [min, max];
 *  parse_duration: decimal seconds, fraction allowed, optional suffix
 *  us, ms, s, m or h; result in ns, within [min_ns, max_ns] (a fraction
 *  is kept to the microsecond: 1.5us is 1us).
 */
int parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int parse_duration(const char *s, uint64_t min_ns, uint64_t max_ns,
		   uint64_t *out);
/*
 *  parse_addr: a numeric address, with port, into *sa (a struct
 *  sockaddr_storage) and its size into *len: an IPv4 dotted quad
 *  ("127.0.0.1") or an IPv6 address, bare or in brackets ("::1", "[::1]",
 *  "fe80::1%eth0").  getaddrinfo() with AI_NUMERICHOST: never a name
 *  lookup, and none of inet_aton()'s shorthands ("1.2.3").
 */
int parse_addr(const char *s, uint16_t port, struct sockaddr_storage *sa,
	       socklen_t *len);

#endif /* AO_TOOLS_PARSE_H */
