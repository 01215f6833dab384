"""A BM25F index over tool documents, one segment per server, and its ranking.

Every field a tool offers is indexed separately (name words, server key, title, the first sentence
of the description, the rest of it, parameter names, parameter descriptions, annotation hints) and
combined BM25F-style: each field's term frequency is length-normalized against that field's average
and weighted, then saturated once per term. The per-(term, tool) impact does not depend on the
query, so it is computed when a segment is built and a query only adds `idf * impact` per posting.
The server/tool hierarchy counts twice: the server key is a field, and naming a server in a query
multiplies its tools' scores. A tool whose name words are all in the query gets a bonus. Synonyms
expand the query at a reduced weight. Each hit carries a confidence: the idf-weighted share of the
query's own words that it matches (a word no tool has counts fully against it), which is how "no
tool fits" is told from a weak fit. A sentence most of a server's tools repeat (its boilerplate) is
not a tool's first sentence but part of its description body; a quoted query word (a value the step
names) counts `quoted` of the others.
Servers are ranked too (`rank_servers`): a server is one document of all its tools (each query word
at its rarity among servers times its best impact in any of the server's tools), plus its best
tools' scores; for a task (a query of more than `task_words` words) the tools of the servers that
cover most of it are lifted, so the answer shows the best tools of the best servers. Above
`_LARGE_CATALOG` tools a long query walks only its rarest words; the others re-rank the candidates.
A segment per server keeps re-indexing cheap: when one server's tools change only its segment is
rebuilt, and the others are re-weighted (not re-tokenized) only if the average field lengths drifted.
A segment is weighed once per distinct (tool, per-field counts) pair, and a build pauses the cyclic
garbage collector (it makes no cycles, and the collector's passes cost as much as the build).
Pure Python, no I/O, no MCP types: the callers turn their tools into `ToolDocument`s.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import heapq
import math
import operator
import re
from array import array
from collections import Counter
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress

from omega_mcp.search.text import expansions, quoted_terms, split_identifier, stem, terms

__all__ = ["FIELDS", "Hit", "SearchIndex", "ToolDocument", "Weights"]

FIELDS = ("name", "server", "title", "summary", "description", "params", "param_docs", "hints")
_NAME, _SERVER, _TITLE, _SUMMARY, _DESCRIPTION, _PARAMS, _PARAM_DOCS, _HINTS = range(len(FIELDS))
_DRIFT = 0.10  # re-weight every segment when an average field length moved by more than this
# Large catalogs only (never below _COMMON_FLOOR tools, so a catalog of a few hundred tools is ranked
# exactly): a synonym held by more than _COMMON_SYNONYM of the tools is dropped, and a query word held
# by more than _COMMON_WORD only re-ranks the best _SHORTLIST candidates of the rarer words.
# A description's body and each parameter's description are indexed up to this many characters:
# usage examples and guardrails further down say little about what a tool is for, and cost postings.
_LONG_TEXT_CHARS = 1500
_PARAM_TEXT_CHARS = 300
_BITS = 8  # per-field counts packed in one 64-bit integer, each capped at _MASK
_MASK = (1 << _BITS) - 1
_STRONG_BITS = (1 << (_BITS * (_SUMMARY + 1))) - 1  # name, server, title, first sentence
_COMMON_SYNONYM = 0.03
_COMMON_WORD = 0.08
_COMMON_FLOOR = 300
_SHORTLIST = 200
_WALKED_WORDS = 8  # above _LARGE_CATALOG tools, at most this many words of a query walk their postings
_LARGE_CATALOG = 2000
_SERVER_EVIDENCE = 50  # the best tools whose scores add to their servers'
_SERVER_DECAY = 0.5  # a server's k-th best tool adds this to the power k of its score


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


@dataclass(frozen=True, slots=True)
class ToolDocument:
    """What the index knows of one tool: `name` is the name a result shows (the exported one),
    `server` the servers.toml key (None for a built-in), `tool_name` the tool's own name."""

    name: str
    server: str | None
    tool_name: str
    title: str = ""
    description: str = ""
    parameters: tuple[tuple[str, str], ...] = ()
    """(name, description) of each top-level parameter."""
    hints: tuple[str, ...] = ()
    """Words standing for the tool's annotations (`read only`, `destructive`, ...)."""


