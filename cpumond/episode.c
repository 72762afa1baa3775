#include "cpumond/episode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/sampler.h"
#include "procfs/procfs.h"

int episode_init(struct episode *ep, pid_t pid, pid_t tid, int planned)
{
	memset(ep, 0, sizeof *ep);
	ep->pid = pid;
	ep->tid = tid;
	ep->planned = planned < 1 ? 1 : planned;
	ep->stop_ns = calloc((size_t)ep->planned, sizeof *ep->stop_ns);
	ep->stacks = calloc((size_t)ep->planned, sizeof *ep->stacks);
	if (!ep->stop_ns || !ep->stacks) {
		episode_free(ep);
		return -ENOMEM;
	}
	return 0;
}

void episode_free(struct episode *ep)
{
	for (size_t i = 0; i < ep->nstacks; i++)
		stackdump_stack_free(&ep->stacks[i].stack);
	free(ep->stacks);
	free(ep->stop_ns);
	ep->stacks = NULL;
	ep->stop_ns = NULL;
	ep->nstacks = 0;
}

int episode_add(struct episode *ep, struct stackdump_stack *stack)
{
	if (stack->nframes == 0 || episode_remaining(ep) == 0) {
		stackdump_stack_free(stack);
		memset(stack, 0, sizeof *stack);
		return 0;
	}
	ep->stop_ns[ep->taken++] = stack->stop_ns;
	for (size_t i = 0; i < ep->nstacks; i++) {
		if (ep->stacks[i].stack.hash == stack->hash) {
			ep->stacks[i].count++;
			stackdump_stack_free(stack);
			memset(stack, 0, sizeof *stack);
			return 0;
		}
	}
	/* At most `planned` distinct stacks: the array was sized for it. */
	ep->stacks[ep->nstacks].stack = *stack;
	ep->stacks[ep->nstacks].count = 1;
	ep->nstacks++;
	memset(stack, 0, sizeof *stack);
	return 0;
}

int episode_remaining(const struct episode *ep)
{
	return ep->planned - ep->taken - ep->skipped;
}

int episode_key(const struct episode *ep)
{
	int key = -1;

	/* Strictly greater: among equal counts the first seen stays. */
	for (size_t i = 0; i < ep->nstacks; i++)
		if (key < 0 || ep->stacks[i].count > ep->stacks[key].count)
			key = (int)i;
	return key;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

uint64_t episode_stop_median(const struct episode *ep)
{
	uint64_t *sorted;
	uint64_t median;

	if (ep->taken == 0)
		return 0;
	sorted = malloc((size_t)ep->taken * sizeof *sorted);
	if (!sorted)
		return episode_stop_max(ep);
	memcpy(sorted, ep->stop_ns, (size_t)ep->taken * sizeof *sorted);
	qsort(sorted, (size_t)ep->taken, sizeof *sorted, cmp_u64);
	median = sorted[(ep->taken - 1) / 2];
	free(sorted);
	return median;
}

uint64_t episode_stop_max(const struct episode *ep)
{
	uint64_t max = 0;

	for (int i = 0; i < ep->taken; i++)
		if (ep->stop_ns[i] > max)
			max = ep->stop_ns[i];
	return max;
}

bool episode_went_idle(uint64_t busy_ns, uint64_t elapsed_ns, bool runnable, int threshold)
{
	return !runnable && 2 * sampler_permille(busy_ns, elapsed_ns) < threshold;
}

int episode_thread_busy(pid_t pid, pid_t tid, uint64_t *busy_ns, bool *runnable)
{
	char buf[512];
	struct procfs_stat st;
	uint64_t run, delay;
	ssize_t n;
	int rc;

	if ((n = procfs_read_file(pid, tid, "schedstat", buf, sizeof buf)) < 0)
		return (int)n;
	if ((rc = sampler_parse_schedstat(buf, &run, &delay)) < 0)
		return rc;
	*busy_ns = run + delay;
	if ((rc = procfs_read_stat(pid, tid, &st)) < 0)
		return rc;
	*runnable = st.state == 'R';
	return 0;
}
