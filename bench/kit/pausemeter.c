/* pausemeter: measures, from the target's own point of view, how long an
 * external tool stops its threads.
 *
 * Part of bench/kit/, the measurement kit bench/ keeps with it: the target
 * of bench/stop_bench.py, which pairs each dump's window (stop_bench,
 * unwindbench, eu-stack, gdb) with the gaps this program's hot thread saw.
 * Built by make bench into $(B)/bench/pausemeter.
 *
 *   pausemeter --out FILE [--hot H] [--sleepers S] [--bystander 0|1]
 *              [--thresh-us T] [--ready FILE] [--timeout SEC]
 *
 * Threads:
 *   hot-<i>   (H of them, default 1): spin reading clock_gettime(CLOCK_MONOTONIC)
 *             in the chain pm_hot_loop <- pm_hot_root <- pm_hot_main and record
 *             every gap between two consecutive reads: max, log2 histogram,
 *             count of gaps > 100 us, and every gap > T us (default 20) with its
 *             start time (CLOCK_MONOTONIC ns) in a ring of 65536 entries.
 *   bystander (default on): sleeps 1 ms at a time (clock_nanosleep) and records
 *             its lateness (how much longer than 1 ms each sleep took) the same
 *             way; shows whether a tool stops threads other than the one it
 *             dumps.
 *   sleep-<i> (S of them): block in pthread_cond_wait forever (give a debugger
 *             threads to walk).
 *   main      waits for signals.
 *
 * On SIGUSR1 (after a 20 ms settle so a just-resumed thread can record its
 * gap) and on SIGTERM/SIGINT (then exit) it writes FILE (via FILE.tmp + rename):
 *   seq=<n>
 *   meter <name> tid=<tid> reads=<n> max_gap_ns=<n> gt100us=<n> gt1ms=<n> window_ns=<n>
 *   hist <name> <bucket-upper-ns>:<count> ...
 *   gap <name> <start_ns> <len_ns>         (one per recorded gap > T, oldest first)
 * SIGUSR2 resets every counter and the gap rings (a new measurement window).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING 65536
#define NBUCKET 40

struct gap { uint64_t start, len; };

struct meter {
    char name[16];
    pid_t tid;
    _Atomic uint64_t reads, max_gap, gt100us, gt1ms, window_start;
    _Atomic uint64_t hist[NBUCKET];
    _Atomic uint64_t ngaps;          /* total recorded since reset (ring index) */
    struct gap ring[RING];
    int seen_gen;
};

static int nhot = 1, nsleepers = 0, bystander = 1;
static uint64_t thresh_ns = 20000;
static double timeout_s = 600;
static const char *out_file, *ready_file;
static struct meter *meters; /* nhot hot meters, then the bystander */
static int nmeters;
static atomic_int gen;       /* bumped by SIGUSR2 */
static atomic_int started;
static pthread_mutex_t never_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never_cv = PTHREAD_COND_INITIALIZER;

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline int bucket_of(uint64_t d)
{
    int b = d ? 64 - __builtin_clzll(d) : 0; /* d < 2^b */
    return b < NBUCKET ? b : NBUCKET - 1;
}

static void meter_reset(struct meter *m, uint64_t now)
{
    atomic_store(&m->reads, 0);
    atomic_store(&m->max_gap, 0);
    atomic_store(&m->gt100us, 0);
    atomic_store(&m->gt1ms, 0);
    for (int i = 0; i < NBUCKET; i++) atomic_store(&m->hist[i], 0);
    atomic_store(&m->ngaps, 0);
    atomic_store(&m->window_start, now);
}