@dataclass(frozen=True, slots=True)
class Weights:
    """Field weights, length normalization and the ranking's other knobs (tuned on the dev queries)."""

    fields: tuple[float, ...] = (3.0, 1.5, 2.0, 1.5, 0.3, 0.8, 0.6, 0.3)
    b: tuple[float, ...] = (0.5, 0.0, 0.5, 0.6, 0.75, 0.5, 0.75, 0.0)
    k1: float = 1.2
    synonym: float = 0.2
    """A synonym's weight relative to the query word it came from."""
    server_boost: float = 0.6
    """Tools of a server the query names score this much more (times)."""
    name_bonus: float = 0.5
    """A tool whose name words are all in the query scores this much more (times); partly for part."""
    weak_match: float = 0.4
    """How much a query word found only in the long fields (description body, parameters) counts
    towards confidence, against 1 in the name, server, title or first sentence."""
    server_tools: float = 1.0
    """How much a server's best tools add to its score (against 1 for its coverage of the query)."""
    server_lift: float = 1.0
    """For a task (a query of more than `task_words` words): how much its best servers lift their tools."""
    task_words: int = 4
    quoted: float = 0.3
    """A query word inside quotes (a value the step names: a file, a message) counts this much (times)."""
    unseen: float = 1.0
    """How much a query word no tool has counts against confidence (times the highest idf)."""


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked tool: its document, score and confidence (0 … 1, see the module docstring)."""

    document: ToolDocument
    score: float
    confidence: float


_SENTENCE_END = re.compile(r"\n|[.!?](?=\s|$)")


def _first_sentence(text: str) -> tuple[str, str]:
    """The first sentence (or line) of at least 13 characters, and the rest."""
    text = text.strip()
    found = _SENTENCE_END.search(text, 12)
    if found is None:
        return text, ""
    return text[: found.start() + 1], text[found.start() + 1 :]


_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_SHARED_MIN_TOOLS = 3  # a server with fewer tools has no boilerplate to tell apart


def _shared_sentences(documents: Sequence[ToolDocument], split: Sequence[list[str]] | None = None) -> frozenset[str]:
    """The sentences at least half of a server's tools repeat ("This tool belongs to the X API."): they
    describe the server, not the tool, so they must not stand as a tool's first sentence. `split`: each
    description's sentences (`_SENTENCES`), when the caller has them."""
    if len(documents) < _SHARED_MIN_TOOLS:
        return frozenset()
    if split is None:
        split = [_SENTENCES.split(document.description) for document in documents]
    seen: dict[str, int] = {}
    for pieces in split:
        for sentence in set(pieces):
            seen[sentence] = seen.get(sentence, 0) + 1
    floor = max(_SHARED_MIN_TOOLS, len(documents) / 2)
    return frozenset(s for s, n in seen.items() if n >= floor and s.strip())


def _own_text(description: str, shared: frozenset[str], pieces: list[str] | None = None) -> tuple[str, str]:
    """A description without the server's shared sentences, and those sentences (as they came);
    `pieces`: its sentences, when the caller has them."""
    if not shared:
        return description, ""
    if pieces is None:
        pieces = _SENTENCES.split(description)
    own = [p for p in pieces if p not in shared]
    if len(own) == len(pieces):
        return description, ""
    return "\n".join(own), "\n".join(p for p in pieces if p in shared)


def _hint_words(document: ToolDocument) -> list[str]:
    return [t for hint in document.hints for t in terms(hint)]


