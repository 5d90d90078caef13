// SPDX-License-Identifier: MIT
/*
 * How many CPUs this process may really use.
 *
 * sysconf(_SC_NPROCESSORS_ONLN) counts the machine; a process restricted by
 * taskset/cpuset sees fewer in its affinity mask, and a container limited
 * by a cgroup v2 quota (cpu.max "quota period") gets quota/period CPUs of
 * time however many it may run on.  A pool sized to the machine in such a
 * container only adds context switches, so ao_cpu_count() takes the least
 * of the mask and the quota (rounded up) of the process's cgroup and every
 * ancestor.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <aorta/core/cpu.h>
#include "cpu_priv.h"

#define CGROUP2_ROOT "/sys/fs/cgroup"

unsigned int ao_cpu_count_affinity(void)
{
	cpu_set_t set;
	int n;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 1;
	n = CPU_COUNT(&set);
	return n > 0 ? (unsigned int)n : 1;
}

unsigned int ao__cpu_max_parse(const char *line)
{
	unsigned long long quota, period;
	char *end;

	if (!line || strncmp(line, "max", 3) == 0)
		return 0;
	errno = 0;
	quota = strtoull(line, &end, 10);
	if (errno || end == line || *end != ' ')
		return 0;
	line = end + 1;
	period = strtoull(line, &end, 10);
	if (errno || end == line || period == 0 || quota == 0)
		return 0;
	quota = (quota + period - 1) / period;
	return quota > UINT_MAX ? UINT_MAX : (unsigned int)quota;
}

static unsigned int read_cpu_max(const char *root, const char *path)
{
	char file[PATH_MAX], line[128];
	unsigned int q = 0;
	FILE *f;

	if (snprintf(file, sizeof(file), "%s%s/cpu.max", root, path) >=
	    (int)sizeof(file))
		return 0;
	f = fopen(file, "re");
	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f))
		q = ao__cpu_max_parse(line);
	fclose(f);
	return q;
}

unsigned int ao__cpu_quota_at(const char *root, const char *path)
{
	char p[PATH_MAX];
	unsigned int best = 0;
	size_t len;

	len = strlen(path);
	if (len >= sizeof(p))
		return 0;
	memcpy(p, path, len + 1);
	/* Strip a trailing slash, then walk up: /a/b, /a, "" (the root). */
	while (len > 0 && p[len - 1] == '/')
		p[--len] = '\0';
	for (;;) {
		unsigned int q = read_cpu_max(root, p);
		char *slash;

		if (q && (!best || q < best))
			best = q;
		if (len == 0)
			break;
		slash = strrchr(p, '/');
		if (!slash)
			break;
		*slash = '\0';
		len = (size_t)(slash - p);
	}
	return best;
}

unsigned int ao_cpu_quota(void)
{
	char line[PATH_MAX + 8];
	unsigned int q = 0;
	FILE *f;

	f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return 0;
	/* cgroup v2 is the line with hierarchy id 0 and no controllers. */
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			q = ao__cpu_quota_at(CGROUP2_ROOT, line + 3);
			break;
		}
	}
	fclose(f);
	return q;
}

unsigned int ao_cpu_count(void)
{
	unsigned int n = ao_cpu_count_affinity();
	unsigned int q = ao_cpu_quota();

	return q && q < n ? q : n;
}

int ao_pool_size_io(double wait, double compute)
{
	double n;

	/* !(x > 0) also refuses NaN. */
	if (!(compute > 0) || !(wait >= 0))
		return -EINVAL;
	n = (double)ao_cpu_count() * (1.0 + wait / compute) + 0.5;
	if (n > (double)AO_POOL_SIZE_MAX)
		return AO_POOL_SIZE_MAX;
	return n < 1 ? 1 : (int)n;
}
