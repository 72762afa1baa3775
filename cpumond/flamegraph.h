/* flamegraph: an interactive SVG flame graph, drawn without outside tools
 * (Debian 12 packages none).
 *
 * Stacks are merged into a tree by frame name from the outermost frame up:
 * the root "all" at the bottom, each box as wide as its samples, children
 * sorted by name (as flamegraph.pl) so the same samples give the same file.
 * The file is self-contained: a <title> per box (function, module,
 * samples, share), click to zoom, a search box that highlights the matching
 * functions and shows their share, and deterministic warm colours from the
 * function name.  Every box carries data-n (its samples) and data-s (its
 * own samples, not its children's), so n = s + the children's n.
 */
#ifndef CPUMOND_FLAMEGRAPH_H
#define CPUMOND_FLAMEGRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct flamegraph;

/* Returns a new, empty flame graph, or NULL when out of memory. */
struct flamegraph *flamegraph_new(void);
void flamegraph_free(struct flamegraph *fg);

/* One frame of a stack given to flamegraph_add. */
struct flamegraph_frame {
	const char *name;        /* the function, or what stands for it */
	const char *module;      /* shown in the box's title; may be NULL */
};

/* Adds SAMPLES samples of the stack FRAMES[0..N), OUTERMOST FIRST.  Frames
 * merge by name with the frames under them; a box keeps the module of the
 * first frame that made it.  N = 0 adds to the root's own samples.  Returns
 * 0 or -ENOMEM. */
int flamegraph_add(struct flamegraph *fg, const struct flamegraph_frame *frames, size_t n,
                   uint64_t samples);

/* Writes the SVG.  TITLE and SUBTITLE (may be NULL) head the picture.
 * Returns 0, or a negative errno when OUT has a write error. */
int flamegraph_write(const struct flamegraph *fg, const char *title, const char *subtitle,
                     FILE *out);

/* Writes S as XML character data or attribute text: &<>"' as entities,
 * control bytes and bytes that are not valid UTF-8 as the text \xNN (XML
 * 1.0 allows neither), so any name gives well-formed XML. */
void flamegraph_put_xml(const char *s, FILE *out);

#endif
