/* unwindbench: cost of stopping ONE thread with ptrace and unwinding its user
 * stack with libunwind-ptrace while it is stopped.
 *
 * Part of bench/kit/, the measurement kit bench/ keeps with it.
 * bench/stop_bench.py runs its floor mode (interrupt, waitpid, GETREGS,
 * detach: the cheapest ptrace stop there is) next to cpumond's own stop.
 * The other modes measure what unwinding during the stop costs, which is
 * why cpumond only copies the stack while the thread is stopped and
 * unwinds the copy after it runs again (bench/README.md, section 7).
 * Built by make bench into $(B)/bench/unwindbench.
 *
 *   unwindbench --tid T [--mode MODE[,MODE...]] [--reps R] [--gap-ms G]
 *               [--names none|stopped|after] [--print] [--windows FILE]
 *
 * One dump = PTRACE_SEIZE, then (timed "stop" window) PTRACE_INTERRUPT,
 * waitpid(__WALL), the work of MODE, PTRACE_DETACH.  MODE:
 *   floor  PTRACE_GETREGS only (the cheapest possible stop)
 *   copy   PTRACE_GETREGS + process_vm_readv of 16 KiB of stack from rsp
 *          (the "copy now, unwind offline" design)
 *   cold   new unw_addr_space + _UPT_create per dump, unwind, destroy both
 *   warm   one unw_addr_space (UNW_CACHE_GLOBAL) for the run; _UPT_create /
 *          _UPT_destroy per dump
 *   reuse  one addr space and one _UPT handle kept for the same TID across
 *          dumps (libunwind keeps the ELF/unwind-table cache of the UPT handle)
 * --names stopped  resolve unw_get_proc_name for every frame while stopped
 * --names after    resolve names after PTRACE_DETACH (_UPT_get_proc_name,
 *                  which needs only /proc/PID/maps and the ELF files)
 * --print          print the frames (ip, name+off) of the first dump of each mode
 * --windows FILE   append "win MODE t_interrupt_ns t_detach_ns" lines
 *                  (CLOCK_MONOTONIC) so they can be matched against pausemeter
 * Output per mode: one key=value line; times in microseconds; bad_ip_dumps =
 * dumps with at least one frame whose IP is in no executable mapping of the
 * target (a wrong unwind step).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <libunwind-ptrace.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"

#define MAXF 128

enum { M_FLOOR, M_COPY, M_COLD, M_WARM, M_REUSE, M_N };
static const char *mode_names[] = { "floor", "copy", "cold", "warm", "reuse" };
enum { N_NONE, N_STOPPED, N_AFTER };
static const char *names_names[] = { "none", "stopped", "after" };

static pid_t tid;
static int names_mode = N_NONE, do_print;
static FILE *winf;

struct frame { unw_word_t ip; char name[96]; unw_word_t off; int named; };

static unw_addr_space_t warm_as;
static void *reuse_upt;

/* executable mappings of the target, to flag frames whose IP is not code */
static struct { unsigned long lo, hi; } xmaps[4096];
static int nxmaps;

static void load_xmaps(void)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f) && nxmaps < 4096) {
        unsigned long lo, hi;
        char perm[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) == 3 && perm[2] == 'x') {
            xmaps[nxmaps].lo = lo;
            xmaps[nxmaps].hi = hi;
            nxmaps++;
        }
    }
    fclose(f);
}

static int ip_is_code(unw_word_t ip)
{
    for (int i = 0; i < nxmaps; i++)
        if (ip >= xmaps[i].lo && ip < xmaps[i].hi) return 1;
    return 0;
}

/* returns frames found (>=0) or -1; fills times */
static int last_bad; /* frames of the last dump whose IP is not in an executable mapping */