def _document_fields(
    document: ToolDocument,
    shared: frozenset[str] = frozenset(),
    server_words: list[str] | None = None,
    sentences: list[str] | None = None,
) -> list[list[str]]:
    own, common = _own_text(document.description, shared, sentences)
    summary, rest = _first_sentence(own)
    if common:
        rest = f"{common}\n{rest}"
    if server_words is None:
        server_words = [stem(word) for word in split_identifier(document.server or "")]
    return [
        [stem(word) for word in split_identifier(document.tool_name)],
        server_words,
        terms(document.title),
        terms(summary),
        terms(rest[:_LONG_TEXT_CHARS]),
        [t for name, _ in document.parameters for t in terms(name)],
        [t for _, text in document.parameters for t in terms(text[:_PARAM_TEXT_CHARS])],
        _hint_words(document),
    ]


@functools.lru_cache(maxsize=4096)
def _decode(value: int) -> tuple[tuple[int, int], ...]:
    """The (field, count) pairs of a packed value, its non-zero fields only (few distinct values exist)."""
    return tuple((f, (value >> (_BITS * f)) & _MASK) for f in range(len(FIELDS)) if (value >> (_BITS * f)) & _MASK)


_COUNTED = 6  # a field of more words than this is counted with a Counter (C), shorter ones word by word


@dataclass(slots=True)
class _Segment:
    """The tools of one server: raw per-field term counts, and impacts for the current averages."""

    server: str | None
    documents: list[ToolDocument]
    lengths: list[tuple[int, ...]]
    counts: dict[str, tuple[list[int], list[int]]]
    """term → (local documents, ascending; the pair of each: an index into `pair_values`). Lists, not
    arrays: most terms have one or two postings in a segment, where a list is as small and faster made."""
    pair_values: array[int]
    """Each distinct (document, packed per-field counts) pair of the segment: its counts, 8 bits a field.
    A document's postings share few such values (a word once in the description, say), so a segment is
    weighed pair by pair, not posting by posting."""
    pair_documents: array[int]
    """The local document of each pair."""
    name_sizes: list[int]
    """How many distinct words each tool's name has."""
    names: dict[str, list[int]]
    """term → the local documents whose name has it."""
    server_terms: frozenset[str]
    length_sums: tuple[int, ...]
    impacts: dict[str, array[float]] = field(default_factory=dict[str, "array[float]"])
    """term → the impact of each of its documents (as in `counts`) for the current field averages (an
    array of doubles: a query walks it contiguously, and the garbage collector does not)."""
    best: dict[str, float] = field(default_factory=dict[str, float])
    """term → its highest impact in this segment: how well the server as a whole covers the term."""
    base: int = 0
    """The global number of its first document (documents are numbered in segment order)."""


def _segment(server: str | None, documents: Sequence[ToolDocument]) -> _Segment:
    counts: dict[str, tuple[list[int], list[int]]] = {}
    find = counts.get
    pair_values: list[int] = []
    pair_documents: list[int] = []
    lengths: list[tuple[int, ...]] = []
    name_sizes: list[int] = []
    names: dict[str, list[int]] = {}
    split = [_SENTENCES.split(d.description) for d in documents] if len(documents) >= _SHARED_MIN_TOOLS else None
    shared = _shared_sentences(documents, split)
    server_words = [stem(word) for word in split_identifier(server or "")]
    for local, document in enumerate(documents):
        fields = _document_fields(document, shared, server_words, split[local] if split and shared else None)
        lengths.append(tuple(map(len, fields)))
        packed: dict[str, int] = {}
        get = packed.get
        for index, words in enumerate(fields):
            if not words:
                continue
            one = 1 << (_BITS * index)
            if len(words) > _COUNTED:  # at most _MASK words a field: no count overflows its bits
                for word, count in Counter(words[:_MASK]).items():
                    packed[word] = get(word, 0) + count * one
            else:
                for word in words:
                    packed[word] = get(word, 0) + one
        pairs: dict[int, int] = {}
        for word, value in packed.items():
            pair = pairs.get(value)
            if pair is None:
                pair = pairs[value] = len(pair_values)
                pair_values.append(value)
                pair_documents.append(local)
            entry = find(word)
            if entry is None:
                counts[word] = ([local], [pair])
            else:
                entry[0].append(local)
                entry[1].append(pair)
        name_words = set(fields[_NAME])
        name_sizes.append(len(name_words))
        for word in name_words:
            holders = names.get(word)
            if holders is None:
                names[word] = [local]
            else:
                holders.append(local)
    sums = tuple(map(sum, zip(*lengths, strict=True))) if lengths else (0,) * len(FIELDS)
    return _Segment(
        server,
        list(documents),
        lengths,
        counts,
        array("Q", pair_values),
        array("i", pair_documents),
        name_sizes,
        names,
        frozenset(server_words),
        sums,
    )


