/* schedstat_bench: what a kept-open schedstat saves the sampler.
 *
 *   schedstat_bench [-n READS]
 *
 * Reads this thread's /proc/self/task/TID/schedstat READS times (10,000 by
 * default) each way, in blocks of 100 that alternate so that both see the
 * same machine: open+read+close by path (what procfs_read_file does), and
 * pread at offset 0 of a descriptor kept open (what cpumond/sampler.c
 * does).  Each read is timed alone with CLOCK_MONOTONIC; prints the median
 * and the 90th percentile of each, in ns, and the ratio of the medians.
 * Back to back, so caches are warm: at the daemon's 3 s cadence both cost
 * more (bench/README.md, "Cadence matters").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 100

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* One read of PATH by path, or through FD when FD >= 0.  Returns its ns. */
static uint64_t one_read(const char *path, int fd)
{
	char buf[96];
	uint64_t t0 = now_ns();
	ssize_t n;

	if (fd >= 0) {
		n = pread(fd, buf, sizeof buf - 1, 0);
	} else {
		int f = open(path, O_RDONLY | O_CLOEXEC);

		n = f < 0 ? -1 : read(f, buf, sizeof buf - 1);
		if (f >= 0)
			close(f);
	}
	uint64_t t = now_ns() - t0;
	if (n <= 0) {
		fprintf(stderr, "schedstat_bench: cannot read %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return t;
}

static void print_row(const char *what, uint64_t *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_u64);
	printf("| %s | %zu | %llu | %llu |\n", what, n, (unsigned long long)v[n / 2],
	       (unsigned long long)v[n * 9 / 10]);
}

int main(int argc, char **argv)
{
	size_t reads = 10000;
	char path[64];
	uint64_t *by_path, *kept;
	int fd;

	if (argc == 3 && strcmp(argv[1], "-n") == 0 && atol(argv[2]) >= BLOCK)
		reads = (size_t)atol(argv[2]) / BLOCK * BLOCK;
	else if (argc != 1) {
		fprintf(stderr, "usage: schedstat_bench [-n READS]\n");
		return 2;
	}
	snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", (long)syscall(SYS_gettid));
	by_path = calloc(reads, sizeof *by_path);
	kept = calloc(reads, sizeof *kept);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!by_path || !kept || fd < 0) {
		perror("schedstat_bench");
		return 1;
	}
	one_read(path, -1);          /* warm-up */
	one_read(path, fd);
	for (size_t i = 0; i < reads; i += BLOCK) {
		for (size_t k = 0; k < BLOCK; k++)
			by_path[i + k] = one_read(path, -1);
		for (size_t k = 0; k < BLOCK; k++)
			kept[i + k] = one_read(path, fd);
	}
	printf("%s, %zu reads each way\n\n| method | reads | median ns | p90 ns |\n"
	       "|---|---|---|---|\n", path, reads);
	print_row("open+read+close", by_path, reads);
	print_row("pread, kept open", kept, reads);
	printf("open+read+close / pread, medians: %.1fx\n",
	       (double)by_path[reads / 2] / (double)(kept[reads / 2] ? kept[reads / 2] : 1));
	close(fd);
	free(by_path);
	free(kept);
	return 0;
}
