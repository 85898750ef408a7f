"""The Prometheus HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/): instant and range queries
with httpx, every call with a timeout, every failure a `PrometheusError` that says what was asked and what came
back (unreachable, HTTP status, the API's own error), never an empty answer that would read as healthy.

Credentials stay out of the URL (it is saved with the run): env AIDAI_PROMETHEUS_TOKEN (sent as a bearer token)
or AIDAI_PROMETHEUS_BASIC=USER:PASSWORD (basic auth, as Prometheus' own web config and most proxies take).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

TIMEOUT_S = 10.0
MAX_ERROR_CHARS = 300


class PrometheusError(RuntimeError):
    """Prometheus could not answer a query: the diagnosis goes on without it."""


class PrometheusUrlError(ValueError):
    """--prometheus is not a URL this can query (exit 2 on the command line, 400 from the API)."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]  # without __name__ when a function dropped it
    values: list[tuple[float, float]]  # (unix time, value); one pair for an instant query


def check_url(url: str) -> str:
    """The base URL, refused with a clear message when it cannot be one (or carries a password)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrometheusUrlError(f"--prometheus {url!r}: expected http(s)://HOST:PORT of a Prometheus server")
    if parts.password is not None or parts.username is not None:
        raise PrometheusUrlError("--prometheus: put no credentials in the URL (it is saved with the run); set "
                         "AIDAI_PROMETHEUS_TOKEN (bearer) or AIDAI_PROMETHEUS_BASIC=USER:PASSWORD")
    try:
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise PrometheusUrlError(f"--prometheus {url!r}: bad port") from None
    return url.strip().rstrip("/")


def _auth(env: dict[str, str]) -> tuple[dict[str, str], httpx.BasicAuth | None]:
    token = env.get("AIDAI_PROMETHEUS_TOKEN", "").strip()
    basic = env.get("AIDAI_PROMETHEUS_BASIC", "")
    if token:
        return {"Authorization": f"Bearer {token}"}, None
    if basic:
        user, sep, password = basic.partition(":")
        if not sep:
            raise PrometheusError("AIDAI_PROMETHEUS_BASIC must be USER:PASSWORD")
        return {}, httpx.BasicAuth(user, password)
    return {}, None


class Prometheus:
    def __init__(self, url: str, timeout_s: float = TIMEOUT_S, env: dict[str, str] | None = None):
        self.url = check_url(url)
        headers, auth = _auth(dict(os.environ) if env is None else env)
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, headers=headers, auth=auth,
                                  follow_redirects=False)
        self.timeout_s = timeout_s
        self.queries = 0

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, promql: str, at: float) -> list[Series]:
        """An instant query evaluated at unix time `at`."""
        return self._get("/api/v1/query", {"query": promql, "time": f"{at:.3f}"})

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[Series]:
        return self._get("/api/v1/query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": f"{step_s:g}"})

    def _get(self, path: str, params: dict[str, str]) -> list[Series]:
        self.queries += 1
        where = f"{self.url}{path}"
        try:
            response = self._http.get(path, params=params)
        except httpx.TimeoutException:
            raise PrometheusError(f"{where}: no answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise PrometheusError(f"{where}: cannot connect ({type(exc).__name__}: {exc})") from None
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "status" not in body:
            raise PrometheusError(f"{where}: HTTP {response.status_code}, not a Prometheus API answer: "
                                  f"{response.text[:MAX_ERROR_CHARS]!r}")
        if body["status"] != "success":
            raise PrometheusError(f"{where}: HTTP {response.status_code}, {body.get('errorType', 'error')}: "
                                  f"{str(body.get('error', ''))[:MAX_ERROR_CHARS]} (query {params['query']})")
        data = body.get("data") or {}
        kind, result = data.get("resultType"), data.get("result")
        if kind not in ("vector", "matrix") or not isinstance(result, list):
            raise PrometheusError(f"{where}: unexpected result type {kind!r} for {params['query']}")
        out = []
        for item in result:
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            pairs = item.get("values") if kind == "matrix" else [item.get("value")]
            out.append(Series(labels, [(float(t), float(v)) for t, v in pairs or [] if v is not None]))
        return out

    def ready(self) -> bool:
        """GET /-/ready answers 200 (Prometheus has loaded its data and serves queries)."""
        try:
            return self._http.get("/-/ready").status_code == 200
        except httpx.HTTPError:
            return False
