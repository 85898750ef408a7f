"""Decision Tree and Random Forest on flattened features (shared/research/anomaly_data.md §4): per metric
mean/std/min/max/last/slope/late-minus-early/missing share, TF-IDF of the normalised log lines, and the hosts
(count and one-hot), so the trees see the same three modalities as KAIOPS."""

from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.ensemble import RandomForestClassifier
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import MultiLabelBinarizer
from sklearn.tree import DecisionTreeClassifier

from agent.kaiops import METRICS, STEPS
from agent.kaiops.dataset import Task
from agent.kaiops.encode import normalise
from agent.kaiops.features import raw_metrics

BASELINES = ("dt", "rf")


def metric_stats(task: Task) -> np.ndarray:
    raw = raw_metrics(task)
    out = []
    t = np.arange(STEPS)
    for j in range(len(METRICS)):
        col = raw[:, j]
        ok = ~np.isnan(col)
        if not ok.any():
            out += [0.0] * 7 + [1.0]
            continue
        v = col[ok]
        slope = float(np.polyfit(t[ok], v, 1)[0]) if ok.sum() > 1 else 0.0
        early, late = col[:20][ok[:20]], col[-5:][ok[-5:]]
        shift = (late.mean() if late.size else v[-1]) - (early.mean() if early.size else v[0])
        out += [v.mean(), v.std(), v.min(), v.max(), v[-1], slope, shift, 1 - ok.mean()]
    return np.asarray(out, dtype=np.float64)


class FlatFeatures:
    def __init__(self) -> None:
        self.tfidf = TfidfVectorizer(max_features=500, ngram_range=(1, 2), token_pattern=r"[A-Za-z_][A-Za-z_]+")
        self.hosts = MultiLabelBinarizer(sparse_output=True)

    @staticmethod
    def _text(task: Task) -> str:
        return "\n".join(normalise(line) for line in task.logs)

    def fit_transform(self, tasks: list[Task]) -> sparse.csr_matrix:
        logs = self.tfidf.fit_transform([self._text(t) for t in tasks])
        hosts = self.hosts.fit_transform([t.hosts for t in tasks])
        return self._stack(tasks, logs, hosts)

    def transform(self, tasks: list[Task]) -> sparse.csr_matrix:
        import warnings

        logs = self.tfidf.transform([self._text(t) for t in tasks])
        with warnings.catch_warnings():  # hosts never seen in training: ignored, as KAIOPS maps them to "unknown"
            warnings.simplefilter("ignore")
            hosts = self.hosts.transform([t.hosts for t in tasks])
        return self._stack(tasks, logs, hosts)

    @staticmethod
    def _stack(tasks: list[Task], logs: sparse.spmatrix, hosts: sparse.spmatrix) -> sparse.csr_matrix:
        dense = np.stack([np.append(metric_stats(t), len(t.hosts)) for t in tasks])
        return sparse.hstack([sparse.csr_matrix(dense), logs, hosts]).tocsr()


def make(name: str, seed: int) -> DecisionTreeClassifier | RandomForestClassifier:
    if name == "dt":
        return DecisionTreeClassifier(random_state=seed)
    if name == "rf":
        return RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=1)
    raise ValueError(f"unknown baseline {name!r}; choose from {', '.join(BASELINES)}")


def fit_predict(names: tuple[str, ...], train: list[Task], y: np.ndarray, test: list[Task],
                seed: int = 0) -> dict[str, np.ndarray]:
    feats = FlatFeatures()
    x_train = feats.fit_transform(train)
    x_test = feats.transform(test)
    return {name: make(name, seed).fit(x_train, y).predict(x_test) for name in names}