static inline void meter_record(struct meter *m, uint64_t start, uint64_t d)
{
    atomic_store_explicit(&m->reads, atomic_load_explicit(&m->reads, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    int b = bucket_of(d);
    atomic_store_explicit(&m->hist[b], atomic_load_explicit(&m->hist[b], memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (d > atomic_load_explicit(&m->max_gap, memory_order_relaxed))
        atomic_store_explicit(&m->max_gap, d, memory_order_relaxed);
    if (d > 100000) atomic_fetch_add_explicit(&m->gt100us, 1, memory_order_relaxed);
    if (d > 1000000) atomic_fetch_add_explicit(&m->gt1ms, 1, memory_order_relaxed);
    if (d > thresh_ns) {
        uint64_t n = atomic_load_explicit(&m->ngaps, memory_order_relaxed);
        m->ring[n % RING].start = start;
        m->ring[n % RING].len = d;
        atomic_store_explicit(&m->ngaps, n + 1, memory_order_release);
    }
}

/* Global and not inlined, so that every tool under test names the chain the
 * same way (stop_bench counts the stacks that name pm_hot_loop). */
void pm_hot_loop(struct meter *m);
void pm_hot_root(struct meter *m);

__attribute__((noinline)) void pm_hot_loop(struct meter *m)
{
    uint64_t prev = now_ns();
    for (;;) {
        uint64_t t = now_ns();
        int g = atomic_load_explicit(&gen, memory_order_relaxed);
        if (g != m->seen_gen) {
            m->seen_gen = g;
            meter_reset(m, t);
            prev = t;
            continue;
        }
        meter_record(m, prev, t - prev);
        prev = t;
    }
}

__attribute__((noinline)) void pm_hot_root(struct meter *m)
{
    pm_hot_loop(m);
    __asm__ volatile("" ::: "memory");
}

/* The start of every measuring thread: its tid and name, a fresh window. */
static void meter_thread_start(struct meter *m)
{
    m->tid = (pid_t)syscall(SYS_gettid);
    pthread_setname_np(pthread_self(), m->name);
    meter_reset(m, now_ns());
    atomic_fetch_add(&started, 1);
}

__attribute__((noinline)) static void *pm_hot_main(void *arg)
{
    struct meter *m = arg;
    meter_thread_start(m);
    pm_hot_root(m);
    return NULL;
}

__attribute__((noinline)) static void *pm_bystander_main(void *arg)
{
    struct meter *m = arg;
    meter_thread_start(m);
    const uint64_t period = 1000000; /* 1 ms */
    for (;;) {
        uint64_t t0 = now_ns();
        struct timespec ts = { 0, (long)period };
        clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
        uint64_t t1 = now_ns();
        int g = atomic_load_explicit(&gen, memory_order_relaxed);
        if (g != m->seen_gen) {
            m->seen_gen = g;
            meter_reset(m, t1);
            continue;
        }
        uint64_t late = t1 - t0 > period ? t1 - t0 - period : 0;
        meter_record(m, t0, late);
    }
    return NULL;
}

__attribute__((noinline)) static void *pm_sleeper_main(void *arg)
{
    char name[16];
    snprintf(name, sizeof name, "sleep-%d", (int)(long)arg);
    pthread_setname_np(pthread_self(), name);
    atomic_fetch_add(&started, 1);
    pthread_mutex_lock(&never_mu);
    for (;;)
        pthread_cond_wait(&never_cv, &never_mu);
    return NULL;
}

static void write_results(int seq)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_file);
    FILE *f = fopen(tmp, "w");
    if (!f) { perror(tmp); return; }
    uint64_t now = now_ns();
    fprintf(f, "seq=%d\nnow_ns=%llu\nthresh_ns=%llu\n", seq, (unsigned long long)now,
            (unsigned long long)thresh_ns);
    for (int i = 0; i < nmeters; i++) {
        struct meter *m = &meters[i];
        fprintf(f, "meter %s tid=%d reads=%llu max_gap_ns=%llu gt100us=%llu gt1ms=%llu window_ns=%llu\n",
                m->name, (int)m->tid, (unsigned long long)atomic_load(&m->reads),
                (unsigned long long)atomic_load(&m->max_gap),
                (unsigned long long)atomic_load(&m->gt100us),
                (unsigned long long)atomic_load(&m->gt1ms),
                (unsigned long long)(now - atomic_load(&m->window_start)));
        fprintf(f, "hist %s", m->name);
        for (int b = 0; b < NBUCKET; b++) {
            uint64_t c = atomic_load(&m->hist[b]);
            if (c) fprintf(f, " %llu:%llu", b ? 1ULL << b : 1ULL, (unsigned long long)c);
        }
        fputc('\n', f);
        uint64_t n = atomic_load_explicit(&m->ngaps, memory_order_acquire);
        uint64_t first = n > RING ? n - RING : 0;
        for (uint64_t k = first; k < n; k++)
            fprintf(f, "gap %s %llu %llu\n", m->name, (unsigned long long)m->ring[k % RING].start,
                    (unsigned long long)m->ring[k % RING].len);
    }
    fclose(f);
    rename(tmp, out_file);
}

static void usage(void)
{
    fprintf(stderr, "usage: pausemeter --out FILE [--hot H] [--sleepers S] [--bystander 0|1] "
                    "[--thresh-us T] [--ready FILE] [--timeout SEC]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--out") && v) out_file = v, i++;
        else if (!strcmp(a, "--hot") && v) nhot = atoi(v), i++;
        else if (!strcmp(a, "--sleepers") && v) nsleepers = atoi(v), i++;
        else if (!strcmp(a, "--bystander") && v) bystander = atoi(v), i++;
        else if (!strcmp(a, "--thresh-us") && v) thresh_ns = (uint64_t)(atof(v) * 1000), i++;
        else if (!strcmp(a, "--ready") && v) ready_file = v, i++;
        else if (!strcmp(a, "--timeout") && v) timeout_s = atof(v), i++;
        else usage();
    }
    if (!out_file || nhot < 1) usage();

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    nmeters = nhot + (bystander ? 1 : 0);
    meters = calloc((size_t)nmeters, sizeof *meters);
    for (int i = 0; i < nhot; i++) snprintf(meters[i].name, sizeof meters[i].name, "hot-%d", i);
    if (bystander) snprintf(meters[nhot].name, sizeof meters[nhot].name, "bystander");

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    for (int i = 0; i < nhot; i++) pthread_create(&t, &attr, pm_hot_main, &meters[i]);
    if (bystander) pthread_create(&t, &attr, pm_bystander_main, &meters[nhot]);
    for (int i = 0; i < nsleepers; i++) pthread_create(&t, &attr, pm_sleeper_main, (void *)(long)i);
    int want = nmeters + nsleepers;
    while (atomic_load(&started) < want) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }

    char text[4096];
    int len = snprintf(text, sizeof text, "pid %d\n", (int)getpid());
    for (int i = 0; i < nhot; i++)
        len += snprintf(text + len, sizeof text - len, "hot_tid %d\n", (int)meters[i].tid);
    if (bystander)
        len += snprintf(text + len, sizeof text - len, "bystander_tid %d\n", (int)meters[nhot].tid);
    fputs(text, stdout);
    fflush(stdout);
    if (ready_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", ready_file);
        FILE *f = fopen(tmp, "w");
        if (f) { fputs(text, f); fclose(f); rename(tmp, ready_file); }
    }

    uint64_t deadline = now_ns() + (uint64_t)(timeout_s * 1e9);
    int seq = 0;
    for (;;) {
        uint64_t now = now_ns();
        if (now >= deadline) { write_results(++seq); return 0; }
        uint64_t left = deadline - now;
        struct timespec to = { (time_t)(left / 1000000000ULL), (long)(left % 1000000000ULL) };
        int sig = sigtimedwait(&set, NULL, &to);
        if (sig == SIGUSR1) {
            struct timespec settle = { 0, 20000000 };
            nanosleep(&settle, NULL);
            write_results(++seq);
        } else if (sig == SIGUSR2) {
            atomic_fetch_add(&gen, 1);
        } else if (sig == SIGTERM || sig == SIGINT) {
            write_results(++seq);
            return 0;
        }
    }
}
