/* The exit statuses of cpumond's commands, documented in cpumond(8). */
#ifndef CPUMOND_EXIT_STATUS_H
#define CPUMOND_EXIT_STATUS_H

/* Exit statuses, documented in cpumond(8). */
enum {
	EXIT_OK = 0,
	EXIT_RUNTIME = 1,        /* failed while running (tail: database unreadable) */
	EXIT_USAGE = 2,          /* bad command line */
	EXIT_CONFIG = 3,         /* configuration file missing or invalid */
	EXIT_DATABASE = 4,       /* log database cannot be opened or created */
	EXIT_PROC = 5,           /* /proc cannot be read, or out of memory at start */
};

#endif
