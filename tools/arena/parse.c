// SPDX-License-Identifier: MIT
/*
 * ao-arena reads its option values (counts, sizes, durations) exactly as
 * ao-echo and ao-load do: the same parser, compiled in from
 * tools/load/proto.c.
 */
#include "../load/proto.c"
