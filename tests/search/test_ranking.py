"""The ranking: words (identifier splitting, stemming), the index's fields and hierarchy, re-indexing,
and the retrieval targets on the harvested catalog of real servers (tests/fixtures/): recall@5 of at
least 0.85 on the dev and held-out queries, `select:` for every name form, and "no tool fits"
answered with nothing or a result marked weak. bench/bench_search.py prints the full figures."""

from __future__ import annotations

import pytest
from mcp import types

from omega_mcp.search import SearchIndex, ToolDocument
from omega_mcp.search.text import quoted_terms, split_identifier, stem, terms
from omega_mcp.toolsearch import Entry, ToolFinder
from search_support import catalog_entries, queries


@pytest.mark.parametrize(
    ("identifier", "words"),
    [
        ("browser_take_screenshot", ["browser", "take", "screenshot"]),
        ("getFileContents", ["get", "file", "contents"]),
        ("API-post-search", ["api", "post", "search"]),
        ("HTTPServerError", ["http", "server", "error"]),
        ("s3ListBuckets", ["s", "3", "list", "buckets"]),
        ("mcp__github__create_issue", ["mcp", "github", "create", "issue"]),
        ("resolve-library-id v2.0", ["resolve", "library", "id", "v", "2", "0"]),
    ],
)
def test_identifiers_split_into_their_words(identifier: str, words: list[str]) -> None:
    assert split_identifier(identifier) == words


@pytest.mark.parametrize(
    "group",
    [
        ["screenshot", "screenshots"],
        ["navigate", "navigating", "navigation", "navigates"],
        ["branch", "branches"],
        ["directory", "directories"],
        ["delete", "deleted", "deleting", "deletion"],
        ["run", "running", "runs"],
        ["query", "queries"],
        ["issue", "issues"],
    ],
)
def test_the_stemmer_joins_the_forms_of_a_word(group: list[str]) -> None:
    assert len({stem(word) for word in group}) == 1


def test_the_stemmer_keeps_words_tools_keep_apart() -> None:
    assert stem("server") != stem("serve")
    assert stem("status") == "status" and stem("news") == "news"


def test_stop_words_and_filler_are_not_terms() -> None:
    assert terms("I want to use a tool that can get the weather") == ["weather"]


def doc(name: str, server: str, description: str = "", **more: object) -> ToolDocument:
    return ToolDocument(name=f"mcp__{server}__{name}", server=server, tool_name=name, description=description, **more)  # type: ignore[arg-type]


def test_a_name_match_outranks_a_mention_deep_in_a_description() -> None:
    index = SearchIndex()
    index.replace(
        "a",
        [
            doc("list_items", "a", "List the items. Unlike delete_item, this never changes anything."),
            doc("delete_item", "a", "Remove one item for good."),
        ],
    )
    assert [h.document.tool_name for h in index.search("delete item", 2)] == ["delete_item", "list_items"]


def test_naming_a_server_prefers_its_tools() -> None:
    index = SearchIndex()
    index.update(
        {
            "github": [doc("create_issue", "github", "Create a new issue in a repository")],
            "gitlab": [doc("create_issue", "gitlab", "Create a new issue in a project")],
        }
    )
    assert index.search("create an issue on gitlab", 1)[0].document.server == "gitlab"
    assert index.search("create an issue on github", 1)[0].document.server == "github"


def test_parameters_and_annotations_are_searched_too() -> None:
    index = SearchIndex()
    index.replace(
        "x",
        [
            doc("run", "x", "Run it.", parameters=(("timezone", "IANA zone name"),)),
            doc("other", "x", "Something else.", hints=("read only",)),
        ],
    )
    assert index.search("timezone", 1)[0].document.tool_name == "run"
    assert index.search("read only", 1)[0].document.tool_name == "other"


