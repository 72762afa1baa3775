/* flamegraph: the stacks as a tree of boxes, written as one SVG file with
 * its script inline.  See flamegraph.h. */
#include "cpumond/flamegraph.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/log.h"
#include "stackdump/stackdump.h"

/* The geometry, in pixels, of flamegraph.pl's defaults: readable at a
 * glance and familiar to anyone who has read one before. */
#define WIDTH 1200
#define XPAD 10
#define FRAME_H 16
#define TOP 84                   /* title, subtitle, controls */
#define BOTTOM 34                /* the details line */
#define FONT_PX 12
#define CHAR_PX (FONT_PX * 0.59) /* average glyph width of Verdana */

struct node {
	char *name;
	char *module;
	uint64_t n;              /* samples here and above */
	uint64_t self;           /* samples that end here */
	uint32_t *kids;          /* node indices, sorted by name */
	size_t nkids, capkids;
};

struct flamegraph {
	struct node *nodes;      /* [0] is the root, "all" */
	size_t n, cap;
	size_t depth;            /* of the deepest frame; the root is 0 */
};

static int new_node(struct flamegraph *fg, const char *name, const char *module, uint32_t *idx)
{
	struct node *nd;

	if (fg->n == fg->cap) {
		size_t cap = fg->cap ? 2 * fg->cap : 64;
		struct node *nodes = reallocarray(fg->nodes, cap, sizeof *nodes);

		if (!nodes)
			return -ENOMEM;
		fg->nodes = nodes;
		fg->cap = cap;
	}
	if (fg->n >= UINT32_MAX)
		return -ENOMEM;
	nd = &fg->nodes[fg->n];
	memset(nd, 0, sizeof *nd);
	nd->name = strdup(name ? name : "?");
	nd->module = module ? strdup(module) : NULL;
	if (!nd->name || (module && !nd->module)) {
		free(nd->name);
		free(nd->module);
		return -ENOMEM;
	}
	*idx = (uint32_t)fg->n++;
	return 0;
}

struct flamegraph *flamegraph_new(void)
{
	struct flamegraph *fg = calloc(1, sizeof *fg);
	uint32_t root;

	if (fg && new_node(fg, "all", NULL, &root) < 0) {
		free(fg);
		return NULL;
	}
	return fg;
}

void flamegraph_free(struct flamegraph *fg)
{
	if (!fg)
		return;
	for (size_t i = 0; i < fg->n; i++) {
		free(fg->nodes[i].name);
		free(fg->nodes[i].module);
		free(fg->nodes[i].kids);
	}
	free(fg->nodes);
	free(fg);
}

/* The child of PARENT named NAME, made when missing.  Children stay sorted
 * by name: the lookup is a binary search and the drawing order is fixed. */
static int child(struct flamegraph *fg, uint32_t parent, const struct flamegraph_frame *f,
                 uint32_t *out)
{
	const char *name = f->name ? f->name : "?";
	size_t lo = 0, hi = fg->nodes[parent].nkids;
	struct node *p;
	uint32_t idx;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(fg->nodes[fg->nodes[parent].kids[mid]].name, name);

		if (c == 0) {
			*out = fg->nodes[parent].kids[mid];
			return 0;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (new_node(fg, name, f->module, &idx) < 0)
		return -ENOMEM;
	p = &fg->nodes[parent];   /* new_node may have moved the nodes */
	if (p->nkids == p->capkids) {
		size_t cap = p->capkids ? 2 * p->capkids : 4;
		uint32_t *kids = reallocarray(p->kids, cap, sizeof *kids);

		if (!kids)
			return -ENOMEM;  /* the new node stays, unreachable, freed at the end */
		p->kids = kids;
		p->capkids = cap;
	}
	memmove(&p->kids[lo + 1], &p->kids[lo], (p->nkids - lo) * sizeof *p->kids);
	p->kids[lo] = idx;
	p->nkids++;
	*out = idx;
	return 0;
}

int flamegraph_add(struct flamegraph *fg, const struct flamegraph_frame *frames, size_t n,
                   uint64_t samples)
{
	uint32_t cur = 0;

	if (samples == 0)
		return 0;
	fg->nodes[0].n += samples;
	for (size_t i = 0; i < n; i++) {
		if (child(fg, cur, &frames[i], &cur) < 0)
			return -ENOMEM;
		fg->nodes[cur].n += samples;
	}
	fg->nodes[cur].self += samples;
	if (n > fg->depth)
		fg->depth = n;
	return 0;
}

void flamegraph_put_xml(const char *s, FILE *out)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	while (*p) {
		int n = stackdump_utf8_len((const char *)p);
		/* U+0080..U+009F: C2 80..C2 9F */
		bool c1 = n == 2 && p[0] == 0xc2 && p[1] < 0xa0;

		if (n == 0 || *p < 0x20 || *p == 0x7f || c1) {
			fprintf(out, "\\x%02x", *p);
			n = 1;
		} else if (*p == '&') {
			fputs("&amp;", out);
		} else if (*p == '<') {
			fputs("&lt;", out);
		} else if (*p == '>') {
			fputs("&gt;", out);
		} else if (*p == '"') {
			fputs("&quot;", out);
		} else if (*p == '\'') {
			fputs("&apos;", out);
		} else {
			fwrite(p, 1, (size_t)n, out);
		}
		p += n;
	}
}

