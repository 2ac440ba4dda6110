"""Real BM25 retrieval for the sandbox's ``WebSearch`` agents (DESIGN §4).

:class:`BM25Index` indexes a sequence of :class:`~orchrm.execution.sandbox.domain.Doc` (title and
text) with `bm25s <https://github.com/xhluca/bm25s>`_ (Lucene BM25, ``k1=1.5``, ``b=0.75``) and
answers one query at a time. Queries are scored straight from bm25s's precomputed sparse score
matrix (``BM25.get_scores_from_ids``), which avoids the per-call overhead of ``BM25.retrieve``
(tokenizer objects, batching, progress bars) — a query over a few thousand documents takes tens
of microseconds. Results are deterministic: higher score first, ties broken by document order,
and documents that share no term with the query are never returned. Repeated queries are
answered from a small per-index cache (a sandbox re-runs the same plans many times).

Tokenisation: runs of Unicode letters and digits of the NFKC-normalised, case-folded text
(``Zürich`` stays one word, ``東京`` is kept; on ASCII text this is exactly lowercase ``[a-z0-9]+``),
English stop words (bm25s's list) dropped, and a light plural rule (``films`` -> ``film``; words
ending in ``ss``/``us``/``is`` are kept) so that a query and a document agree on simple
inflections without a stemmer dependency. A corpus in which no document has a single term is an
empty index: every search returns nothing.

>>> from orchrm.execution.sandbox.domain import Doc
>>> index = BM25Index([Doc("d1", "Paris", "Paris is the capital of France."),
...                    Doc("d2", "Berlin", "Berlin is the capital of Germany.")])
>>> [d.doc_id for d in index.search("capital of Germany", top_k=1)]
['d2']
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from orchrm.execution.sandbox.domain import Doc

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script
_CACHE_SIZE = 4096


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


_STOP: frozenset[str] | None = None


def tokenize(text: str) -> list[str]:
    """Index/query tokens of ``text``: case-folded words, stop words dropped, plurals folded.

    >>> tokenize("The Films of Paris"), tokenize("Zürich")
    (['film', 'paris'], ['zürich'])
    """
    global _STOP
    if _STOP is None:
        _STOP = _stopwords()
    out = []
    if not text.isascii():  # NFKC: composed and decomposed accents give the same word
        text = unicodedata.normalize("NFKC", text)
    for w in _WORD.findall(text.casefold()):
        if w in _STOP:
            continue
        if len(w) > 3 and w[-1] == "s" and w[-2] not in "su" and not w.endswith("is"):
            w = w[:-1]
        out.append(w)
    return out


class BM25Index:
    """A BM25 index over ``docs`` (title + text of each :class:`Doc`).

    ``search(query, top_k)`` returns at most ``top_k`` documents, best first (ties by document
    order), only documents that match at least one query term. Thread-safe for reads.
    """

    def __init__(self, docs: Sequence[Doc], *, k1: float = 1.5, b: float = 0.75) -> None:
        import bm25s

        self.docs: tuple[Doc, ...] = tuple(docs)
        corpus = [tokenize(f"{d.title} {d.text}") for d in self.docs]
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._vocab: dict[str, int] = {}
        if any(corpus):  # bm25s cannot index a corpus without a single term: that is an empty index
            self._bm25.index(corpus, show_progress=False)
            self._vocab = getattr(self._bm25, "vocab_dict", {})
        self._cache: OrderedDict[tuple[str, int], tuple[tuple[int, float], ...]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.docs)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (float64, in document order).

        Term scores are added one term at a time in the order of the terms' text, in float64:
        bm25s numbers its vocabulary in set order (which varies with Python's hash seed from one
        process to the next), and a float32 sum in that order could swap near-tied documents
        between worker processes.
        """
        terms = sorted({t for t in tokenize(query) if t in self._vocab})
        total = np.zeros(len(self.docs), dtype=np.float64)
        for t in terms:
            total += self._bm25.get_scores_from_ids([self._vocab[t]])
        return total

    def search_scored(self, query: str, top_k: int) -> list[tuple[Doc, float]]:
        """Like :meth:`search`, with each document's BM25 score."""
        if top_k <= 0:
            return []
        key = (query, top_k)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
        if hit is None:
            hit = self._rank(query, top_k)
            with self._lock:
                self._cache[key] = hit
                if len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
        return [(self.docs[i], s) for i, s in hit]

    def search(self, query: str, top_k: int) -> list[Doc]:
        """The ``top_k`` best documents for ``query`` (deterministic; ties by document order)."""
        return [d for d, _ in self.search_scored(query, top_k)]

    def _rank(self, query: str, top_k: int) -> tuple[tuple[int, float], ...]:
        scores = self.scores(query)
        matched = np.flatnonzero(scores > 0)
        if matched.size == 0:
            return ()
        if matched.size > top_k:
            # keep every document tied with the k-th best, then order stably
            kth = np.partition(scores[matched], matched.size - top_k)[matched.size - top_k]
            matched = matched[scores[matched] >= kth]
        order = matched[np.argsort(-scores[matched], kind="stable")][:top_k]
        return tuple((int(i), float(scores[i])) for i in order)


_INDEXES: dict[str, BM25Index] = {}
_INDEX_LOCK = threading.Lock()


def cached_index(key: str, make_docs: Callable[[], Sequence[Doc]]) -> BM25Index:
    """The per-process index for ``key``, built from ``make_docs()`` on first use only.

    Use a key that identifies the corpus (e.g. ``"webqa:squad:dev-v1.1"``, or a hash of the
    documents' ids for a generated corpus): the same key always returns the same index.
    """
    index = _INDEXES.get(key)
    if index is None:
        with _INDEX_LOCK:
            index = _INDEXES.get(key)
            if index is None:
                index = _INDEXES[key] = BM25Index(make_docs())
    return index


__all__ = ["BM25Index", "cached_index", "tokenize"]
