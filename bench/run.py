"""Every benchmark with its floor beside omega, in one command; the README's tables come from one run of it.

    .venv/bin/python bench/run.py [--calls 1000] [--only proxy,http,bash] [--quick] [--json]
                                  [--omega-src DIR] [--before-src DIR]

Each section is a `section(options) -> Section` function of a bench module, listed in `SECTIONS`
(name → module): another section is added by writing such a function and one line here. The
sections run one after the other, each measuring omega and its floors in the same run; the output
is markdown (a heading, the command that reproduces the section alone, the table, the load) or,
with `--json`, every raw number. `--omega-src` measures another checkout's omega with this
checkout's bench code and floors (before/after runs on the same machine).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
from typing import Any

from _support import Options, Section, add_options, load_average, options_from

SECTIONS: dict[str, str] = {
    "proxy": "bench_proxy",
    "http": "bench_http",
    "bash": "bench_trampoline",
}
"""Section name → the bench module whose `section(options)` measures it."""


def _markdown(section: Section) -> str:
    load = f"load average {section.data.get('load_before', 0):.2f} → {section.data.get('load_after', 0):.2f}"
    return f"### {section.title}\n\n`{section.command}` ({load})\n\n{section.markdown}\n"


def run(names: list[str], options: Options, *, show: bool = False) -> list[Section]:
    """Measure the sections in turn; `show`: print each one's markdown as soon as it is measured."""
    sections: list[Section] = []
    for name in names:
        module: Any = importlib.import_module(SECTIONS[name])
        sections.append(module.section(options))
        if show:
            print(_markdown(sections[-1]), flush=True)
    return sections


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per path (default 1000)")
    parser.add_argument("--only", help=f"comma-separated sections (default all: {','.join(SECTIONS)})")
    add_options(parser)
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",")] if args.only else list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {', '.join(unknown)} (known: {', '.join(SECTIONS)})")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    options = options_from(args)
    cores = os.cpu_count()
    print(
        f"<!-- {platform.system()} {platform.release()}, Python {platform.python_version()}, {cores} cores, "
        f"load {load_average():.2f} at start -->",
        file=sys.stderr,
    )
    sections = run(names, options, show=not args.json)
    if args.json:
        print(json.dumps({s.title: s.data for s in sections}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
