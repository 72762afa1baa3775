/* churn: a target that starts and ends threads all the time, for the
 * sampler's thread-churn benchmark (bench/churn.sh).
 *
 *   churn [--rate R] [--life-ms MIN:MAX] [--hot K] [--log FILE] [--timeout S]
 *
 * Starts R idle threads per second (default 1000), each sleeping a random
 * MIN..MAX ms (default 500:5500) and then exiting; K of the threads (default
 * 1) burn CPU instead, and each hot one that ends is replaced by another.
 * Threads are named "idle" and "hot".  Prints "pid P" and "ready", flushing
 * stdout, once the first threads run; exits on SIGTERM or SIGINT or after S
 * seconds (default 600).
 *
 * --log FILE appends one line per thread start and end, for checking what a
 * sampler said about each tid against what really ran under it:
 *   b TID KIND NS   the thread TID of KIND (idle/hot) exists since before NS
 *   e TID KIND NS   ... and is gone, or about to go, after NS
 * (CLOCK_MONOTONIC; NS of "b" is taken before pthread_create, NS of "e" just
 * before the thread returns, so [b, e] covers the thread's whole life).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "number.h"

static int log_fd = -1;
static int life_min = 500, life_max = 5500;
static atomic_int hot_wanted, hot_running;
static volatile uint64_t sink;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One line per write: O_APPEND makes each one atomic. */
static void log_line(char kind, pid_t tid, const char *what, uint64_t ns)
{
	char line[80];
	int n;

	if (log_fd < 0)
		return;
	n = snprintf(line, sizeof line, "%c %d %s %llu\n", kind, (int)tid, what,
	             (unsigned long long)ns);
	if (write(log_fd, line, (size_t)n) != n)
		abort();
}

struct start { uint64_t born_ns; int life_ms; int hot; };

static void *thread_main(void *arg)
{
	struct start st = *(struct start *)arg;
	const char *kind = st.hot ? "hot" : "idle";
	pid_t tid = gettid();

	free(arg);
	pthread_setname_np(pthread_self(), kind);
	log_line('b', tid, kind, st.born_ns);
	if (st.hot) {
		uint64_t end = mono_ns() + (uint64_t)st.life_ms * 1000000u, x = (uint64_t)tid;
		while (mono_ns() < end) {
			for (int i = 0; i < 100000; i++)
				x = x * 6364136223846793005ull + 1442695040888963407ull;
			sink = x;
		}
		atomic_fetch_sub(&hot_running, 1);
	} else {
		struct timespec ts = { st.life_ms / 1000, (long)(st.life_ms % 1000) * 1000000 };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	log_line('e', tid, kind, mono_ns());
	return NULL;
}

static int start_thread(pthread_attr_t *attr, int hot)
{
	struct start *st = malloc(sizeof *st);
	pthread_t t;
	int r;

	if (!st)
		return ENOMEM;
	st->born_ns = mono_ns();
	st->life_ms = life_min + rand() % (life_max - life_min + 1);
	st->hot = hot;
	r = pthread_create(&t, attr, thread_main, st);
	if (r != 0)
		free(st);
	return r;
}

/* A whole number in LO..HI for option WHAT, or exit 2. */
static int number(const char *s, int lo, int hi, const char *what)
{
	return target_number("churn", s, lo, hi, what);
}

int main(int argc, char **argv)
{
	int rate = 1000, timeout = 600;
	const char *log_path = NULL;
	sigset_t sigs;
	pthread_attr_t attr;

	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc) {
			fputs("usage: churn [--rate R] [--life-ms MIN:MAX] [--hot K] [--log FILE] "
			      "[--timeout S]\n", stderr);
			return 2;
		}
		if (strcmp(argv[i], "--rate") == 0) {
			rate = number(argv[++i], 1, 100000, "--rate");
		} else if (strcmp(argv[i], "--hot") == 0) {
			atomic_store(&hot_wanted, number(argv[++i], 0, 64, "--hot"));
		} else if (strcmp(argv[i], "--timeout") == 0) {
			timeout = number(argv[++i], 1, 86400, "--timeout");
		} else if (strcmp(argv[i], "--log") == 0) {
			log_path = argv[++i];
		} else if (strcmp(argv[i], "--life-ms") == 0) {
			char *colon = strchr(argv[++i], ':');
			if (!colon) {
				fprintf(stderr, "churn: --life-ms wants MIN:MAX\n");
				return 2;
			}
			*colon = '\0';
			life_min = number(argv[i], 1, 3600000, "--life-ms MIN");
			life_max = number(colon + 1, life_min, 3600000, "--life-ms MAX");
		} else {
			fprintf(stderr, "churn: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (log_path && (log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC | O_CLOEXEC,
	                               0644)) < 0) {
		perror(log_path);
		return 1;
	}
	srand((unsigned)getpid());
	log_line('b', getpid(), "main", 0);   /* lives through the whole run */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);

	/* The main thread paces the starts in 10 ms steps and takes the
	 * signals between them. */
	uint64_t t0 = mono_ns(), started = 0;
	bool announced = false;
	for (;;) {
		uint64_t now = mono_ns();
		uint64_t due = (now - t0) / 1000000u * (uint64_t)rate / 1000u;
		struct timespec step = { 0, 10 * 1000000 };
		siginfo_t si;

		while (atomic_load(&hot_running) < atomic_load(&hot_wanted)) {
			atomic_fetch_add(&hot_running, 1);
			if (start_thread(&attr, 1) != 0)
				atomic_fetch_sub(&hot_running, 1);
		}
		for (; started < due; started++)
			if (start_thread(&attr, 0) != 0)
				break;    /* out of threads for now: try again at the next step */
		if (!announced) {
			printf("pid %d\nready\n", (int)getpid());
			fflush(stdout);
			announced = true;
		}
		if (now - t0 >= (uint64_t)timeout * 1000000000u)
			break;
		if (sigtimedwait(&sigs, &si, &step) > 0)
			break;
	}
	return 0;
}