/* The width of S in characters as flamegraph_put_xml shows it. */
static size_t shown_chars(const char *s, size_t *bytes_for, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t chars = 0;

	*bytes_for = 0;
	while (*p) {
		int n = stackdump_utf8_len((const char *)p);
		size_t w = n == 0 || *p < 0x20 || *p == 0x7f ? 4 : 1;

		if (n == 0)
			n = 1;
		if (chars + w > max)
			break;
		chars += w;
		p += n;
		*bytes_for = (size_t)((const char *)p - s);
	}
	while (*p) {
		int n = stackdump_utf8_len((const char *)p);

		chars += n == 0 || *p < 0x20 || *p == 0x7f ? 4 : 1;
		p += n ? n : 1;
	}
	return chars;
}

/* The box's label: the whole name when it fits in W_PX, else its start and
 * "..", nothing under three characters.  The script does the same on zoom. */
static void put_label(const char *name, double w_px, FILE *out)
{
	double fit = (w_px - 6) / CHAR_PX;
	size_t max = fit > 0 ? (size_t)fit : 0, cut;
	char *part;

	if (max < 3)
		return;
	if (shown_chars(name, &cut, max) <= max) {
		flamegraph_put_xml(name, out);
		return;
	}
	shown_chars(name, &cut, max - 2);
	part = strndup(name, cut);
	if (part) {
		flamegraph_put_xml(part, out);
		fputs("..", out);
	}
	free(part);
}

/* flamegraph.pl's "hot" palette (red to yellow), chosen by a hash of the
 * name so that a function has the same colour in every graph. */
static void put_colour(const char *name, FILE *out)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		h ^= *p;
		h *= 16777619u;
	}
	fprintf(out, "rgb(%u,%u,%u)", 205 + (h >> 8 & 0xff) * 50 / 255,
	        (h >> 16 & 0xff) * 230 / 255, (h >> 24) * 55 / 255);
}

struct layout {
	FILE *out;
	double scale;            /* pixels per sample */
	uint64_t total;
	int height;
};

/* Node IDX and everything above it, LEFT samples from the left edge.  The
 * boxes nest as the stacks do: a box's <g> holds its children's. */
static void put_node(const struct flamegraph *fg, const struct layout *l, uint32_t idx,
                     uint64_t left, size_t depth)
{
	const struct node *nd = &fg->nodes[idx];
	double x = XPAD + (double)left * l->scale, w = (double)nd->n * l->scale;
	double y = l->height - BOTTOM - (double)(depth + 1) * FRAME_H;
	FILE *out = l->out;

	fprintf(out, "<g class=\"f\" data-x=\"%" PRIu64 "\" data-n=\"%" PRIu64 "\" data-s=\"%" PRIu64
	        "\"><title>", left, nd->n, nd->self);
	flamegraph_put_xml(nd->name, out);
	if (nd->module && nd->module[0]) {
		fputs("\nmodule: ", out);
		flamegraph_put_xml(nd->module, out);
	}
	fprintf(out, "\n%" PRIu64 " %s, %.2f%%</title><rect x=\"%.3f\" y=\"%.1f\" "
	        "width=\"%.3f\" height=\"%d\" rx=\"2\" fill=\"", nd->n,
	        log_plural(nd->n, "sample", "samples"),
	        l->total ? 100.0 * (double)nd->n / (double)l->total : 0.0, x, y, w, FRAME_H - 1);
	if (idx == 0)
		fputs("rgb(230,220,200)", out);
	else
		put_colour(nd->name, out);
	fprintf(out, "\"/><text x=\"%.3f\" y=\"%.1f\">", x + 3, y + FRAME_H - 4.5);
	put_label(nd->name, w, out);
	fputs("</text>\n", out);
	for (size_t i = 0; i < nd->nkids; i++) {
		put_node(fg, l, nd->kids[i], left, depth + 1);
		left += fg->nodes[nd->kids[i]].n;
	}
	fputs("</g>\n", out);
}