@contextlib.contextmanager
def _collector_paused() -> Generator[None]:
    """A build allocates about a hundred small lists and tuples per tool and makes no reference cycles,
    yet the cyclic collector's passes over the growing heap cost as much CPU as the build itself (at
    10,000 tools: half of it). It pauses for the build; reference counting still frees everything."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class SearchIndex:
    """Tool documents grouped by server, searchable by keywords.

    `update({server: documents}, removed)` (re)indexes the servers whose tools changed in one go;
    `search(query, limit)` ranks. Segments keep the order they were first added in, so ties keep
    the catalog's order.
    """

    def __init__(self, weights: Weights | None = None) -> None:
        self.weights = weights or Weights()
        self._segments: dict[str | None, _Segment] = {}
        self._by_term: dict[str, list[_Segment]] = {}
        self._dfs: dict[str, int] = {}
        """term -> how many documents have it (kept in step with the segments)."""
        self._by_server_word: dict[str, list[_Segment]] = {}
        self._averages: tuple[float, ...] = (1.0,) * len(FIELDS)
        self._count = 0
        self._bases: list[int] = []
        self._ordered: list[_Segment] = []

    def __len__(self) -> int:
        return self._count

    @property
    def servers(self) -> list[str | None]:
        """The indexed servers (None: the built-ins), in the order they were added."""
        return list(self._segments)

    def update(self, changed: Mapping[str | None, Sequence[ToolDocument]], removed: Iterable[str | None] = ()) -> None:
        """Index the `changed` servers' documents (replacing what they had) and forget `removed`."""
        with _collector_paused():
            self._update(changed, removed)

    def _update(self, changed: Mapping[str | None, Sequence[ToolDocument]], removed: Iterable[str | None]) -> None:
        touched: list[_Segment] = []
        for server in removed:
            old = self._segments.pop(server, None)
            if old is not None:
                self._unlink(old)
        for server, documents in changed.items():
            old = self._segments.get(server)
            if old is not None:
                self._unlink(old)
            segment = _segment(server, documents)
            self._segments[server] = segment
            dfs, by_term = self._dfs, self._by_term
            for word, (ids, _) in segment.counts.items():
                holders = by_term.get(word)
                if holders is None:
                    by_term[word] = [segment]
                    dfs[word] = len(ids)
                else:
                    holders.append(segment)
                    dfs[word] += len(ids)
            for word in segment.server_terms:
                self._by_server_word.setdefault(word, []).append(segment)
            touched.append(segment)
        self._layout(touched)

    def replace(self, server: str | None, documents: Iterable[ToolDocument]) -> None:
        """Index `documents` as the tools of `server`, replacing what it had."""
        self.update({server: list(documents)})

    def remove(self, server: str | None) -> None:
        """Forget the tools of `server` (nothing happens if it has none)."""
        self.update({}, [server])

    def _unlink(self, segment: _Segment) -> None:
        for word, (ids, _) in segment.counts.items():
            holders = self._by_term[word]
            holders.remove(segment)
            self._dfs[word] -= len(ids)
            if not holders:
                del self._by_term[word], self._dfs[word]
        for word in segment.server_terms:
            self._by_server_word[word].remove(segment)

    def _layout(self, touched: list[_Segment]) -> None:
        """Number the documents, recompute the averages; weigh what changed (everything on drift)."""
        base = 0
        self._bases, self._ordered = [], []
        totals = [0] * len(FIELDS)
        for segment in self._segments.values():
            segment.base = base
            self._bases.append(base)
            self._ordered.append(segment)
            base += len(segment.documents)
            for index, value in enumerate(segment.length_sums):
                totals[index] += value
        self._count = base
        averages = tuple(max(1.0, total / max(1, base)) for total in totals)
        drifted = any(abs(new - old) / old > _DRIFT for new, old in zip(averages, self._averages, strict=True))
        if drifted:
            self._averages = averages
            touched = list(self._segments.values())
        for segment in touched:
            self._weigh(segment)

    def _weigh(self, segment: _Segment) -> None:
        w = self.weights
        k1 = w.k1
        saturated = k1 + 1.0
        scales = [
            tuple(w.fields[f] / (1.0 - w.b[f] + w.b[f] * lengths[f] / self._averages[f]) for f in range(len(FIELDS)))
            for lengths in segment.lengths
        ]
        pair_impacts: list[float] = []
        append = pair_impacts.append  # bound once: this loop runs once per distinct (document, counts)
        for value, local in zip(segment.pair_values, segment.pair_documents, strict=True):
            scale = scales[local]
            tf = 0.0
            for f, count in _decode(value):
                tf += scale[f] * count
            append(tf * saturated / (k1 + tf))
        impact_of = pair_impacts.__getitem__
        impacts = {word: array("d", map(impact_of, pairs)) for word, (_, pairs) in segment.counts.items()}
        segment.impacts = impacts
        segment.best = {word: max(values) for word, values in impacts.items()}

    def search(self, query: str, limit: int = 5, *, builtins: bool = False) -> list[Hit]:
        """The best `limit` tools for `query`, best first; tools matching no query word are left out.
        With `builtins`, the built-ins (server None) that match follow, wherever they rank.

        Speed on large catalogs: a synonym held by more than `_COMMON_SYNONYM` of the tools is not
        used, and a query word held by more than `_COMMON_WORD` of them (when rarer words exist) only
        re-ranks the best candidates of the rarer words instead of walking its whole posting list.
        """
        primary = terms(query)
        if not primary or limit <= 0 or not self._count:
            return []
        w = self.weights
        n = self._count
        dfs = self._dfs
        weights = self._query_weights(primary, query)
        idfs = {word: _idf(n, dfs[word]) if word in dfs else 0.0 for word in weights}
        common = max(_COMMON_WORD * n, _COMMON_FLOOR)
        walked = [word for word in weights if 0 < dfs.get(word, 0) <= common]
        later = [word for word in weights if dfs.get(word, 0) > common]
        if not walked:
            walked, later = later, []
        if n > _LARGE_CATALOG and len(walked) > _WALKED_WORDS:
            # A long task over a large catalog: the rarest words find the candidates, the others re-rank them.
            walked.sort(key=lambda word: (dfs[word], word))
            walked, later = walked[:_WALKED_WORDS], [*walked[_WALKED_WORDS:], *later]
        scores = [0.0] * n
        for word in walked:
            factor = weights[word] * idfs[word]
            for segment in self._by_term[word]:
                base = segment.base
                for local, impact in zip(segment.counts[word][0], segment.impacts[word], strict=True):
                    scores[base + local] += factor * impact
        touched = list(compress(range(n), scores))
        if not touched:
            return []
        extra = self._server_extra(scores, frozenset(primary))
        hits = self._name_hits(scores, walked)
        if later:
            # Re-rank the best candidates with the common words (looked up, not walked).
            provisional = [scores[number] * (1.0 + extra.get(number, 0.0)) for number in touched]
            order = heapq.nlargest(max(_SHORTLIST, 4 * limit), range(len(touched)), key=provisional.__getitem__)
            touched = [touched[i] for i in order]
            for number in touched:
                segment, local = self._locate(number)
                for word in later:
                    posting = segment.counts.get(word)
                    if posting is not None:
                        ids = posting[0]
                        at = bisect.bisect_left(ids, local)
                        if at < len(ids) and ids[at] == local:
                            scores[number] += weights[word] * idfs[word] * segment.impacts[word][at]
                    names = segment.names.get(word)
                    if names is not None:
                        at = bisect.bisect_left(names, local)
                        if at < len(names) and names[at] == local:
                            hits[number] = hits.get(number, 0) + 1
        for number, count in hits.items():
            segment, local = self._locate(number)
            covered = count / segment.name_sizes[local]
            extra[number] = extra.get(number, 0.0) + w.name_bonus * covered * covered
        for number, more in extra.items():
            scores[number] *= 1.0 + more
        lift = w.server_lift and len(set(primary)) > w.task_words
        wanted = max(_SHORTLIST, 4 * limit) if lift else limit
        best = heapq.nlargest(wanted, zip(map(scores.__getitem__, touched), map(operator.neg, touched), strict=True))
        if lift:
            best = heapq.nlargest(limit, self._server_lift(best, weights))
        if builtins and None in self._segments:
            # The built-ins that matched, wherever they rank: the caller may lift them (toolsearch).
            chosen = {-negated for _, negated in best}
            own = self._segments[None]
            for number in range(own.base, own.base + len(own.documents)):
                if scores[number] and number not in chosen:
                    best.append((scores[number], -number))
        unseen = _idf(n, 0) * w.unseen
        own = frozenset(primary)
        total = sum((idfs[word] or unseen) * count for word, count in weights.items() if word in own)
        return [self._hit(-negated, score, weights, idfs, total) for score, negated in best]

    def _query_weights(self, primary: list[str], query: str) -> dict[str, float]:
        """Each query word at weight 1 (more if repeated; a quoted one at `quoted`, unless the query is
        all quotes), its synonyms the index has at `synonym`."""
        n, dfs = self._count, self._dfs
        weights: dict[str, float] = {}
        for word in primary:
            weights[word] = weights.get(word, 0.0) + 1.0
        quoted = quoted_terms(query)
        if quoted and len(quoted) < len(primary):
            cut = 1.0 - self.weights.quoted
            for word in quoted:
                if word in weights:
                    weights[word] -= cut
        for word in expansions(primary):
            if 0 < dfs.get(word, 0) <= max(_COMMON_SYNONYM * n, _COMMON_FLOOR):
                weights[word] = max(weights.get(word, 0.0), self.weights.synonym)
        return weights

    def rank_servers(self, query: str, limit: int = 5) -> list[tuple[str | None, float]]:
        """The servers best fitting `query`, best first, with their scores (None: the built-ins).

        A server is scored as one document of all its tools: each query word counts with its rarity
        among the servers times its best impact in any of the server's tools, so a server covering
        several steps of a task (each in another tool) outranks one whose single tool repeats a word;
        then its best tools' scores add to it (a tool's evidence is its server's, with a decay), and a
        server the query names is boosted as its tools are.
        """
        primary = terms(query)
        if not primary or limit <= 0 or not self._count:
            return []
        coverage, holders_of = self._coverage(self._query_weights(primary, query))
        if not coverage:
            return []
        evidence: dict[int, list[float]] = {}
        for hit in self.search(query, _SERVER_EVIDENCE):
            segment = self._segments[hit.document.server]
            evidence.setdefault(id(segment), []).append(hit.score)
        top_cover = max(coverage.values()) or 1.0
        top_tool = max((s[0] for s in evidence.values()), default=0.0) or 1.0
        named = frozenset(primary)
        ranked: list[tuple[float, int, str | None]] = []
        for key, cover in coverage.items():
            segment = holders_of[key]
            tools = sum(score * _SERVER_DECAY**rank for rank, score in enumerate(evidence.get(key, ())))
            score = cover / top_cover + self.weights.server_tools * tools / top_tool
            if segment.server_terms and segment.server_terms <= named:
                score *= 1.0 + self.weights.server_boost
            ranked.append((score, -segment.base, segment.server))
        best = heapq.nlargest(limit, ranked)
        return [(server, score) for score, _, server in best]

    def _coverage(
        self, weights: Mapping[str, float], among: Mapping[int, _Segment] | None = None
    ) -> tuple[dict[int, float], dict[int, _Segment]]:
        """Each server's coverage of the query words (by `id` of its segment), as one document; only of
        the segments `among` when given (a shortlist's)."""
        total = len(self._segments)
        coverage: dict[int, float] = {}
        holders_of: dict[int, _Segment] = {}
        for word, weight in weights.items():
            holders = self._by_term.get(word)
            if not holders:
                continue
            idf = _idf(total, len(holders))
            if among is not None:
                for key, segment in among.items():
                    best = segment.best.get(word)
                    if best is not None:
                        coverage[key] = coverage.get(key, 0.0) + weight * idf * best
                continue
            for segment in holders:
                key = id(segment)
                holders_of[key] = segment
                coverage[key] = coverage.get(key, 0.0) + weight * idf * segment.best[word]
        return coverage, holders_of

    def _server_lift(self, best: list[tuple[float, int]], weights: Mapping[str, float]) -> list[tuple[float, int]]:
        """A task's tools: those of the servers covering most of it rank higher (the best tools of the
        best servers), each (score, -number) of the shortlist `best` with its score times 1 +
        `server_lift` x its server's share of the best coverage."""
        segments = {id(segment): segment for segment in (self._locate(-negated)[0] for _, negated in best)}
        coverage, _ = self._coverage(weights, segments)
        top = max(coverage.values(), default=0.0)
        if top <= 0.0:
            return best
        lift = self.weights.server_lift
        lifted: list[tuple[float, int]] = []
        for score, negated in best:
            segment, _ = self._locate(-negated)
            lifted.append((score * (1.0 + lift * coverage.get(id(segment), 0.0) / top), negated))
        return lifted

    def _server_extra(self, scores: list[float], named: frozenset[str]) -> dict[int, float]:
        """The hierarchy: the tools of a server whose key's words are all in the query (`google maps`)."""
        extra: dict[int, float] = {}
        seen: set[int] = set()
        for word in named:
            for segment in self._by_server_word.get(word, ()):
                if id(segment) in seen or not segment.server_terms <= named:
                    continue
                seen.add(id(segment))
                for number in range(segment.base, segment.base + len(segment.documents)):
                    if scores[number]:
                        extra[number] = self.weights.server_boost
        return extra

    def _name_hits(self, scores: list[float], words: list[str]) -> dict[int, int]:
        """How many of `words` each scored tool has in its name."""
        hits: dict[int, int] = {}
        for word in words:
            for segment in self._by_term.get(word, ()):
                found = segment.names.get(word)
                if found is not None:
                    base = segment.base
                    for local in found:
                        number = base + local
                        if scores[number]:
                            hits[number] = hits.get(number, 0) + 1
        return hits

    def _locate(self, number: int) -> tuple[_Segment, int]:
        segment = self._ordered[bisect.bisect_right(self._bases, number) - 1]
        return segment, number - segment.base

    def _hit(self, number: int, score: float, weights: dict[str, float], idfs: dict[str, float], total: float) -> Hit:
        """A hit with its confidence: the idf-weighted share of the query it matches, each word counting
        fully in the name, server, title or first sentence and `weak_match` elsewhere (a synonym at its weight)."""
        segment, local = self._locate(number)
        matched = 0.0
        for word, weight in weights.items():
            posting = segment.counts.get(word)
            if posting is None or not idfs[word]:
                continue
            ids, pairs = posting
            at = bisect.bisect_left(ids, local)
            if at < len(ids) and ids[at] == local:
                strength = 1.0 if segment.pair_values[pairs[at]] & _STRONG_BITS else self.weights.weak_match
                matched += idfs[word] * min(weight, 1.0) * strength
        confidence = min(1.0, matched / total) if total else 0.0
        return Hit(segment.documents[local], score, confidence)