static int one_dump(int mode, uint64_t *stop_ns, uint64_t *cpu_ns, struct frame *fr, int print)
{
    uint64_t c0 = bu_proc_cpu_ns();
    if (ptrace(PTRACE_SEIZE, tid, 0, 0) < 0) {
        fprintf(stderr, "PTRACE_SEIZE %d: %s\n", tid, strerror(errno));
        return -1;
    }
    uint64_t t0 = bu_mono_ns();
    if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0) {
        fprintf(stderr, "PTRACE_INTERRUPT: %s\n", strerror(errno));
        ptrace(PTRACE_DETACH, tid, 0, 0);
        return -1;
    }
    int st, sig = 0;
    for (;;) {
        pid_t w = waitpid(tid, &st, __WALL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) { fprintf(stderr, "waitpid: %s\n", strerror(errno)); return -1; }
        if (WIFSTOPPED(st)) {
            if ((st >> 16) == PTRACE_EVENT_STOP) break;
            /* signal-delivery-stop: remember the signal, re-inject at detach */
            sig = WSTOPSIG(st);
            break;
        }
        if (WIFEXITED(st) || WIFSIGNALED(st)) return -1;
    }

    int nf = 0;
    unw_addr_space_t as = NULL;
    void *upt = NULL;
    if (mode == M_FLOOR || mode == M_COPY) {
        struct user_regs_struct regs;
        ptrace(PTRACE_GETREGS, tid, 0, &regs);
        fr[0].ip = regs.rip;
        nf = 1;
        if (mode == M_COPY) {
            static char stackbuf[16384];
            struct iovec local = { stackbuf, sizeof stackbuf };
            struct iovec remote = { (void *)regs.rsp, sizeof stackbuf };
            ssize_t n = process_vm_readv(tid, &local, 1, &remote, 1, 0);
            if (n < 0) { /* the stack may end before 16 KiB: retry up to the page end */
                remote.iov_len = 4096 - (regs.rsp & 4095);
                local.iov_len = remote.iov_len;
                process_vm_readv(tid, &local, 1, &remote, 1, 0);
            }
        }
    } else {
        if (mode == M_COLD) {
            as = unw_create_addr_space(&_UPT_accessors, 0);
            upt = _UPT_create(tid);
        } else if (mode == M_WARM) {
            as = warm_as;
            upt = _UPT_create(tid);
        } else {
            as = warm_as;
            if (!reuse_upt) reuse_upt = _UPT_create(tid);
            upt = reuse_upt;
        }
        unw_cursor_t cur;
        if (unw_init_remote(&cur, as, upt) == 0) {
            do {
                unw_word_t ip = 0;
                unw_get_reg(&cur, UNW_REG_IP, &ip);
                fr[nf].ip = ip;
                fr[nf].named = 0;
                if (names_mode == N_STOPPED) {
                    fr[nf].named = unw_get_proc_name(&cur, fr[nf].name, sizeof fr[nf].name,
                                                     &fr[nf].off) == 0;
                }
                nf++;
            } while (nf < MAXF && unw_step(&cur) > 0);
        }
    }
    ptrace(PTRACE_DETACH, tid, 0, (void *)(long)sig);
    uint64_t t1 = bu_mono_ns();

    if (mode >= M_COLD && (names_mode == N_AFTER || print)) {
        for (int i = 0; i < nf; i++) {
            if (fr[i].named) continue;
            /* return addresses point after the call: look up ip-1 for callers */
            unw_word_t ip = i ? fr[i].ip - 1 : fr[i].ip;
            fr[i].named = _UPT_get_proc_name(as, ip, fr[i].name, sizeof fr[i].name, &fr[i].off,
                                             upt) == 0;
            if (fr[i].named && i) fr[i].off += 1;
        }
    }
    if (mode == M_COLD) {
        _UPT_destroy(upt);
        unw_destroy_addr_space(as);
    } else if (mode == M_WARM) {
        _UPT_destroy(upt);
    }
    *stop_ns = t1 - t0;
    *cpu_ns = bu_proc_cpu_ns() - c0;
    last_bad = 0;
    for (int i = 0; i < nf; i++) last_bad += !ip_is_code(fr[i].ip);
    if (winf) fprintf(winf, "win %s %llu %llu\n", mode_names[mode], (unsigned long long)t0,
                      (unsigned long long)t1);
    if (print) {
        printf("frames mode=%s tid=%d n=%d%s\n", mode_names[mode], tid, nf,
               sig ? " (signal-delivery-stop)" : "");
        for (int i = 0; i < nf; i++)
            printf("  #%-2d 0x%012llx %s+0x%llx%s\n", i, (unsigned long long)fr[i].ip,
                   fr[i].named ? fr[i].name : "??", (unsigned long long)(fr[i].named ? fr[i].off : 0),
                   ip_is_code(fr[i].ip) ? "" : "   <-- IP not in any executable mapping");
    }
    return nf;
}