/* Click a box to zoom into it (the boxes under it stay, full width and
 * faded), click "Reset zoom" or the root to go back; the search box takes a
 * regular expression, colours the matching functions magenta and shows
 * their share of all samples (nested matches counted once). */
static const char script[] =
	"\"use strict\";\n"
	"var fg, details, matched, unzoom, box, W;\n"
	"function own(g, tag) { return g.querySelector(':scope > ' + tag); }\n"
	"function fname(g) { return own(g, 'title').textContent.split('\\n')[0]; }\n"
	"function fit(g, x, w) {\n"
	"  var r = own(g, 'rect'), t = own(g, 'text'), n = fname(g);\n"
	"  var c = Math.floor((w - 6) / 7.08);\n"
	"  r.setAttribute('x', x.toFixed(3)); r.setAttribute('width', w.toFixed(3));\n"
	"  t.setAttribute('x', (x + 3).toFixed(3));\n"
	"  t.textContent = c < 3 ? '' : n.length <= c ? n : n.substring(0, c - 2) + '..';\n"
	"}\n"
	"function zoom(node) {\n"
	"  var zx = +node.dataset.x, zn = +node.dataset.n, all = fg.querySelectorAll('g.f');\n"
	"  if (!zn) return;\n"
	"  for (var i = 0; i < all.length; i++) {\n"
	"    var g = all[i];\n"
	"    if (g.contains(node)) {\n"
	"      g.style.display = ''; g.classList.toggle('anc', g !== node); fit(g, XPAD, W);\n"
	"    } else if (node.contains(g)) {\n"
	"      g.style.display = ''; g.classList.remove('anc');\n"
	"      fit(g, XPAD + (+g.dataset.x - zx) / zn * W, +g.dataset.n / zn * W);\n"
	"    } else {\n"
	"      g.style.display = 'none';\n"
	"    }\n"
	"  }\n"
	"  unzoom.style.display = node === fg.firstElementChild ? 'none' : '';\n"
	"}\n"
	"function search(term) {\n"
	"  var all = fg.querySelectorAll('g.f'), re = null, sum = 0;\n"
	"  var total = +fg.firstElementChild.dataset.n;\n"
	"  if (term) { try { re = new RegExp(term); } catch (e) { matched.textContent = 'not a regular expression'; return; } }\n"
	"  for (var i = 0; i < all.length; i++) {\n"
	"    var g = all[i], r = own(g, 'rect');\n"
	"    if (!r.hasAttribute('data-fill')) r.setAttribute('data-fill', r.getAttribute('fill'));\n"
	"    var hit = re !== null && re.test(fname(g));\n"
	"    g.classList.toggle('hit', hit);\n"
	"    r.setAttribute('fill', hit ? 'rgb(230,0,230)' : r.getAttribute('data-fill'));\n"
	"    if (hit && !g.parentElement.closest('g.hit')) sum += +g.dataset.n;\n"
	"  }\n"
	"  matched.textContent = re ? 'matched: ' + (total ? 100 * sum / total : 0).toFixed(1) + '%' : '';\n"
	"}\n"
	"function init() {\n"
	"  fg = document.getElementById('frames'); details = document.getElementById('details');\n"
	"  matched = document.getElementById('matched'); unzoom = document.getElementById('unzoom');\n"
	"  box = document.getElementById('search');\n"
	"  W = +document.documentElement.getAttribute('width') - 2 * XPAD;\n"
	"  fg.addEventListener('click', function (e) { var g = e.target.closest('g.f'); if (g) zoom(g); });\n"
	"  fg.addEventListener('mouseover', function (e) {\n"
	"    var g = e.target.closest('g.f');\n"
	"    if (g) details.textContent = own(g, 'title').textContent.split('\\n').join('  |  ');\n"
	"  });\n"
	"  fg.addEventListener('mouseout', function () { details.textContent = ' '; });\n"
	"  unzoom.addEventListener('click', function () { zoom(fg.firstElementChild); });\n"
	"  if (box) box.addEventListener('input', function () { search(box.value); });\n"
	"  document.addEventListener('keydown', function (e) {\n"
	"    if ((e.ctrlKey || e.metaKey) && e.key === 'f' && box) { e.preventDefault(); box.focus(); }\n"
	"    if (e.key === 'Escape' && box) { box.value = ''; search(''); }\n"
	"  });\n"
	"}\n"
	"init();\n";

