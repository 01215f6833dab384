"""Words for tool search: identifier splitting, a light English stemmer, stop words and synonyms.

Tool names are identifiers (`browser_take_screenshot`, `getFileContents`, `API-post-search`,
`s3ListBuckets`), so every token is split at `_`, `-`, `.`, `/`, lower-to-upper case changes,
acronym ends (`HTTPServer` → http server) and letter/digit boundaries, then lower-cased. The stemmer
is deliberately light (plural, `-ing`, `-ed`, `-ation`, `-ment`, a final `e`, doubled consonants):
tool texts are short and an aggressive stemmer merges words that tools keep apart (`server`/`serve`).
Synonyms map the words agents use to the words tool authors use (`delete` ~ `remove`, `repo` ~
`repository`); they are applied to queries only, at a reduced weight. Pure Python, no I/O.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from itertools import chain

__all__ = ["STOP_WORDS", "expansions", "quoted_terms", "split_identifier", "stem", "terms"]

_TOKEN = re.compile(r"[A-Za-z0-9]+")
# Boundaries inside one alphanumeric run: aB, ABc (acronym end), a1, 1a.
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")

STOP_WORDS = frozenset(
    """
    a an the and or but if then else of to in on at by for with from into onto over under about as is are was
    were be been being am do does did doing done have has had having it its it's this that these those there
    here i me my we our you your he she they them their what which who whom whose when where why how all any
    each every some such no nor not only own same so than too very can could should would will shall may might
    must just also via per using use used want need needs wanted like please let lets help tool tools mcp
    function functions call calling able way something thing things want get
    """.split()
)
"""Words that say nothing about which tool fits. `get` is here on purpose: nearly every API tool's
name starts with it, so it only adds noise (`get_issue` still matches `issue`)."""

_SYNONYMS: dict[str, tuple[str, ...]] = {
    "delete": ("remove", "destroy", "drop", "erase", "trash", "rm"),
    "remove": ("delete", "drop", "rm"),
    "create": ("add", "new", "make", "insert", "open"),
    "add": ("create", "insert", "append", "new"),
    "new": ("create", "add"),
    "make": ("create", "generate"),
    "update": ("edit", "modify", "change", "patch", "set"),
    "edit": ("update", "modify", "change", "replace"),
    "modify": ("update", "edit", "change"),
    "change": ("update", "edit", "modify", "set"),
    "rename": ("move",),
    "move": ("rename",),
    "list": ("show", "enumerate", "all", "browse"),
    "show": ("list", "display", "view", "get", "read"),
    "view": ("show", "read", "display"),
    "display": ("show", "view"),
    "find": ("search", "lookup", "query", "locate"),
    "search": ("find", "query", "lookup"),
    "lookup": ("search", "find", "get"),
    "locate": ("find", "search"),
    "look": ("search", "find", "read"),
    "query": ("search", "sql", "find"),
    "fetch": ("get", "download", "retrieve", "read", "request"),
    "retrieve": ("get", "fetch", "read"),
    "download": ("fetch", "get"),
    "read": ("get", "view", "open", "content"),
    "open": ("navigate", "read", "launch"),
    "write": ("create", "save", "put"),
    "save": ("write", "store", "persist"),
    "store": ("save", "write", "memory"),
    "remember": ("memory", "store", "save"),
    "run": ("execute", "exec", "start", "launch", "invoke"),
    "execute": ("run", "exec"),
    "exec": ("execute", "run"),
    "launch": ("start", "run", "open"),
    "start": ("run", "launch", "begin"),
    "stop": ("kill", "terminate", "cancel", "end"),
    "kill": ("stop", "terminate"),
    "cancel": ("stop", "abort"),
    "send": ("post", "message", "email", "notify"),
    "post": ("send", "publish"),
    "message": ("msg", "chat", "send"),
    "msg": ("message",),
    "email": ("mail", "message"),
    "mail": ("email",),
    "repo": ("repository",),
    "repository": ("repo",),
    "pr": ("pull", "request", "merge"),
    "mr": ("merge", "request"),
    "dir": ("directory", "folder"),
    "directory": ("folder", "dir"),
    "folder": ("directory", "dir"),
    "db": ("database", "sql"),
    "database": ("db", "sql", "table"),
    "sql": ("query", "database"),
    "table": ("database", "sql"),
    "img": ("image",),
    "image": ("img", "picture", "photo", "screenshot"),
    "picture": ("image", "screenshot"),
    "photo": ("image",),
    "screenshot": ("capture", "image", "snapshot"),
    "capture": ("screenshot", "snapshot"),
    "snapshot": ("screenshot", "capture"),
    "page": ("web", "browser", "site"),
    "website": ("web", "page", "site", "url"),
    "site": ("web", "page", "url"),
    "web": ("internet", "online", "page", "url"),
    "webpage": ("web", "page", "url"),
    "internet": ("web", "online"),
    "online": ("web", "internet"),
    "url": ("link", "address", "web"),
    "link": ("url",),
    "navigate": ("go", "open", "visit", "url"),
    "visit": ("navigate", "open"),
    "go": ("navigate",),
    "browser": ("page", "web", "navigate"),
    "click": ("press", "tap", "select"),
    "press": ("click", "key"),
    "type": ("fill", "enter", "input"),
    "fill": ("type", "input", "form"),
    "input": ("fill", "type"),
    "chart": ("graph", "plot", "diagram", "visualization"),
    "graph": ("chart", "plot"),
    "plot": ("chart", "graph"),
    "diagram": ("chart", "graph"),
    "flowchart": ("flow", "diagram", "chart"),
    "metadata": ("info", "details"),
    "visualize": ("chart", "graph", "plot"),
    "time": ("clock", "date", "timezone"),
    "date": ("time", "calendar"),
    "timezone": ("time", "zone"),
    "clock": ("time",),
    "convert": ("transform", "conversion"),
    "calculate": ("compute", "math", "evaluate"),
    "compute": ("calculate",),
    "math": ("calculate", "expression"),
    "doc": ("document", "documentation", "docs"),
    "docs": ("documentation", "document"),
    "documentation": ("docs", "library", "reference"),
    "document": ("doc", "file", "page"),
    "file": ("document", "path"),
    "log": ("logs", "console", "output"),
    "logs": ("log", "console"),
    "console": ("log", "logs"),
    "error": ("issue", "bug", "exception", "fail"),
    "bug": ("issue", "error"),
    "ticket": ("issue", "task"),
    "task": ("issue", "ticket", "todo"),
    "todo": ("task",),
    "issue": ("ticket", "bug"),
    "comment": ("reply", "note"),
    "reply": ("comment", "respond"),
    "user": ("member", "account", "person", "people"),
    "member": ("user",),
    "people": ("user", "person"),
    "person": ("user", "people"),
    "customer": ("client", "user"),
    "payment": ("pay", "charge", "invoice"),
    "pay": ("payment",),
    "charge": ("payment",),
    "invoice": ("billing", "payment"),
    "billing": ("invoice", "payment"),
    "refund": ("payment",),
    "price": ("cost", "pricing"),
    "cost": ("price",),
    "weather": ("forecast",),
    "map": ("geocode", "location", "place"),
    "place": ("location", "map"),
    "location": ("place", "geocode", "address"),
    "address": ("location", "geocode"),
    "direction": ("route", "navigate"),
    "directions": ("route",),
    "route": ("directions",),
    "distance": ("route", "matrix"),
    "think": ("reason", "thought", "reasoning"),
    "reason": ("think", "thought"),
    "plan": ("think", "step"),
    "pod": ("kubernetes", "container"),
    "container": ("docker", "pod"),
    "deploy": ("deployment", "release", "publish"),
    "deployment": ("deploy",),
    "cluster": ("kubernetes",),
    "scrape": ("crawl", "extract", "fetch"),
    "crawl": ("scrape", "spider"),
    "extract": ("scrape", "parse"),
    "summarize": ("summary",),
    "translate": ("translation", "language"),
    "paper": ("article", "arxiv", "research"),
    "article": ("paper", "page"),
    "research": ("paper", "search"),
    "wiki": ("wikipedia",),
    "spreadsheet": ("excel", "sheet", "workbook"),
    "sheet": ("spreadsheet", "worksheet", "excel"),
    "excel": ("spreadsheet", "workbook", "sheet"),
    "cell": ("range", "spreadsheet"),
    "diff": ("difference", "compare", "change"),
    "compare": ("diff",),
    "history": ("log",),
    "version": ("release", "tag"),
    "undo": ("revert", "reset"),
    "revert": ("reset", "undo"),
    "stage": ("add",),
    "entity": ("node", "entities"),
    "relation": ("edge", "relationship"),
    "upload": ("put", "send", "attach"),
    "attach": ("upload",),
    "news": ("article", "search"),
    "count": ("number", "total"),
    "tab": ("page", "window"),
    "window": ("tab", "page"),
    "scroll": ("move", "wheel"),
    "hover": ("mouse", "move"),
    "drag": ("drop", "move"),
    "key": ("keyboard", "press"),
    "keyboard": ("key", "press"),
    "network": ("request", "http"),
    "http": ("request", "fetch", "web"),
    "api": ("request", "endpoint"),
    "wait": ("sleep", "delay"),
    "close": ("stop", "end"),
    "project": ("repository", "workspace"),
    "workspace": ("project",),
    "team": ("organization", "group"),
    "organization": ("team", "org"),
    "org": ("organization",),
    "channel": ("conversation", "room"),
    "environment": ("env",),
    "env": ("environment",),
    "secret": ("credential", "token"),
    "notify": ("notification", "alert"),
    "alert": ("notification", "monitor"),
}

_STEM_EXCEPTIONS = {
    "news": "news",
    "series": "series",
    "status": "status",
    "address": "address",
    "process": "process",
    "access": "access",
    "alias": "alias",
    "analysis": "analysis",
    "canvas": "canvas",
    "kubernetes": "kubernetes",
    "this": "this",
    "was": "was",
    "has": "has",
    "does": "do",
    "is": "is",
    "us": "us",
    "gas": "gas",
    "bus": "bus",
    "data": "data",
    "css": "css",
    "https": "http",
    "ids": "id",
    "during": "during",
    "string": "string",
    "thing": "thing",
    "something": "something",
    "nothing": "nothing",
    "everything": "everything",
    "anything": "anything",
    "bring": "bring",
    "spring": "spring",
    "ring": "ring",
    "king": "king",
    "embedding": "embed",
    "embeddings": "embed",
    "shed": "shed",
    "need": "need",
    "speed": "speed",
    "feed": "feed",
    "seed": "seed",
    "bed": "bed",
    "red": "red",
    "used": "use",
    "based": "base",
    "user": "user",
    "users": "user",
}
_VOWELS = frozenset("aeiouy")
_DOUBLES = frozenset({"bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt"})


def split_identifier(text: str) -> list[str]:
    """The lower-case words of `text`: runs of letters and digits, split at case and digit changes."""
    words: list[str] = []
    for run in _TOKEN.findall(text):
        words.extend(part.lower() for part in _CAMEL.split(run) if part)
    return words


def _has_vowel(text: str) -> bool:
    return any(ch in _VOWELS for ch in text)


def _trim(base: str) -> str:
    """After removing `-ing`/`-ed`: undouble (`running` → run), or drop a silent `e` the suffix ate."""
    if base[-2:] in _DOUBLES:
        return base[:-1]
    return base


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light stem of a lower-case word: `screenshots` → screenshot, `navigating`/`navigation`/
    `navigate` → navigat, `branches` → branch, `directories` → directory, `deleted` → delet."""
    if word in _STEM_EXCEPTIONS:
        return _STEM_EXCEPTIONS[word]
    if len(word) <= 3 or not word.isalpha():
        return word
    w = word
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith(("ches", "shes", "xes", "zes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if w.endswith("ing") and len(w) > 5 and _has_vowel(w[:-3]):
        w = _trim(w[:-3])
    elif w.endswith("ied") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("ed") and len(w) > 4 and _has_vowel(w[:-2]):
        w = _trim(w[:-2])
    for suffix, replacement in (("ational", "at"), ("ation", "at"), ("ition", "it"), ("tion", "t"), ("ement", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: len(w) - len(suffix)] + replacement
            break
    if w.endswith("e") and len(w) > 4:
        w = w[:-1]
    return w


@functools.lru_cache(maxsize=65536)
def _run_terms(run: str) -> tuple[str, ...]:
    """The terms of one run of letters and digits."""
    parts = [part.lower() for part in _CAMEL.split(run) if part]
    out = [stem(part) for part in parts if part not in STOP_WORDS]
    if len(parts) > 1 and run.isalpha() and run.lower() not in STOP_WORDS:
        # A word written in camel case (`JavaScript`, `GitHub`) is also the one word people type.
        out.append(stem(run.lower()))
    return tuple(out)


def terms(text: str) -> list[str]:
    """The index terms of a text: words split as identifiers, stop words dropped, stemmed."""
    return list(chain.from_iterable(map(_run_terms, _TOKEN.findall(text))))


_QUOTED = re.compile(
    r"""(?<![A-Za-z0-9])(?:'([^']+)'|"([^"]+)"|\u2018([^\u2019]+)\u2019|\u201c([^\u201d]+)\u201d)(?![A-Za-z0-9])"""
)


def quoted_terms(text: str) -> list[str]:
    """The terms of `text` inside quotes (`'report.pdf'`, "Road trip update."): the values a step
    names (files, messages, titles), which say less about which tool fits than the words around them.
    An apostrophe inside a word (`it's`, `users'`) opens no quote."""
    out: list[str] = []
    for found in _QUOTED.finditer(text):
        out.extend(terms(next(group for group in found.groups() if group is not None)))
    return out


def expansions(term_list: Iterable[str]) -> Iterator[str]:
    """Stemmed synonyms of the (stemmed) query terms, each once, none already in the query."""
    seen = set(term_list)
    for term in list(seen):
        for synonym in _SYNONYMS_STEMMED.get(term, ()):
            if synonym not in seen:
                seen.add(synonym)
                yield synonym


_SYNONYMS_STEMMED: dict[str, tuple[str, ...]] = {}
for _word, _alternatives in _SYNONYMS.items():
    _key = stem(_word)
    _existing = _SYNONYMS_STEMMED.get(_key, ())
    _SYNONYMS_STEMMED[_key] = _existing + tuple(stem(a) for a in _alternatives if stem(a) not in _existing)