def test_replacing_one_server_reindexes_it_alone_and_removing_forgets_it() -> None:
    index = SearchIndex()
    index.update({"a": [doc("alpha_tool", "a", "Alpha things")], "b": [doc("beta_tool", "b", "Beta things")]})
    assert index.search("gamma", 5) == []
    index.replace("b", [doc("gamma_tool", "b", "Gamma things")])
    assert [h.document.tool_name for h in index.search("gamma", 5)] == ["gamma_tool"]
    assert index.search("beta", 5) == []
    index.remove("a")
    assert index.search("alpha", 5) == [] and len(index) == 1


def test_a_word_written_in_camel_case_is_found_as_the_one_word_people_type() -> None:
    # `JavaScript` splits into java + script like an identifier, and is also `javascript`.
    assert terms("JavaScript") == ["java", "script", "javascript"]
    index = SearchIndex()
    index.replace(
        "browser",
        [
            doc("evaluate", "browser", "Evaluate JavaScript expression on page or element"),
            doc("run_code", "browser", "Run a code snippet in the server process."),
        ],
    )
    assert index.search("run javascript in the page", 1)[0].document.tool_name == "evaluate"


def test_a_sentence_every_tool_of_a_server_repeats_does_not_stand_for_each_tool() -> None:
    # Each tool of "files" opens with the server's boilerplate; the tool's own words come after it.
    # They must weigh as a first sentence does, or a tool elsewhere whose first sentence merely shares
    # a word with the query wins.
    intro = "This tool belongs to the Acme file system, which manages files and folders."
    own = {
        "cat": "Display the contents of a file.",
        "mkdir": "Create a new folder.",
        "mv": "Move a file to another folder.",
        "wc": "Count the lines, words and characters of a file.",
    }
    index = SearchIndex()
    index.update(
        {
            "files": [doc(name, "files", f"{intro} {text}") for name, text in own.items()],
            "notes": [doc("note_contents", "notes", "Display note contents. Notes are short texts kept by the app.")],
        }
    )
    assert index.search("display the contents of a file", 1)[0].document.tool_name == "cat"
    assert index.search("count the lines of the file", 1)[0].document.tool_name == "wc"
    # The shared sentence still says what the server is about.
    assert index.rank_servers("acme file system", 1)[0][0] == "files"


def test_quoted_values_in_a_step_count_less_than_the_words_around_them() -> None:
    index = SearchIndex()
    index.update(
        {
            "posting": [doc("post_tweet", "posting", "Post a tweet for the authenticated user.")],
            "travel": [
                doc("book_flight", "travel", "Book a flight from one airport to another."),
                doc("cancel_booking", "travel", "Cancel a flight booking."),
            ],
        }
    )
    step = "Please tweet this: 'Flight booked from San Francisco, the airport was busy, booking done!'"
    assert index.search(step, 1)[0].document.tool_name == "post_tweet"
    # A query of nothing but a quoted value keeps its words at full weight.
    assert index.search("'book flight'", 1)[0].document.tool_name == "book_flight"


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("Move 'final_report.pdf' to 'temp'", ["final", "report", "pdf", "temp"]),
        ("it's the users' file 'data.csv'", ["data", "csv"]),
        ('say "hello world" now', ["hello", "world"]),
        ("\u2018curly\u2019 and \u201cdouble\u201d", ["curly", "doubl"]),
        ("don't stop", []),
    ],
)
def test_quoted_terms_are_the_words_inside_quotes_not_after_an_apostrophe(text: str, quoted: list[str]) -> None:
    assert quoted_terms(text) == quoted


def test_the_finder_reindexes_only_the_servers_whose_tools_changed() -> None:
    entries = catalog_entries()
    finder = ToolFinder()
    assert finder.update(entries)
    assert not finder.update(list(entries))  # the same tools: nothing to do
    time_tools = [e for e in entries if e.server_name == "time"]
    renamed = Entry(
        "mcp__time__clock_face",
        "time",
        types.Tool(name="clock_face", description="Draw a clock face", input_schema={"type": "object"}),
    )
    changed = [e for e in entries if e.server_name != "time"] + [*time_tools, renamed]
    assert finder.update(changed)
    assert finder.search("draw a clock face", 1).entries[0].name == "mcp__time__clock_face"


