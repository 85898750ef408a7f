"""How much of an incident's vocabulary each leaf's documentation shares: a TF-IDF match of the incident's text
against every leaf's own words (its name, description and runbook, and the knowledge-base passages about it).

The sentence embedding reads an incident for its gist; a bug report's specific words ("riser", "ACS",
"persistence", "PSU", "peermem") are where it names its cause, and the small model rarely weighs them. The
score is how far above the average leaf this one matches (a z-score over every leaf), so a text that matches
nothing in particular lifts no leaf. Only the product's own documentation is read, never past incidents (history
has its own signal, the retrieval priors)."""

from __future__ import annotations

from functools import lru_cache

from sklearn.feature_extraction.text import TfidfVectorizer

from agent.taxonomy import Taxonomy

# words of two or more characters that start with a letter: names like nvidia_peermem, mlx5_0 and ib_write_bw stay
# whole, numbers (versions, addresses, times) do not count
TOKEN = r"(?u)\b[A-Za-z][A-Za-z0-9_+-]+\b"
# a word in more than half of the leaves' documents says nothing about which leaf
MAX_DF = 0.5
# single words and pairs of them ("row remapping", "peer memory"): pairs told the dev texts' leaves apart better
# (eval/results/reading.md)
NGRAMS = (1, 2)


class Lexicon:
    """A TF-IDF index of every leaf's documentation."""

    def __init__(self, taxonomy: Taxonomy, documents: dict[str, str]):
        self.labels = [leaf.label for leaf in taxonomy.leaves()]
        own = {label: " ".join([label.replace(".", " ").replace("_", " "), taxonomy.node(label).description,
                                taxonomy.node(label).runbook]) for label in self.labels}
        corpus = [f"{own[label]} {documents.get(label, '')}" for label in self.labels]
        self.vectorizer = TfidfVectorizer(sublinear_tf=True, stop_words="english", token_pattern=TOKEN,
                                          max_df=MAX_DF, ngram_range=NGRAMS)
        self.matrix = self.vectorizer.fit_transform(corpus)

    def scores(self, text: str) -> dict[str, float]:
        """Each leaf's match with `text`, in standard deviations above the mean over every leaf (0 when the text
        matches no leaf's words)."""
        match = (self.matrix @ self.vectorizer.transform([text]).T).toarray().ravel()
        spread = float(match.std())
        if spread == 0.0:
            return dict.fromkeys(self.labels, 0.0)
        z = (match - match.mean()) / spread
        return {label: float(value) for label, value in zip(self.labels, z, strict=True)}


def kb_documents(taxonomy: Taxonomy) -> dict[str, str]:
    """The shipped knowledge base's passages, joined per leaf they are about (a passage about a category is
    every leaf's below it: too broad to tell them apart, so it is left out)."""
    from agent.knowledge.kb_index import KB_DIR, load_passages

    leaves = {leaf.label for leaf in taxonomy.leaves()}
    passages, _, _ = load_passages(KB_DIR)
    out: dict[str, list[str]] = {}
    for passage in passages:
        for node in passage.nodes:
            if node in leaves:
                out.setdefault(node, []).append(passage.text)
    return {label: " ".join(texts) for label, texts in out.items()}


@lru_cache(maxsize=4)
def lexicon(taxonomy: Taxonomy) -> Lexicon:
    """The taxonomy's lexicon over the shipped knowledge base (built once per process: well under a second)."""
    return Lexicon(taxonomy, kb_documents(taxonomy))