int flamegraph_write(const struct flamegraph *fg, const char *title, const char *subtitle,
                     FILE *out)
{
	const struct node *root = &fg->nodes[0];
	struct layout l = {
		.out = out,
		.total = root->n,
		.height = TOP + (int)(fg->depth + 1) * FRAME_H + BOTTOM,
	};

	l.scale = (double)(WIDTH - 2 * XPAD) / (double)(root->n ? root->n : 1);
	fprintf(out,
	        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
	        "height=\"%d\" viewBox=\"0 0 %d %d\">\n"
	        "<defs><linearGradient id=\"bg\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\">"
	        "<stop stop-color=\"#eeeeee\" offset=\"5%%\"/><stop stop-color=\"#eeeeb0\" "
	        "offset=\"95%%\"/></linearGradient></defs>\n"
	        "<style>\n"
	        "text { font-family: Verdana, \"DejaVu Sans\", sans-serif; font-size: %dpx; fill: #000; }\n"
	        "#title { font-size: 17px; text-anchor: middle; }\n"
	        "#subtitle { fill: #555; text-anchor: middle; }\n"
	        "#unzoom { cursor: pointer; fill: #06c; }\n"
	        "#matched { text-anchor: end; }\n"
	        "g.f { cursor: pointer; }\n"
	        "g.f text { pointer-events: none; }\n"
	        "g.f > rect:hover { stroke: #000; stroke-width: 0.5; }\n"
	        "g.anc > rect { opacity: 0.55; }\n"
	        "</style>\n"
	        "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"url(#bg)\"/>\n"
	        "<text id=\"title\" x=\"%d\" y=\"26\">",
	        WIDTH, l.height, WIDTH, l.height, FONT_PX, WIDTH / 2);
	flamegraph_put_xml(title, out);
	fprintf(out, "</text>\n<text id=\"subtitle\" x=\"%d\" y=\"46\">", WIDTH / 2);
	flamegraph_put_xml(subtitle, out);
	fprintf(out, "</text>\n"
	        "<text id=\"unzoom\" x=\"%d\" y=\"72\" style=\"display:none\">Reset zoom</text>\n"
	        "<foreignObject x=\"%d\" y=\"56\" width=\"260\" height=\"24\">"
	        "<input xmlns=\"http://www.w3.org/1999/xhtml\" id=\"search\" type=\"search\" "
	        "placeholder=\"search functions (regex)\" style=\"width:250px;font-size:12px\"/>"
	        "</foreignObject>\n"
	        "<text id=\"matched\" x=\"%d\" y=\"%d\"> </text>\n"
	        "<text id=\"details\" x=\"%d\" y=\"%d\"> </text>\n",
	        XPAD, WIDTH - XPAD - 260, WIDTH - XPAD, l.height - 12, XPAD, l.height - 12);
	if (root->n == 0)
		fprintf(out, "<text x=\"%d\" y=\"%d\" style=\"text-anchor:middle\">no samples in the "
		        "window</text>\n", WIDTH / 2, TOP + 20);
	fputs("<g id=\"frames\">\n", out);
	put_node(fg, &l, 0, 0, 0);
	fprintf(out, "</g>\n<script type=\"text/ecmascript\"><![CDATA[\nvar XPAD = %d;\n%s]]></script>\n"
	        "</svg>\n", XPAD, script);
	errno = 0;
	if (fflush(out) == EOF || ferror(out))
		return errno ? -errno : -EIO;
	return 0;
}