def _ranks(split: str) -> list[int | None]:
    finder = ToolFinder()
    finder.update(catalog_entries())
    ranks: list[int | None] = []
    for query in queries():
        if query.split == split and query.kind != "none":
            names = [e.name for e in finder.search(query.query, 10).entries]
            ranks.append(next((i + 1 for i, name in enumerate(names) if name in query.expected), None))
    return ranks


@pytest.mark.parametrize("split", ["dev", "held-out"])
def test_recall_at_5_on_real_servers_and_agent_queries_is_at_least_0_85(split: str) -> None:
    ranks = _ranks(split)
    recall = sum(1 for rank in ranks if rank is not None and rank <= 5) / len(ranks)
    assert len(ranks) >= 60
    assert recall >= 0.85


def test_no_tool_fits_is_answered_with_nothing_or_a_weak_match() -> None:
    finder = ToolFinder()
    finder.update(catalog_entries())
    nomatch = [q for q in queries() if q.kind == "none"]
    answers = [finder.search(q.query, 5) for q in nomatch]
    clear = sum(1 for answer in answers if not answer.entries or answer.weak)
    assert len(nomatch) >= 10
    assert clear / len(nomatch) >= 0.85


def test_select_finds_every_tool_by_every_name_a_call_accepts() -> None:
    entries = catalog_entries()
    finder = ToolFinder()
    finder.update(entries)
    downstream = [e for e in entries if e.server_name is not None]
    for entry in downstream:
        names = [entry.name, f"{entry.server_name}.{entry.tool.name}", f"{entry.server_name}__{entry.tool.name}"]
        found = finder.select(names)
        assert [e.name for e in found.entries] == [entry.name] and not found.unknown
    builtin = finder.select(["BASH", "nope"])
    assert [e.name for e in builtin.entries] == ["bash"] and builtin.unknown == ("nope",)


def test_the_built_index_weighs_every_posting_as_bm25f_defines_it() -> None:
    # A guard for the build's shortcuts (per-field counts packed in one integer, postings weighed once
    # per distinct (tool, counts) pair): every impact equals BM25F computed directly from the fields.
    from omega_mcp.search.index import (
        _document_fields,  # pyright: ignore[reportPrivateUsage]
        _shared_sentences,  # pyright: ignore[reportPrivateUsage]
    )

    finder = ToolFinder()
    finder.update(catalog_entries())
    index = finder.index
    w = index.weights
    segments = index._segments.values()  # pyright: ignore[reportPrivateUsage]
    fields_of = {
        id(segment): [_document_fields(d, _shared_sentences(segment.documents)) for d in segment.documents]
        for segment in segments
    }
    count = sum(len(s.documents) for s in segments)
    averages = [
        max(1.0, sum(len(f[i]) for s in segments for f in fields_of[id(s)]) / count) for i in range(len(w.fields))
    ]
    checked = 0
    for segment in segments:
        for word, (ids, _) in segment.counts.items():
            for at, local in enumerate(ids):
                fields = fields_of[id(segment)][local]
                tf = sum(
                    w.fields[i] * min(f[:255].count(word), 255) / (1 - w.b[i] + w.b[i] * len(f) / averages[i])
                    for i, f in enumerate(fields)
                )
                assert segment.impacts[word][at] == pytest.approx(tf * (w.k1 + 1) / (w.k1 + tf), rel=1e-12)
                checked += 1
    assert checked > 10_000


def test_a_build_pauses_the_cyclic_collector_and_restores_it_even_when_it_fails() -> None:
    import gc

    index = SearchIndex()
    assert gc.isenabled()
    index.replace("a", [doc("alpha_tool", "a", "Alpha things")])
    assert gc.isenabled()
    with pytest.raises(AttributeError):
        index.replace("b", [object()])  # type: ignore[list-item]
    assert gc.isenabled()
    gc.disable()
    try:
        index.replace("c", [doc("gamma_tool", "c", "Gamma things")])
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
    assert [h.document.tool_name for h in index.search("gamma", 5)] == ["gamma_tool"]
