/* cpuwatch: another process's CPU, per cycle and as a share of one core,
 * with its memory and descriptors, measured from outside.
 *
 *   cpuwatch [--poll-ms MS] --skip-s S0 --seconds S --pid P
 *   cpuwatch [--poll-ms MS] --skip-s S0 --seconds S [--skip-bursts K] -- COMMAND [ARG...]
 *
 * The process's CPU clock (clock_getcpuclockid: all its threads, ns, no
 * privilege needed) is read S0 s after the start and again S s later: the
 * window's CPU, and its share of one core.  With a COMMAND, it is run first
 * (stdout to /dev/null), and ended with SIGTERM after the window if it is
 * still running; its whole CPU from wait4() is reported too.  A COMMAND
 * without --seconds runs to its end: only its whole CPU is reported.
 *
 * --poll-ms MS also polls the clock every MS and joins the polls in which it
 * grew into bursts: one per cycle of a program that samples every few
 * seconds, skipping the first K (start-up) and a last one cut by the end.
 * Polling disturbs what it measures (a CPU kept awake keeps its caches
 * warm): at 20 ms it made cpumond's 3 s cycle look 6x cheaper.  Use it
 * to see the shape, not for the numbers.
 *
 * One line of key=value on stdout:
 *   cpu_ms wall_s share_pct (CPU over the window / wall time, % of one core)
 *   bursts burst_med_us burst_p10_us burst_p90_us burst_max_us
 *   rss_kb anon_kb hwm_kb fds threads (at the last poll before the end)
 *   whole_cpu_ms (command mode)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t ns_of(clockid_t c, bool *ok)
{
	struct timespec ts;

	if (clock_gettime(c, &ts) < 0) {
		*ok = false;
		return 0;
	}
	*ok = true;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static uint64_t pct(uint64_t *v, size_t n, int p)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof *v, cmp_u64);
	return v[(n - 1) * (size_t)p / 100];
}

struct memfd { long rss, anon, hwm, fds, threads; };

static void read_mem(pid_t pid, struct memfd *m)
{
	char path[64], line[256];
	FILE *f;
	DIR *d;
	struct dirent *de;
	long fds = 0;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "re")))
		return;
	while (fgets(line, sizeof line, f)) {
		sscanf(line, "VmRSS: %ld", &m->rss);
		sscanf(line, "RssAnon: %ld", &m->anon);
		sscanf(line, "VmHWM: %ld", &m->hwm);
		sscanf(line, "Threads: %ld", &m->threads);
	}
	fclose(f);
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	if (!(d = opendir(path)))
		return;
	while ((de = readdir(d)))
		fds += de->d_name[0] != '.';
	closedir(d);
	m->fds = fds;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "poll-ms", required_argument, NULL, 'i' },
		{ "skip-s", required_argument, NULL, 's' },
		{ "seconds", required_argument, NULL, 'S' },
		{ "skip-bursts", required_argument, NULL, 'k' },
		{ 0 },
	};
	pid_t pid = 0;
	double skip_s = 0, seconds = 0;
	int poll_ms = 0, skip_bursts = 1, c;
	bool command;
	clockid_t clk;

	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'p': pid = atoi(optarg); break;
		case 'i': poll_ms = atoi(optarg); break;
		case 's': skip_s = atof(optarg); break;
		case 'S': seconds = atof(optarg); break;
		case 'k': skip_bursts = atoi(optarg); break;
		default: return 2;
		}
	}
	command = optind < argc;
	if (command == (pid > 0) || poll_ms < 0 || (!command && poll_ms == 0 && seconds <= 0)) {
		fprintf(stderr, "usage: cpuwatch [--poll-ms MS] [--skip-s S0] [--seconds S] --pid P\n"
		        "       cpuwatch [--poll-ms MS] [--skip-bursts K] -- COMMAND [ARG...]\n");
		return 2;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	if (command) {
		pid = fork();
		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY);
			dup2(null, 1);
			execvp(argv[optind], argv + optind);
			_exit(127);
		}
		skip_s = 0;
	}
	if (command && seconds <= 0 && poll_ms == 0) {
		/* No window: the whole run's CPU only, from wait4(). */
		struct rusage ru;
		int status;
		if (pid < 0 || wait4(pid, &status, 0, &ru) != pid)
			return 1;
		printf("whole_cpu_ms=%.3f\n", (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
		       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3);
		return 0;
	}
	if (pid < 0 || clock_getcpuclockid(pid, &clk) != 0) {
		fprintf(stderr, "cpuwatch: no process %d\n", (int)pid);
		return 1;
	}

	size_t cap = 1024, nb = 0;
	uint64_t *bursts = malloc(cap * sizeof *bursts);
	uint64_t t_start, t0 = 0, cpu0 = 0, prev, cur = 0, burst = 0, t_last = 0, cpu_last = 0;
	bool ok, in_burst = false, burst_valid = false, started = false;
	struct memfd mem = { 0 };
	int seen_bursts = 0;
	/* Without --poll-ms the clock is read twice only, at the ends of the
	 * window: polling keeps an otherwise idle CPU awake and its caches warm,
	 * and made the daemon's 3 s cycle look 6x cheaper than it is. */
	long step_ms = poll_ms ? poll_ms : (long)(skip_s * 1000);
	struct timespec ts = { step_ms / 1000, (step_ms % 1000) * 1000000 };

	t_start = ns_of(CLOCK_MONOTONIC, &ok);
	prev = ns_of(clk, &ok);
	double whole_ms = -1;
	bool reaped = false;
	while (!stop && ok) {
		uint64_t now;
		struct rusage ru;
		int status;

		nanosleep(&ts, NULL);
		/* A child that exited is a zombie whose clock still reads: reap it. */
		if (command && wait4(pid, &status, WNOHANG, &ru) == pid) {
			reaped = true;
			whole_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
			           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
			break;       /* the running burst is cut */
		}
		now = ns_of(CLOCK_MONOTONIC, &ok);
		cur = ns_of(clk, &ok);
		if (!ok)
			break;       /* exited: the running burst is cut */
		if (!started && (double)(now - t_start) >= skip_s * 1e9) {
			started = true;
			t0 = now;
			cpu0 = cur;
		}
		if (cur > prev) {
			if (!in_burst) {
				in_burst = true;
				burst = 0;
				burst_valid = started;
			}
			burst += cur - prev;
		} else if (in_burst) {
			in_burst = false;
			if (command && seen_bursts++ < skip_bursts)
				burst_valid = false;
			if (burst_valid) {
				if (nb == cap)
					bursts = realloc(bursts, (cap *= 2) * sizeof *bursts);
				bursts[nb++] = burst;
			}
		}
		prev = cur;
		if (started) {
			t_last = now;
			cpu_last = cur;
			if (poll_ms)
				read_mem(pid, &mem);
		}
		if (seconds > 0 && started && (double)(now - t0) >= seconds * 1e9) {
			read_mem(pid, &mem);
			break;
		}
		if (!poll_ms) {
			/* Next stop: the end of the window. */
			uint64_t end = t0 + (uint64_t)(seconds * 1e9), at = ns_of(CLOCK_MONOTONIC, &ok);
			uint64_t left = end > at ? end - at : 0;
			ts.tv_sec = (time_t)(left / 1000000000u);
			ts.tv_nsec = (long)(left % 1000000000u);
		}
	}
	if (command && !reaped) {
		int status;
		struct rusage ru;
		kill(pid, SIGTERM);
		if (wait4(pid, &status, 0, &ru) == pid)
			whole_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
			           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
	}
	double wall = (double)(t_last - t0) / 1e9, cpu_ms = (double)(cpu_last - cpu0) / 1e6;
	printf("cpu_ms=%.3f wall_s=%.2f share_pct=%.5f bursts=%zu burst_med_us=%.1f "
	       "burst_p10_us=%.1f burst_p90_us=%.1f burst_max_us=%.1f rss_kb=%ld anon_kb=%ld "
	       "hwm_kb=%ld fds=%ld threads=%ld",
	       cpu_ms, wall, wall > 0 ? cpu_ms / 1e3 / wall * 100 : 0, nb,
	       (double)pct(bursts, nb, 50) / 1e3, (double)pct(bursts, nb, 10) / 1e3,
	       (double)pct(bursts, nb, 90) / 1e3, (double)pct(bursts, nb, 100) / 1e3,
	       mem.rss, mem.anon, mem.hwm, mem.fds, mem.threads);
	if (command)
		printf(" whole_cpu_ms=%.3f", whole_ms);
	printf("\n");
	free(bursts);
	return 0;
}
