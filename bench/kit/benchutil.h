/* benchutil: clocks, percentiles and the descriptor limit for the programs
 * of bench/kit/ (header only; unwindbench uses it).  The programs directly
 * in bench/ link with cpumond's code and do not use it. */
#ifndef BENCHUTIL_H
#define BENCHUTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static inline uint64_t bu_clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
static inline uint64_t bu_mono_ns(void) { return bu_clock_ns(CLOCK_MONOTONIC); }
static inline uint64_t bu_proc_cpu_ns(void) { return bu_clock_ns(CLOCK_PROCESS_CPUTIME_ID); }

static inline uint64_t bu_tv_us(struct timeval tv)
{
    return (uint64_t)tv.tv_sec * 1000000ULL + (uint64_t)tv.tv_usec;
}

static int bu_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Percentile (0..100) of n values, nearest-rank; sorts v in place. */
static inline uint64_t bu_pct(uint64_t *v, size_t n, double p)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, bu_cmp_u64);
    size_t k = (size_t)(p / 100.0 * (double)n + 0.5);
    if (k >= 1) k--;
    if (k >= n) k = n - 1;
    return v[k];
}

static inline double bu_mean(const uint64_t *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)v[i];
    return n ? s / (double)n : 0;
}

static inline void bu_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

#endif
