#include "cpumond/trigger.h"

#include <stdlib.h>
#include <string.h>

int trigger_starved_level(int usage, int demand, int threshold)
{
	return usage < 0 || demand < 0 || usage > threshold ? 0 : demand;
}

bool trigger_step(struct trigger_state *s, int usage, const struct trigger_rule *rule,
                  uint64_t now_ms)
{
	if (usage <= rule->threshold) {
		s->over = 0;
		return false;
	}
	if (s->over < rule->consecutive)
		s->over++;
	if (s->over < rule->consecutive)
		return false;
	if (s->fired && now_ms - s->fired_ms < rule->cooldown_ms)
		return false;
	s->fired = true;
	s->fired_ms = now_ms;
	return true;
}

bool trigger_state_live(const struct trigger_state *s, const struct trigger_rule *rule,
                        uint64_t now_ms)
{
	if (s->over > 0)
		return true;
	return s->fired && now_ms - s->fired_ms < rule->cooldown_ms;
}

struct trigger_entry {
	uint64_t key;
	bool seen;
	struct trigger_state state;
};

/* Sorted by key for bsearch; entries exist only for live states. */
struct trigger {
	struct trigger_entry *entries;
	size_t n, cap;
};

struct trigger *trigger_new(void)
{
	return calloc(1, sizeof(struct trigger));
}

void trigger_free(struct trigger *t)
{
	if (!t)
		return;
	free(t->entries);
	free(t);
}

/* Index of KEY, or of where it would be inserted. */
static size_t trigger_find(const struct trigger *t, uint64_t key)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->entries[mid].key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

bool trigger_observe(struct trigger *t, uint64_t key, int usage, const struct trigger_rule *rule,
                     uint64_t now_ms)
{
	size_t i = trigger_find(t, key);
	bool known = i < t->n && t->entries[i].key == key;
	struct trigger_state fresh = { 0 };
	bool fired;

	if (!known) {
		/* The common case: a thread under its threshold with no history
		 * costs one binary search and no memory. */
		fired = trigger_step(&fresh, usage, rule, now_ms);
		if (!trigger_state_live(&fresh, rule, now_ms))
			return fired;
		if (t->n == t->cap) {
			size_t cap = t->cap ? 2 * t->cap : 16;
			struct trigger_entry *e = realloc(t->entries, cap * sizeof *e);
			if (!e)
				return fired;   /* forgetting a state only delays an event */
			t->entries = e;
			t->cap = cap;
		}
		memmove(&t->entries[i + 1], &t->entries[i], (t->n - i) * sizeof t->entries[0]);
		t->entries[i] = (struct trigger_entry){ .key = key, .seen = true, .state = fresh };
		t->n++;
		return fired;
	}
	t->entries[i].seen = true;
	fired = trigger_step(&t->entries[i].state, usage, rule, now_ms);
	if (!trigger_state_live(&t->entries[i].state, rule, now_ms)) {
		t->n--;
		memmove(&t->entries[i], &t->entries[i + 1], (t->n - i) * sizeof t->entries[0]);
	}
	return fired;
}

size_t trigger_sweep(struct trigger *t)
{
	size_t kept = 0;

	for (size_t i = 0; i < t->n; i++) {
		if (!t->entries[i].seen)
			continue;
		t->entries[kept] = t->entries[i];
		t->entries[kept].seen = false;
		kept++;
	}
	t->n = kept;
	return kept;
}
