/* config: what config.c and config_units.c share, not part of the
 * module's contract (config.h). */
#ifndef CPUMOND_CONFIG_INTERNAL_H
#define CPUMOND_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* MS (BYTES) in the largest unit that is exact, as config_print writes it
 * and config_parse_duration (config_parse_size) reads it back: 60000 is
 * "1min", 1500 "1500ms", 0 "0ms"; 268435456 bytes "256MiB".  Into BUF
 * (SIZE bytes), which is returned. */
const char *config_format_duration(uint64_t ms, char *buf, size_t size);
const char *config_format_size(uint64_t bytes, char *buf, size_t size);

#endif
