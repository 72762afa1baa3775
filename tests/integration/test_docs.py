#!/usr/bin/env python3
"""The documentation against the programs: what README.md, the man pages and
the example configuration say, checked where a check can see drift.

Every list is taken from the programs or the build, never written here:
- the package lists of the Makefile (make deps, make test-deps) stand in the
  README's set-up table, exactly;
- the version of the Makefile is the one `--version` prints and the one in
  the .TH line of every man page;
- every option `cpumond --help` and `stackdump --help` print is in its man
  page, and every command of `cpumond --help` has its entry in cpumond(8);
- every key `cpumond tail --json` and `cpumond report --json` print, on the
  fixture database of tests/unit/test_report.c, is named where cpumond(8)
  (and for tail README.md) describes that JSON;
- every key of config/config.c's key table has its entry in cpumond.conf(5),
  and appears in the example config/cpumond.conf and README.md;
- every default cpumond.conf(5), config/cpumond.conf and README.md give for
  a [cpumond] key is the one `cpumond check-config` fills in;
- groff (and mandoc, where installed) formats the man pages without a
  warning;
- no tracked file points at documents outside the repository (the design
  notes or the shared folder of the workplace it was written in): what they
  said is written in README.md's "Architecture" and bench/README.md.

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" and ends
with "N passed, N failed, N skipped"; exit status 0 only when nothing failed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402
from testlib import check, skip, summary  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAN = {name: os.path.join(ROOT, "man", name) for name in ("cpumond.8", "cpumond.conf.5", "stackdump.1")}
# The macros that start a paragraph of a man page.
PARAGRAPH = re.compile(r"^\.(PP|P|LP|IP|TP|RS|RE|SH|SS)\b")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL, **kw)


def has_word(word, text):
    return re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", text) is not None


def make_variables():
    """NAME := VALUE assignments of the Makefile, continuation lines joined."""
    text = read(os.path.join(ROOT, "Makefile")).replace("\\\n", " ")
    return {m.group(1): m.group(2).split()
            for m in re.finditer(r"^([A-Z_]+)\s*:=(.*)$", text, re.M)}


def plain(lines):
    """Man page source lines as the words they print: request names, quotes
    and font changes dropped, escapes resolved."""
    out = []
    for line in lines:
        if line.startswith(".\\\""):
            continue
        if line.startswith("."):
            parts = line.split(None, 1)
            line = parts[1] if len(parts) > 1 else ""
            line = " ".join(a.strip('"') for a in re.findall(r'"[^"]*"|\S+', line))
        out.append(line)
    text = " ".join(out)
    text = re.sub(r"\\f(\[[A-Z]*\]|[BIRP])", "", text)
    for esc, ch in (("\\-", "-"), ("\\(lq", '"'), ("\\(rq", '"'), ("\\(en", "-"), ("\\(em", "-"),
                    ("\\&", ""), ("\\ ", " "), ("\\e", "\\")):
        text = text.replace(esc, ch)
    return re.sub(r"\s+", " ", text)


def man_item(src, tag, siblings):
    """The source lines of the .TP item whose tag line prints TAG, up to the
    next .TP item whose tag is one of SIBLINGS (or the section's end); None
    when there is none."""
    lines = src.splitlines()
    for i in range(1, len(lines)):
        if lines[i - 1] == ".TP" and plain([lines[i]]).strip() == tag:
            end = i + 1
            while end < len(lines) and not lines[end].startswith(".SH"):
                if lines[end] == ".TP" and end + 1 < len(lines) and \
                        plain([lines[end + 1]]).strip() in siblings:
                    break
                end += 1
            return lines[i:end]
    return None


def commands(build):
    """The commands `cpumond --help` shows (tail, report, ...)."""
    p = run([os.path.join(build, "cpumond"), "--help"])
    return re.findall(r"^(?:usage:)?\s*cpumond ([a-z][a-z-]*)", p.stdout, re.M)


def paragraphs(lines):
    """LINES of a man page split at every paragraph request."""
    paras, cur = [], []
    for line in lines:
        if PARAGRAPH.match(line):
            if cur:
                paras.append(cur)
            cur = []
        else:
            cur.append(line)
    if cur:
        paras.append(cur)
    return paras


def first_paragraph_with(lines, word):
    """The printed text of the first paragraph of LINES that has WORD."""
    for p in paragraphs(lines or []):
        text = plain(p)
        if has_word(word, text):
            return text
    return ""


def json_keys(lines):
    """The keys of JSON objects, one a line, with those of the objects in
    their lists: {"": top-level keys, KEY: keys of the objects in list KEY}."""
    keys = {"": set()}
    for line in lines:
        obj = json.loads(line)
        keys[""] |= set(obj)
        for k, v in obj.items():
            if isinstance(v, list) and v and isinstance(v[0], dict):
                keys.setdefault(k, set()).update(*(set(x) for x in v))
    return keys


def test_packages():
    var = make_variables()
    readme = read(os.path.join(ROOT, "README.md"))
    for target, name in (("deps", "DEB_DEPS"), ("test-deps", "DEB_TEST_DEPS")):
        m = re.search(r"^\| `make " + target + r"` \|[^(\n]*\(`([^`]*)`\)", readme, re.M)
        listed, wanted = (m.group(1).split() if m else []), var.get(name, [])
        check(f"README lists make {target}'s packages as the Makefile's {name}",
              m and listed == wanted,
              f"README lacks {[p for p in wanted if p not in listed]}, "
              f"has besides {[p for p in listed if p not in wanted]}" if m and set(listed) != set(wanted)
              else f"README {listed}, Makefile {wanted}")


# Spelled in pieces, so that this file does not match itself.
OUTSIDE = re.compile(("DESIGN" + r"\.md|\.\./" + "shared" + r"\b|/work/" + "shared").encode())


def test_no_outside_pointers():
    p = run(["git", "-C", ROOT, "ls-files", "-z"])
    if p.returncode != 0:
        skip("no tracked file points outside the repository", f"not a git checkout: {p.stderr.strip()}")
        return
    found = []
    for name in filter(None, p.stdout.split("\0")):
        try:
            with open(os.path.join(ROOT, name), "rb") as f:
                lines = f.read().splitlines()
        except OSError:   # deleted in the working tree, not yet in the index
            continue
        found += [f"{name}:{i}: {line.decode(errors='replace').strip()[:100]}"
                  for i, line in enumerate(lines, 1) if OUTSIDE.search(line)]
    check("no tracked file points at the design notes or the shared folder outside the repository",
          not found, "; ".join(found[:20]) + (f" and {len(found) - 20} more" if len(found) > 20 else ""))


def test_versions(build):
    version = (make_variables().get("VERSION") or ["?"])[0]
    for prog in ("cpumond", "stackdump"):
        p = run([os.path.join(build, prog), "--version"])
        check(f"{prog} --version is the Makefile's {version}", p.stdout.strip() == f"{prog} {version}",
              repr(p.stdout))
    for name, path in MAN.items():
        th = next((line for line in read(path).splitlines() if line.startswith(".TH ")), "")
        args = [a.strip('"') for a in re.findall(r'"[^"]*"|\S+', th)][1:]
        check(f"{name}: .TH gives the date and cpumond {version}",
              len(args) >= 4 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", args[2]) is not None
              and args[3] == f"cpumond {version}", th)


def test_lint():
    for name, path in MAN.items():
        p = run(["groff", "-man", "-Tutf8", "-ww", "-z", path])
        check(f"{name}: groff -ww gives no warning", p.returncode == 0 and not p.stderr, p.stderr[:500])
        if shutil.which("mandoc"):
            p = run(["mandoc", "-Tlint", "-W", "warning", path])
            check(f"{name}: mandoc -Tlint gives no warning", p.returncode == 0 and not p.stdout + p.stderr,
                  (p.stdout + p.stderr)[:500])
        else:
            skip(f"{name}: mandoc -Tlint", "mandoc is not installed (make test-deps)")


def test_options(build):
    readme = read(os.path.join(ROOT, "README.md"))
    for prog, page in (("cpumond", "cpumond.8"), ("stackdump", "stackdump.1")):
        p = run([os.path.join(build, prog), "--help"])
        opts = sorted(set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", p.stdout)))
        check(f"{prog} --help lists options", p.returncode == 0 and len(opts) > 3, p.stdout[:300])
        text = plain(read(MAN[page]).splitlines())
        missing = [o for o in opts if not has_word(o, text)]
        check(f"{page} has every option of {prog} --help", not missing, f"missing {missing}")
        if prog != "cpumond":
            continue
        names = commands(build)
        check("cpumond --help lists commands", len(names) >= 3, p.stdout[:300])
        for c in names:
            check(f"cpumond.8 has an entry for cpumond {c}",
                  man_item(read(MAN[page]), c, names) is not None, "")
            check(f"README shows cpumond {c}", f"cpumond {c}" in readme, "")


def test_json_keys(build, tmp):
    helper = os.path.join(build, "tests", "test_report")
    if not os.path.exists(helper):
        skip("tail and report --json keys documented", f"no {helper} (make B={build} {helper})")
        return
    db = os.path.join(tmp, "fixture.db")
    p = run([helper, "--write-fixture", db])
    if not check("fixture database written", p.returncode == 0, p.stderr.strip()):
        return
    man = read(MAN["cpumond.8"])
    readme = read(os.path.join(ROOT, "README.md"))
    log = re.search(r"^## The overload log\n(.*?)^## ", readme, re.M | re.S)
    readme_tail = next((para for para in (log.group(1) if log else "").split("\n\n")
                        if para.startswith("`--json`")), "")
    names = commands(build)
    for command, where in (("tail", {"cpumond.8": first_paragraph_with(man_item(man, "tail", names),
                                                                       "--json"),
                                     "README.md": readme_tail}),
                           ("report", {"cpumond.8": first_paragraph_with(man_item(man, "report", names),
                                                                         "--json")})):
        argv = [os.path.join(build, "cpumond"), command, "-d", db, "--json"]
        p = run(argv + (["-n", "1000"] if command == "tail" else ["--top", "0"]))
        try:
            keys = json_keys(p.stdout.splitlines())
        except ValueError as e:
            check(f"{command} --json prints JSON lines", False, f"{e}: {p.stdout[:300]}")
            continue
        check(f"{command} --json prints objects with lists of objects",
              p.returncode == 0 and keys[""] and len(keys) > 1, f"exit {p.returncode} {p.stderr[:200]}")
        for doc, text in where.items():
            check(f"{doc} has a paragraph on {command} --json", bool(text), "")
            for inner, names in sorted(keys.items()):
                missing = sorted(k for k in names if not has_word(k, text))
                what = f"{command} --json keys" + (f" of {inner}[]" if inner else "")
                check(f"{doc} names every {what}", not missing, f"missing {missing}")


def config_keys():
    """(name, global, watch, report) of every key config/config.c accepts."""
    src = read(os.path.join(ROOT, "config", "config.c"))
    return [(m.group(1), m.group(2) == "true", m.group(3) == "true", m.group(4) == "true")
            for m in re.finditer(r'\[KEY_\w+\]\s*=\s*\{\s*"(\w+)",\s*(\w+),\s*(\w+),\s*(\w+)\s*\}', src)]


def man_section(src, title):
    """The source lines of the .SH section whose title starts with TITLE."""
    lines, out, inside = src.splitlines(), [], False
    for line in lines:
        if line.startswith(".SH"):
            inside = plain([line]).strip().strip('"').startswith(title)
        elif inside:
            out.append(line)
    return out


def man_key_entry(lines, key):
    """The lines of the .TP entry for KEY in LINES, or None."""
    for i in range(1, len(lines)):
        if lines[i - 1] == ".TP" and re.match(r"\.BI? " + re.escape(key) + r"(\s|$)", lines[i]):
            end = i + 1
            while end < len(lines) and not PARAGRAPH.match(lines[end]):
                end += 1
            return lines[i:end]
    return None


def effective(cpumond, tmp, settings):
    """The [cpumond] section check-config prints for a file with SETTINGS
    (key = value lines) and one watch: {key: value}, or the error text."""
    path = os.path.join(tmp, "defaults.conf")
    with open(path, "w") as f:
        f.write("[cpumond]\n" + "".join(f"{k} = {v}\n" for k, v in settings) + "[watch w]\nall = yes\n")
    p = run([cpumond, "check-config", "-c", path])
    if p.returncode != 0:
        return p.stderr.strip()
    section = p.stdout.split("\n\n")[0].splitlines()[1:]
    return dict(line.split(" = ", 1) for line in section if " = " in line)


def ini_settings(text, commented):
    """(key, value) of the [cpumond] section of ini TEXT; COMMENTED: also
    the settings and section headers commented out with ';'."""
    out, section = [], None
    for line in text.splitlines():
        line = line.strip()
        if commented and re.match(r";\s*(\w+\s*=|\[)", line):
            line = line.lstrip(";").strip()
        m = re.match(r"\[(.*)\]", line)
        if m:
            section = m.group(1).strip()
        elif section == "cpumond" and re.match(r"\w+\s*=", line):
            k, v = line.split("=", 1)
            out.append((k.strip(), v.strip()))
    return out


def test_config(build, tmp):
    keys = config_keys()
    check("config.c's key table read", len(keys) > 10, keys)
    page = read(MAN["cpumond.conf.5"])
    example = read(os.path.join(ROOT, "config", "cpumond.conf"))
    readme = read(os.path.join(ROOT, "README.md"))
    conf = re.search(r"^## Configuration\n(.*?)^## ", readme, re.M | re.S)
    readme_conf = conf.group(1) if conf else ""
    sections = {"global": man_section(page, "THE [cpumond] SECTION"),
                "report": man_section(page, "THE [report] SECTION"),
                "watch": man_section(page, "WATCH SECTIONS")}
    missing = {"entry": [], "watch": [], "example": [], "readme": []}
    for name, in_global, in_watch, in_report in keys:
        home = "global" if in_global else "report" if in_report else "watch"
        if man_key_entry(sections[home], name) is None:
            missing["entry"].append(name)
        if in_watch and home != "watch" and not has_word(name, plain(sections["watch"])):
            missing["watch"].append(name)
        if not re.search(r"^;?\s*" + name + r"\s*=", example, re.M):
            missing["example"].append(name)
        if not has_word(name, readme_conf):
            missing["readme"].append(name)
    check("cpumond.conf.5 has an entry for every key, in its section", not missing["entry"],
          f"no .TP .B/.BI KEY for {missing['entry']}")
    check("cpumond.conf.5's watch sections name every [cpumond] key a watch may set",
          not missing["watch"], f"missing {missing['watch']}")
    check("config/cpumond.conf shows every key", not missing["example"], f"missing {missing['example']}")
    check("README's configuration shows every key", not missing["readme"], f"missing {missing['readme']}")

    # The defaults: every [cpumond] key check-config fills in has a
    # "Default:" in its entry, and each value the documents give as a
    # setting of [cpumond] is read as what check-config fills in.
    cpumond = os.path.join(build, "cpumond")
    base = effective(cpumond, tmp, [])
    if not check("check-config of a file without [cpumond] settings", isinstance(base, dict) and base, base):
        return
    documented, undocumented = [], []
    for key in base:
        m = re.search(r"Default: (\S+)", plain(man_key_entry(sections["global"], key) or []))
        if m:
            documented.append((key, m.group(1)))
        else:
            undocumented.append(key)
    check("cpumond.conf.5 gives the default of every key check-config fills in", not undocumented,
          f"no \"Default:\" for {undocumented}")
    blocks = re.findall(r"```\n(\[cpumond\].*?)```", readme_conf, re.S)
    for doc, settings in (("cpumond.conf.5", documented),
                          ("config/cpumond.conf", ini_settings(example, True)),
                          ("README.md", ini_settings(blocks[0] if blocks else "", False))):
        settings = [(k, v) for k, v in settings if k in base]
        got = effective(cpumond, tmp, settings)
        wrong = [f"{k} = {v} reads as {got.get(k)!r}, the default is {base[k]!r}"
                 for k, v in settings if isinstance(got, dict) and got.get(k) != base[k]]
        check(f"{doc}: the [cpumond] values it gives are the defaults",
              settings and isinstance(got, dict) and not wrong, got if not isinstance(got, dict) else wrong)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpumond-docs-") as tmp:
        testlib.run([test_packages, test_lint, test_no_outside_pointers])
        testlib.run([test_versions, test_options], args.build)
        testlib.run([test_json_keys, test_config], args.build, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
