/* kind: what made an event, the one list of them.
 *
 * Every kind keeps the trigger's N-over-T rule (`consecutive`) and
 * `cooldown`, is a row of the events table with its name in `kind`, and is
 * counted under its name in the metrics' `kind` label.  A new kind is one
 * more line of KIND_LIST; its name is what the database, tail, report
 * --kind, the journal (CPUMOND_KIND) and the metrics say.
 *   hot      a thread over its threshold
 *   starved  a thread whose demand (run time plus run-queue wait) is over
 *            its threshold while its run time is not
 *   process  a process whose threads together are over process_threshold
 *   stall    a thread that has not run for stall_after, not in an idle
 *            wait (stall.h)
 */
#ifndef CPUMOND_KIND_H
#define CPUMOND_KIND_H

#define KIND_LIST(X) \
	X(KIND_HOT, "hot") \
	X(KIND_STARVED, "starved") \
	X(KIND_PROCESS, "process") \
	X(KIND_STALL, "stall")

#define KIND_ENUM_ENTRY(id, name) id,
enum kind { KIND_LIST(KIND_ENUM_ENTRY) KIND_COUNT };
#undef KIND_ENUM_ENTRY

/* The name of K ("hot"); "hot" for a value out of range. */
const char *kind_name(enum kind k);

/* The kind named NAME (exactly), or -1. */
int kind_from_name(const char *name);

/* "hot, starved or process": every name, for messages. */
const char *kind_names_text(void);

#endif
