/* daemon: the sampling loop of `cpumond` (no command): runs in the
 * foreground until SIGTERM or SIGINT, reloads on SIGHUP. */
#ifndef CPUMOND_DAEMON_H
#define CPUMOND_DAEMON_H

/* Runs the daemon on the configuration at CONFIG_PATH; DATABASE, when not
 * NULL, replaces the configuration's database; MAX_CYCLES > 0 stops it after
 * that many sampling cycles.  log_init must have run.  Returns an exit
 * status of exit_status.h: 0 when stopped by a signal or after MAX_CYCLES,
 * EXIT_CONFIG, EXIT_DATABASE or EXIT_PROC when it cannot start. */
int daemon_main(const char *config_path, const char *database, long max_cycles);

#endif
