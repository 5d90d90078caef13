/* SPDX-License-Identifier: MIT */
/*
 * Pool sizing: how many CPUs this process may really use, and the seed's
 * rule for I/O-bound pools.
 */
#ifndef AORTA_CORE_CPU_H
#define AORTA_CORE_CPU_H

#include <aorta/compiler.h>

/* Largest size ao_pool_size_io() returns. */
#define AO_POOL_SIZE_MAX 4096

/* CPUs this process may use: its affinity mask, capped by a cgroup v2
 * cpu.max quota (rounded up) on its cgroup or any ancestor; at least 1. */
AO_API unsigned int ao_cpu_count(void);
/* CPUs in this thread's affinity mask (no quota); at least 1. */
AO_API unsigned int ao_cpu_count_affinity(void);
/* The cgroup v2 quota in CPUs, rounded up; 0 if there is none. */
AO_API unsigned int ao_cpu_quota(void);
/* Workers for an I/O-bound pool: ao_cpu_count() * (1 + wait / compute),
 * rounded to nearest, in [1, AO_POOL_SIZE_MAX]; wait and compute in any
 * one unit.  Returns -EINVAL if compute <= 0 or wait < 0. */
AO_API int ao_pool_size_io(double wait, double compute);

#endif /* AORTA_CORE_CPU_H */
