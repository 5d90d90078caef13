/* SPDX-License-Identifier: MIT */
/* Internals of core/cpu.c, for the tests. */
#ifndef AORTA_CORE_CPU_PRIV_H
#define AORTA_CORE_CPU_PRIV_H

/* CPUs granted by one cpu.max line ("max 100000", "150000 100000"),
 * rounded up; 0 for no limit or a line that does not parse. */
unsigned int ao__cpu_max_parse(const char *line);
/* The tightest quota on cgroup path (as in /proc/self/cgroup) and its
 * ancestors under the cgroup v2 mount root; 0 if none. */
unsigned int ao__cpu_quota_at(const char *root, const char *path);

#endif /* AORTA_CORE_CPU_PRIV_H */
