"""BM25 retrieval shared by the sandbox domains: ranking, determinism, caching."""

from __future__ import annotations

import pytest

from orchrm.execution.sandbox.domain import Doc
from orchrm.execution.sandbox.retrieval import BM25Index, cached_index, tokenize

DOCS = [
    Doc("paris", "Paris", "Paris is the capital and largest city of France, on the Seine."),
    Doc("berlin", "Berlin", "Berlin is the capital of Germany and its largest city."),
    Doc("lyon", "Lyon", "Lyon is a city in France known for its cuisine."),
    Doc("seine", "Seine", "The Seine is a river that flows through Paris."),
    Doc("dup-a", "Twin", "alpha beta gamma"),
    Doc("dup-b", "Twin", "alpha beta gamma"),
]


def test_tokenize_lowercases_drops_stopwords_and_folds_plurals():
    assert tokenize("The Films of the Cities, 1999!") == ["film", "citie", "1999"]
    assert tokenize("class bus analysis") == ["class", "bus", "analysis"]
    assert tokenize("") == []


@pytest.mark.parametrize(
    ("query", "best"),
    [("capital of Germany", "berlin"), ("river Seine", "seine"), ("French cuisine Lyon", "lyon")],
)
def test_search_ranks_the_matching_document_first(query, best):
    index = BM25Index(DOCS)
    assert index.search(query, top_k=3)[0].doc_id == best


def test_ties_are_broken_by_document_order_and_top_k_is_respected():
    index = BM25Index(DOCS)
    hits = index.search_scored("alpha gamma", top_k=2)
    assert [d.doc_id for d, _ in hits] == ["dup-a", "dup-b"]
    assert hits[0][1] == hits[1][1] > 0
    assert [d.doc_id for d in index.search("alpha", top_k=1)] == ["dup-a"]
    assert len(index.search("capital city France", top_k=20)) <= len(DOCS)


def test_unmatched_or_empty_queries_return_nothing():
    index = BM25Index(DOCS)
    assert index.search("zzz qqq", top_k=5) == []
    assert index.search("the of and", top_k=5) == []
    assert index.search("Paris", top_k=0) == []
    assert BM25Index([]).search("Paris", top_k=3) == []


def test_a_corpus_without_a_single_term_is_an_empty_index():
    index = BM25Index([Doc("blank", "", ""), Doc("stop", "The", "of the and")])
    assert len(index) == 2
    assert index.search("Paris", top_k=3) == [] and index.search("the", top_k=3) == []
    assert index.scores("Paris").tolist() == [0.0, 0.0]


def test_tokenize_keeps_accented_and_non_latin_words_whole():
    assert tokenize("Café in ZÜRICH, naïve résumé; 東京 ist groß") == ["café", "zürich", "naïve", "résumé", "東京", "ist", "gross"]
    assert tokenize("cafe\u0301") == tokenize("caf\u00e9") == ["café"]  # decomposed and composed accents agree
    index = BM25Index([*DOCS, Doc("zurich", "Zürich", "Zürich is the largest city of Switzerland."), Doc("tokyo", "東京", "東京 Tokyo")])
    assert index.search("zürich", top_k=1)[0].doc_id == "zurich"
    assert index.search("東京", top_k=1)[0].doc_id == "tokyo"


def test_scores_match_search_order_and_results_are_deterministic():
    index = BM25Index(DOCS)
    scores = index.scores("capital city")
    ranked = index.search_scored("capital city", top_k=6)
    assert [s for _, s in ranked] == sorted((float(s) for s in scores if s > 0), reverse=True)
    again = BM25Index(DOCS)
    assert (
        again.search("capital city", 6)
        == index.search("capital city", 6)
        == index.search("capital city", 6)
    )


def test_cached_index_builds_once_per_key():
    calls = []

    def make():
        calls.append(1)
        return DOCS

    a = cached_index("test-retrieval:docs", make)
    b = cached_index("test-retrieval:docs", make)
    assert a is b and len(calls) == 1 and len(a) == len(DOCS)


def test_on_a_few_thousand_documents_the_one_holding_every_query_word_ranks_first():
    """3,000 documents, each a window of 60 words starting at its own offset of a 3,000-word
    cycle (every offset once): a query of six words spread over one window is held whole by that
    document alone, and in part by its neighbours (query speed is measured in benchmarks/)."""
    words = [f"w{i}" for i in range(3000)]
    docs = [Doc(f"d{i}", f"title {i}", " ".join(words[(i * 7 + j) % 3000] for j in range(60))) for i in range(3000)]
    index = BM25Index(docs)
    for q in range(0, 3000, 15):
        hits = index.search_scored(" ".join(words[(q * 7 + j) % 3000] for j in (0, 11, 23, 35, 47, 59)), 5)
        assert hits[0][0].doc_id == f"d{q}"
        assert len(hits) == 5 and hits[0][1] > hits[1][1] >= hits[-1][1] > 0
