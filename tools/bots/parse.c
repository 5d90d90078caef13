// SPDX-License-Identifier: MIT
/*
 * ao-bots reads its option values (counts, durations) exactly as ao-load
 * and ao-echo do: the same parser, compiled in from tools/load/proto.c.
 */
#include "../load/proto.c"