static void usage(void)
{
    fprintf(stderr, "usage: unwindbench --tid T [--mode floor,copy,cold,warm,reuse|all] [--reps R] "
                    "[--gap-ms G] [--names none|stopped|after] [--print] [--windows FILE]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int reps = 20, modes[M_N] = { 0 }, any = 0;
    double gap_ms = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tid") && v) tid = atoi(v), i++;
        else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(a, "--gap-ms") && v) gap_ms = atof(v), i++;
        else if (!strcmp(a, "--print")) do_print = 1;
        else if (!strcmp(a, "--windows") && v) { winf = fopen(v, "a"); i++; }
        else if (!strcmp(a, "--names") && v) {
            names_mode = -1;
            for (int k = 0; k < 3; k++) if (!strcmp(v, names_names[k])) names_mode = k;
            if (names_mode < 0) usage();
            i++;
        } else if (!strcmp(a, "--mode") && v) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int found = 0;
                for (int k = 0; k < M_N; k++)
                    if (!strcmp(tok, mode_names[k]) || !strcmp(tok, "all")) modes[k] = 1, found = 1;
                if (!found) usage();
            }
            any = 1;
            i++;
        } else usage();
    }
    if (!tid || reps < 1) usage();
    if (!any) for (int k = 0; k < M_N; k++) modes[k] = 1;

    load_xmaps();
    warm_as = unw_create_addr_space(&_UPT_accessors, 0);
    unw_set_caching_policy(warm_as, UNW_CACHE_GLOBAL);

    uint64_t *stop = calloc((size_t)reps, sizeof *stop), *cpu = calloc((size_t)reps, sizeof *cpu),
             *nfs = calloc((size_t)reps, sizeof *nfs);
    static struct frame fr[MAXF];
    struct timespec gap = { (time_t)(gap_ms / 1000), (long)((gap_ms - 1000 * (long)(gap_ms / 1000)) * 1e6) };
    for (int m = 0; m < M_N; m++) {
        if (!modes[m]) continue;
        int ok = 0, bad_dumps = 0;
        uint64_t first_stop = 0;
        for (int r = 0; r < reps; r++) {
            if (gap_ms > 0) nanosleep(&gap, NULL);
            uint64_t s, c;
            int nf = one_dump(m, &s, &c, fr, do_print && r == 0);
            if (nf < 0) continue;
            if (!ok) first_stop = s;
            bad_dumps += last_bad > 0;
            stop[ok] = s;
            cpu[ok] = c;
            nfs[ok] = (uint64_t)nf;
            ok++;
        }
        if (!ok) { printf("tool=unwindbench mode=%s tid=%d error=1\n", mode_names[m], tid); continue; }
        printf("tool=unwindbench mode=%s names=%s tid=%d reps=%d stop_first_us=%.1f stop_min_us=%.1f "
               "stop_med_us=%.1f stop_p99_us=%.1f stop_max_us=%.1f cpu_med_us=%.1f frames_min=%llu "
               "frames_med=%llu frames_max=%llu bad_ip_dumps=%d\n",
               mode_names[m], names_names[names_mode], tid, ok, first_stop / 1e3,
               bu_pct(stop, ok, 0) / 1e3, bu_pct(stop, ok, 50) / 1e3, bu_pct(stop, ok, 99) / 1e3,
               bu_pct(stop, ok, 100) / 1e3, bu_pct(cpu, ok, 50) / 1e3,
               (unsigned long long)bu_pct(nfs, ok, 0), (unsigned long long)bu_pct(nfs, ok, 50),
               (unsigned long long)bu_pct(nfs, ok, 100), bad_dumps);
        fflush(stdout);
    }
    if (reuse_upt) _UPT_destroy(reuse_upt);
    unw_destroy_addr_space(warm_as);
    if (winf) fclose(winf);
    return 0;
}
