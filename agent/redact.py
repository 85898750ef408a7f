"""Reversible redaction of what leaves the customer's machine (every LLM prompt, the escalation ticket): secrets,
tokens, e-mail addresses, user names, home/data paths, IP addresses and host names become numbered placeholders.
The same value always maps to the same placeholder within one run, so "<host-1> cannot reach <ip-2>" stays
readable, and the model's answers can be restored for the local report. The mapping (placeholder -> original)
is saved next to the run with 0600 permissions and never leaves the machine.

Secrets are found by Yelp's detect-secrets (its vendor-key plugins, its keyword detector and its base64
high-entropy detector) plus our own rules for what it lacks (cloud keys it does not know, passwords in curl/.netrc/
connection strings, auth headers, host names where logs put them). Structured evidence (check and finding ids,
device names, versions, PCI ids, GPU UUIDs, taxonomy labels, source-code paths) is never redacted: a user, host, IP
or path match that lies inside such an id stays as it is.

Speed: each rule runs only on the lines that hold one of its needles (plain substrings, searched in the lower-cased
text), and a text that repeats lines (a log) is redacted one distinct line at a time."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.keyword import (
    CONFIG_DENYLIST_REGEX_TO_GROUP,
    DENYLIST_REGEX,
    QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
    KeywordDetector,
)

# ---- secrets: our rules, run before detect-secrets ------------------------------------------------------------
# A pattern's `keep` group (the name of the parameter, the scheme) stays; the rest of the match is the secret. A rule
# runs only when one of its needles (lower case) is in the lower-cased text: most logs hold none of them.
_BLOCK_SECRETS: list[tuple[str, re.Pattern[str], tuple[str, ...]]] = [  # these may span lines
    # to its END line, or to the end of the text when a prompt budget cut the END line off (PGP blocks too)
    ("private-key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                               r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S), ("private key",)),
    # .netrc: "machine HOST login USER password SECRET", on one line or several
    ("secret", re.compile(r"(?im)(?P<keep>(?:\bmachine\s+\S+\s+(?:login\s+\S+\s+)?|^[ \t]*)password[ \t]+)\S+"
                          r"(?=[ \t]*(?:$|machine\b|login\b|account\b|macdef\b))"), ("password",)),
]
_B64 = r"[A-Za-z0-9+/]"
_SECRETS: list[tuple[str, re.Pattern[str], tuple[str, ...]]] = [
    ("private-key", re.compile(r"LS0tLS1CRUdJTi" + _B64 + r"{20,}={0,2}"),  # a base64-encoded PEM, header and all
     ("ls0tls1crudjti",)),
    ("private-key", re.compile(r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b"), ("age-secret-key-1",)),
    # a PEM body without its header: DER in base64 ("MII..."), an OpenSSH key ("openssh-key-v1" in base64)
    ("private-key", re.compile(r"\bMII" + _B64 + r"{60,}={0,2}|\bb3BlbnNzaC1rZXktdjE" + _B64 + r"{20,}={0,2}"),
     ("mii", "b3blbnnzac1rzxktdje")),
    # JWTs whole (detect-secrets' own pattern stops before the signature)
    ("secret", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_/\\-]{5,}(?:\.[A-Za-z0-9_/\\+-]*={0,2})?"), ("eyj",)),
    # AWS: access key ids of every kind, Bedrock API keys, MWS, AppSync
    ("secret", re.compile(r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b"),
     ("a3t", "akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "apka")),
    ("secret", re.compile(r"\bABSK" + _B64 + r"{40,}={0,2}|\bbedrock-api-key-" + _B64 + r"{20,}={0,2}"),
     ("absk", "bedrock-api-key-")),
    ("secret", re.compile(r"\bamzn\.mws\.[0-9a-f-]{36}\b|\bda2-[a-z0-9]{26}\b"), ("amzn.mws.", "da2-")),
    # Azure: AD client secrets (xxx8Q~...), storage/service-bus/app-config keys, DevOps PATs
    ("secret", re.compile(r"(?<![\w~.-])[\w~.-]{3}\dQ~[\w~.-]{31,34}(?![\w~-])"), ("q~",)),
    ("secret", re.compile(r"(?i)(?P<keep>\b(?:AccountKey|SharedAccessKey|SharedSecretValue|Secret)\s*=\s*)"
                          + _B64 + r"{20,}={0,3}"), ("accountkey", "sharedaccesskey", "sharedsecretvalue", "secret")),
    ("secret", re.compile(r"\b[A-Za-z0-9]{52}JQQJ9[0-9A-Z]{2}[A-Za-z0-9]{17}\b|\b[A-Za-z0-9]{76}AZDO[A-Za-z0-9]{4}\b"),
     ("jqqj9", "azdo")),
    # Google: API keys, OAuth access/refresh tokens, client secrets
    ("secret", re.compile(r"\bAIza[\w-]{35}(?![\w-])|\bya29\.[\w.-]{20,}|\bGOCSPX-[\w-]{28}\b|\b1//0[\w-]{30,}"),
     ("aiza", "ya29.", "gocspx-", "1//0")),
    # Slack: every xox?- token, config tokens, app tokens, webhook secrets
    ("secret", re.compile(r"\bxox[a-z]\.xox[a-z]-\d-[A-Za-z0-9-]{20,}|\bxox[a-z]-[A-Za-z0-9-]{10,}"
                          r"|\bxapp-\d-[A-Za-z0-9-]{20,}"), ("xox", "xapp-")),
    ("secret", re.compile(r"(?P<keep>\bhooks\.slack\.com/(?:services|workflows|triggers)/)[\w/]+"),
     ("hooks.slack.com",)),
    # OpenAI / Anthropic (sk-ant-...), Hugging Face, GitHub
    ("secret", re.compile(r"\b(?:sk|rk)-(?:proj-|ant-(?:api|admin)\d\d-)?[A-Za-z0-9_-]{16,}"), ("sk-", "rk-")),
    ("secret", re.compile(r"\bhf_[A-Za-z0-9]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_\w{40,}"),
     ("hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    # other vendors with a fixed prefix: GitLab, Stripe, PyPI, Vault, Grafana, Databricks, Docker, Groq, npm, ...
    ("secret", re.compile(r"\bgl(?:pat|ptt|dt|rt|cbt|imt|agent|oas|soat|ffct|ft|rtr)-[\w-]{20,}|\bGR1348941[\w-]{20,}"
                          r"|\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}|\bwhsec_[A-Za-z0-9]{24,}|\bpypi-[\w-]{50,}"
                          r"|\bhv[sbr]\.[\w-]{20,}|\bglsa_[A-Za-z0-9]{32}_[0-9a-f]{8}\b|\bglc_" + _B64 + r"{32,}={0,2}"
                          r"|\beyJrIjoi" + _B64 + r"{30,}={0,2}|\bdapi[0-9a-h]{32}(?:-\d)?\b|\bdckr_pat_[\w-]{27,}"
                          r"|\bgsk_[A-Za-z0-9]{48,}|\bnpm_[A-Za-z0-9]{36}\b|\bSG\.[\w-]{22}\.[\w-]{43}\b"
                          r"|\bsq0(?:atp|csp)-[\w-]{22,}|\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b|\bAKCp[A-Za-z0-9]{69}\b"
                          r"|\bATATT3[\w=-]{150,}|\bATBB[A-Za-z0-9]{32}\b|\bNRAK-[A-Z0-9]{27}\b|\bPMAK-[a-f0-9-]{59}\b"
                          r"|\bdp\.(?:ct|pt|st|sa|scim|audit)\.(?:[a-z0-9_-]+\.)?[A-Za-z0-9]{40,}|\bdo[opr]_v1_[a-f0-9]{64}\b"
                          r"|\b[a-z0-9]{36}NRAL\b|\bNR(?:AA|AK|II|IQ|RA)-[A-Za-z0-9_-]{27,}|\boy2[a-z0-9]{43}\b|\b\d{8,10}:AA[\w-]{30,}"
                          r"|\b00[A-Za-z0-9]{13}![\w.]{40,}"),
     ("glpat-", "glptt-", "gldt-", "glrt-", "glcbt-", "glimt-", "glagent-", "gloas-", "glsoat-", "glffct-", "glft-",
      "glrtr-", "gr1348941", "k_live_", "k_test_", "whsec_", "pypi-", "hvs.", "hvb.", "hvr.", "glsa_", "glc_",
      "eyjrijoi", "dapi", "dckr_pat_", "gsk_", "npm_", "sg.", "sq0", "shp", "akcp", "atatt3", "atbb", "nrak-",
      "pmak-", "dp.", "_v1_", "nral", "nraa-", "nrii-", "nriq-", "nrra-", "oy2", ":aa", "!")),
    ("secret", re.compile(r"(?<![\w.])[sbr]\.(?=[\w-]*\d)(?=[\w-]*[A-Z])(?=[\w-]*[a-z])[\w-]{24,}"),  # Vault: s.<24+>
     ("s.", "b.", "r.")),
    # passwords: scheme://user:PASSWORD@, curl -u user:PASSWORD, code and config files (.netrc: _BLOCK_SECRETS)
    ("secret", re.compile(r"(?P<keep>\b[a-zA-Z][\w+.-]*://[^/\s:@]*:)[^@\s/]+(?=@)"), ("://",)),
    ("secret", re.compile(r"(?P<keep>(?<!\S)(?:-u|--user)\s+['\"]?[^\s:'\"]*['\"]?:['\"]?)[^\s'\"]+"),
     ("-u", "--user")),
    # curl -u "KEY:" (an API key sent as the user name with an empty password: Stripe, Mailgun, Jira tokens)
    ("secret", re.compile(r"(?P<keep>(?<!\S)(?:-u|--user)\s+['\"]?)[^\s:'\"]{4,}(?=:['\"]?(?:\s|$))"),
     ("-u", "--user")),
    # ODBC / ADO connection strings: Pwd=...; or Password={...} (braces may hold ';')
    ("secret", re.compile(r"(?i)(?P<keep>(?:^|[;\s\"'])(?:pwd|password)\s*=\s*)(?:\{(?:[^}\n]|\}\})*\}|[^;\s\"'{]+)"),
     ("pwd", "password")),
    # a key in a build-config field: buildConfigField "String", "API_KEY", "\"value\"" (Gradle), resValue the same
    ("secret", re.compile(r"(?i)\b(?:buildConfigField|resValue)\s*\(?\s*\"[^\"\n]*\"\s*,\s*\"[^\"\n]*"
                          r"(?:key|token|secret|passw|pwd|credential)[^\"\n]*\"\s*,\s*\"(?:\\\")?(?P<v>[^\"\\\n]{4,})"),
     ("buildconfigfield", "resvalue")),
    ("secret", re.compile(r"(?i)(?P<keep>\bNetworkCredential\(\s*\"[^\"]*\",\s*\")[^\"]+"), ("networkcredential",)),
    ("secret", re.compile(r"(?i)(?P<keep>\bkey=\"[^\"]*(?:password|passwd|pwd|secret|token|apikey|api_key)[^\"]*\"\s+"
                          r"value=\")[^\"]+"), ("value=",)),
    ("secret", re.compile(r"(?i)(?P<keep>\b(?:password|passphrase|secret)\s+(?:is|was)\s+(?P<q>[\"']))[^\n]{4,}?"
                          r"(?=(?P=q))"),
     ("password is", "password was", "passphrase is", "passphrase was", "secret is", "secret was")),
    # auth headers: Bearer / Basic / Token / Api-Token / bare values
    ("secret", re.compile(r"(?i)(?P<keep>\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|api-token|"
                          r"digest|negotiate|sso-key|apikey|key|ssws)\s+)?)[\w.~+/:=-]{8,}"), ("authorization",)),
    ("secret", re.compile(r"(?i)(?P<keep>\b(?:bearer|basic|token|api-token|ssws)(?::\s*|\s+))(?=[\w.~+/-]*[\d=])"
                          r"[\w.~+/-]{12,}=*"), ("bearer", "basic", "token", "api-token", "ssws")),
    # an Api-Token header names its value a token whatever it looks like (no digit needed, unlike "Token x")
    ("secret", re.compile(r"(?i)(?P<keep>\b(?:x-)?api-?token[\"']?(?::\s*|\s+)[\"']?)(?!<)[\w.~+/-]{8,}=*"),
     ("api-token", "apitoken")),
    ("secret", re.compile(r"(?i)(?P<keep>\b(?:set-)?cookie:[ \t]*)[^\n]*[^\s]"), ("cookie:",)),
    # command-line flags: --password X, --token X, mysql -pX, docker login -u U -p X
    ("secret", re.compile(r"(?i)(?P<keep>(?<!\S)--?(?:password|passwd|passphrase|pass|token|api-key|apikey|secret|"
                          r"access-token|auth-token|client-secret)[ =]['\"]?)(?![-'\"])[^\s'\"]+"),
     ("--pass", "-pass", "--token", "-token", "--api", "--secret", "-secret", "--access-token", "--auth-token",
      "--client-secret", "--apikey")),
    ("secret", re.compile(r"(?P<keep>\b(?:login|mysql|mysqladmin|mysqldump)\b[^\n|;&]*?(?<!\S)-p ?)(?![\s-])\S+"),
     ("login", "mysql")),
    ("secret", re.compile(r"(?i)(?P<keep>[?&](?:sig|sv|token|key|access_token|api_key|apikey|t)=)[^&\s\"']{8,}"),
     ("?", "&")),
]
# keyword assignments (password=..., SECRET_KEY: ..., api-key=...): run only on the lines that name a keyword
_KEYWORD_GATE = re.compile(r"pass|pwd|secret|token|key|credential|sas|signature|contrase|_id\b|login|crumb")
_TOKEN = r"token(?!s\b|s_|izer|_?(?:count|len|num|ids?\b|type|budget|limit|usage))"  # not max_tokens, tokenizer
_KEYWORD_RULES: list[tuple[str, re.Pattern[str]]] = [
    # a YAML line "secret_key: the rest of the line" (no second key on it): the value may hold spaces
    ("secret", re.compile(r"(?im)(?P<keep>^[ \t]*[\w.-]*?(?:password|passwd|passphrase|secret|api[_-]?key|"
                          r"access[_-]?key|private[_-]?key|" + _TOKEN + r")[\w.-]*[ \t]*:[ \t]*)(?![\"'`<\s])"
                          r"(?![^\n]*\s[\w.-]+[=:])[^\n]*[^\s,;]")),
    ("secret", re.compile(r"(?i)(?P<keep>\b[\w.-]*?(?:password|passwd|passphrase|pwd|(?<![a-z])pass(?=[\"'\s=:_-])|"
                          r"secret|"
                          + _TOKEN + r"|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|private[_-]?key|[._-]key\b|"
                          r"(?-i:[a-z]Key|KEY)|credentials?|\bsas(?:[_-]?(?:token|key|url))?\b|\bsignature\b)"
                          r"[\w.-]*[\"'\]]?[ \t]*"
                          r"(?::=|=>|===?|!==?|[=:])[ \t]*@?(?P<q>[\"'`])?)"
                          r"(?!<)(?(q)[^\n]{4,}?(?=(?P=q))|[^\s\"',;]{4,})")),
    # an environment-style *_ID / *_KEY / *_TOKEN holding a random value (CC_TEST_REPORTER_ID, TWITTER_ID), a login or
    # crumb holding 32+ hex digits (sonar.login=..., Jenkins-Crumb: ...)
    ("secret", re.compile(r"(?P<keep>\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:ID|SID|KEY|TOKEN|SECRET)[\"']?[ \t]*[=:]"
                          r"[ \t]*[\"']?)(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{16,}")),
    ("secret", re.compile(r"(?i)(?P<keep>\b[\w.$-]*(?:login|crumb)[\"']?[ \t]*(?:=>|[=:,])[ \t]*[\"']?)"
                          r"[0-9a-f]{32,}\b")),
    ("secret", re.compile(r"(?P<q>[\"'`])(?P<v>[^\n]{4,}?)(?P=q)[ \t]*(?:===?|!==?)[ \t]*"
                          r"(?i:[\w.]*(?:password|passwd|secret|api_?key|private_key))")),
]
# tokens that are secrets when random enough (detect-secrets' Shannon entropy of their random part): a vendor-looking
# token (short prefix, separator, 20+ characters with a digit) and an unquoted base64 blob with + or /
_RANDOM_TOKENS = re.compile(r"\b[A-Za-z]{2,10}(?:[_-][A-Za-z0-9]{1,12})?[_.-](?=[A-Za-z0-9]*\d)[A-Za-z0-9]{20,}\b"
                            r"|(?<![\w/+=.-])(?=[A-Za-z0-9+/]*[+/]|[A-Za-z0-9]{40})(?=[A-Za-z0-9+/]*\d)"
                            r"(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])[A-Za-z0-9][A-Za-z0-9+/]{31,}={0,2}"
                            r"(?![\w/+=])")
_HOST_KV = re.compile(r"(?i)(?P<keep>\b(?:host(?:name)?|node(?:name|list)?|master_addr|rdzv_endpoint|server)"
                      r"[\"']?\s{0,3}[=:]\s{0,3}[\"']?)(?!<)(?=[\w.-]*[A-Za-z])(?=[\w.-]*[\d-])[A-Za-z0-9][\w.-]*")
_PATH = re.compile(r"(?<![\w<>/.~-])(?:~[\w.-]*|/(?:home|Users|root|mnt|data|scratch|workspace|nfs|gpfs|lustre|"
                   r"datasets?|checkpoints?))(?:/[^\s\"'`,;:()\[\]{}<>|]+)+")
_USER_AT = re.compile(r"(?<![\w.+%<-])[A-Za-z_][A-Za-z0-9_.-]{0,31}(?=@(?!0x)[A-Za-z0-9<])")  # alice@host (ssh, scp)
_AT_HOST = re.compile(r"(?<=>@)(?!<)[A-Za-z0-9][\w-]*(?:\.[\w-]+)*")  # the host after a redacted user
_USER_KV = re.compile(r"(?i)(?P<keep>\b(?:user(?:name)?|user\s?id|uid|login|owner|account)\s{0,3}[=:]\s{0,3}"
                      r"[\"']?)(?!<)(?=[\w.-]*[A-Za-z])[A-Za-z_][\w.-]{1,31}(?=[\"';,\s]|$)")
_URL_USER = re.compile(r"(?<=://)(?!<)[^/\s:@]+(?=:<secret-\d+>@|@)")  # the user of scheme://user[:secret]@host
_PLACEHOLDER = re.compile(r"<(?:secret|private-key|email|path|user|host|ip)-\d+>")
# names that are too common as words to replace wherever they appear (they are still caught as user@ or user=)
COMMON_USERS = frozenset({"root", "user", "admin", "ubuntu", "nobody", "runner", "default", "guest", "test"})
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
# (no leading zeros: 04.103.00.00 is a firmware version)
_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                   r"(?![\w.])")
# IPv6 needs a "::" or seven colons, so PCI bus ids (0000:5d:00.0) and times (12:30:01) are left alone
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])"
                   r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,5})?(?![\w:.])"
                   r"|(?<![\w:])::(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4}(?![\w:.])")
# NCCL names an address by its interface ("Using eth0:fe80::1ff:fe23:4567:890a%eth0<0>", "[0]ib0:2001:db8::7<0>"):
# the ":" before it hides it from _IPV6's boundary; the interface and the link-local zone (%eth0) stay
_IPV6_IFACE = re.compile(r"(?<![\w:.-])(?P<keep>[A-Za-z][\w.-]{0,14}:)(?P<ip>(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}"
                         r"|(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,5})?"
                         r"|::(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4})(?![\w:.])")
_FQDN = re.compile(r"(?i)\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:com|net|org|io|ai|cloud|dev|internal|local|"
                   r"lan|corp|cluster|svc|intra|azure|amazonaws|googleapis|cn|de|uk|fr|jp)\b")
# public names a reader needs (code hosting, package indexes, vendors' and projects' documentation): a URL to
# github.com/tensorflow/... names a project, not the customer. Cloud endpoints whose sub-domain is the customer's
# (bucket.s3.amazonaws.com, acct.blob.core.windows.net) are not here.
PUBLIC_DOMAINS = frozenset({
    "github.com", "githubusercontent.com", "github.io", "gitlab.com", "bitbucket.org", "sourceforge.net",
    "pypi.org", "pythonhosted.org", "python.org", "anaconda.org", "anaconda.com", "conda.io", "conda-forge.org",
    "pytorch.org", "tensorflow.org", "jax.dev", "nvidia.com", "nvcr.io", "mellanox.com", "docker.com", "docker.io",
    "quay.io", "kubernetes.io", "k8s.io", "readthedocs.io", "readthedocs.org", "stackoverflow.com",
    "kernel.org", "ubuntu.com", "debian.org", "redhat.com", "rockylinux.org", "schedmd.com", "open-mpi.org",
    "openucx.org", "apache.org", "microsoft.com", "google.com", "arxiv.org", "wikipedia.org", "deepspeed.ai",
    "ray.io", "huggingface.co", "hf.co"})


def is_public_host(name: str) -> bool:
    """A well-known public domain or a name under one (docs.nvidia.com, files.pythonhosted.org)."""
    name = name.lower().rstrip(".")
    return any(name == d or name.endswith("." + d) for d in PUBLIC_DOMAINS)


# host names the way clusters name nodes (gpu-a17, node-12, worker3, ip-10-0-0-7) when written as such
# (a hyphen is required: gpu0 / GPU5 are devices; GPU UUIDs stay for the provider; "<" skips placeholders)
_NODE_NAME = re.compile(r"(?i)(?<![<\w-])(?!gpu-[0-9a-f]{8}-)(?:ip-\d+-\d+-\d+-\d+|"
                        r"(?:gpu|node|worker|compute|host|vm|dgx|hgx)-[a-z0-9-]*\d[a-z0-9-]*)\b")
# Kubernetes pod names: <deployment>-<replicaset hash>-<5 chars> (the hash alphabet has no vowels, 0, 1 or 3)
_POD = re.compile(r"(?<![\w.<-])[a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?=[a-z0-9-]*\d)[bcdfghjklmnpqrstvwxz2456789]{5,10}"
                  r"-[bcdfghjklmnpqrstvwxz2456789]{5}(?![\w-])")
# host names where logs put them: the syslog/journal host field, the NCCL "host:pid:tid [rank]" prefix (also after
# torchrun's "[rank3]:" / "[default3]:" line prefix), pods named as such, the host of ssh/scp user@host and of a
# shell prompt
_HOSTNAME = r"[A-Za-z0-9][\w.-]{0,62}"
_LINE_HOST = re.compile(  # matched at the start of each line
    r"(?:<\d+>)?(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?"
    r"(?:Z|[+-]\d\d:?\d\d)?) (?P<syslog>" + _HOSTNAME + r") (?=[\w./@-]+(?:\[\d+\])?: )"
    r"|(?:\[[\w-]*\d+\]:\s*)?(?P<nccl>" + _HOSTNAME + r"):\d+:\d+ \[\d+\]"
    r"|[\w.-]+@(?P<prompt>[A-Za-z0-9][\w-]*):[~/]")
_NODE = r"[A-Za-z][\w.-]*?(?:-[\w.-]*\d|\d[\w.-]*-)[\w.-]*"  # a host name written with a hyphen and a digit
_NAMED_HOSTS: list[tuple[re.Pattern[str], re.Pattern[str]]] = [  # (gate, pattern): run on the lines the gate finds
    (re.compile("pod"), re.compile(r"(?i:\bpod[/ =:\"']+)(?P<pod>[a-z0-9][a-z0-9.-]*[a-z0-9])")),
    (re.compile("ssh|scp|rsync|sftp|mosh|pdsh"),
     re.compile(r"\b(?:ssh|scp|rsync|sftp|mosh|pdsh)\b[^\n]*?[\s'\"][\w.-]+@(?P<ssh>[A-Za-z0-9][\w-]*)(?=[\s:'\"]|$)"
                r"|\bssh\b[^\n|;&]*?\s(?P<sshhost>" + _NODE + r")(?=[\s'\"]|$)")),
    # nccl-tests: "#  Rank  0 Group  0 Pid 895544 on     h100-2 device  0 [0002:00:01] NVIDIA H100 80GB HBM3"
    (re.compile("pid"), re.compile(r"\bPid\s+\d+\s+on\s+(?P<nccltests>" + _HOSTNAME + r")\s+device\s+\d")),
    # Slurm: "srun: error: h100-2: task 5: ...", "*** JOB 12 ON h100-2 CANCELLED ..."
    (re.compile("srun|slurm| on "), re.compile(r"\berror: (?P<srun>" + _HOSTNAME + r"): tasks? \d"
                                                r"|\*\*\* (?:JOB|STEP) \S+ ON (?P<slurm>" + _HOSTNAME + r") ")),
    # MPI / Kubernetes / c10d: "on node h100-4", "assigned ml/pod to h100-12", "connect to [h100-9]:29500"
    (re.compile("node|host|assigned|]:|connect"),
     re.compile(r"\b(?:on|to|from) (?:node|host) (?P<on>" + _NODE + r")\b|\bassigned \S+ to (?P<to>" + _NODE + r")\b"
                r"|\[(?P<bracket>[A-Za-z][\w.-]*)\]:\d{2,5}\b"
                r"|\b(?i:connect(?:ing|ed)?) to (?P<hp>" + _NODE + r"):\d{2,5}\b")),
]
_POD_HINT = re.compile(r"-[a-z0-9]{5,10}-[a-z0-9]{5}(?![\w-])")  # cheap: where a pod name may end

# ---- structured evidence: never redacted ---------------------------------------------------------------------
_EVIDENCE = re.compile(
    r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+:[A-Za-z][\w.-]*"  # check:finding (xid_scan:xid_48)
    r"|\b(?:s?xid)_\d+\b"  # finding ids
    r"|\b[A-Z][A-Z0-9]*(?:\.[A-Z][A-Z0-9_]*)+\b"  # taxonomy labels (GPU.MEMORY.UNCORRECTABLE_ECC)
    r"|\b(?:GPU|MIG)-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"  # GPU / MIG UUIDs
    r"|\b(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b"  # PCI addresses (0000:3b:00.0)
    r"|\b(?:GPU|gpu|nvidia|nvswitch|nvidia-nvswitch|mlx5_|ib|hsn|eth|nvme)\d+\b"  # device entities
    r"|(?<![\w.:])v?\d+(?:\.\d+)+(?:[-+~][A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)+(?![\w.])"  # versions (23.10-1.1.9.0)
    r"|(?<![\w.:])v?\d+\.\d+(?:\.\d+)?(?![\w.])"  # versions of up to three parts (535.161.08, 2.18.5)
    r"|(?<![\w~./-])(?!/(?:home|Users|root|mnt|data|scratch|workspace|nfs|gpfs|lustre|datasets?|checkpoints?)/)"
    r"/[\w.+@-]+(?:/[\w.+@-]+)*(?:/(?:src|site-packages|dist-packages)/[\w./+@-]*|\.(?:py|pyx|c|cc|cpp|cu|cuh|"
    r"h|hpp|go|rs|java|js|ts)\b(?::\d+)?)")  # source-code paths (/go/src/github.com/..., .../site-packages/torch/...)
_SECRET_GATES = [re.compile("|".join(map(re.escape, needles))) for _, _, needles in _SECRETS]
_RANDOM_GATE = re.compile(r"[a-z0-9]{20}")
_AT_GATE = re.compile("@")
_PATH_GATE = re.compile(r"~|/(?:home|users|root|mnt|data|scratch|workspace|nfs|gpfs|lustre|checkpoint)")
_USER_KV_GATE = re.compile(r"user|uid|login|owner|account")
_HOST_KV_GATE = re.compile(r"host|node|master_addr|rdzv_endpoint|server")
_TOKEN_EDGE = frozenset(" \t\r\n\"'`()[]{}<>,;|")  # what ends the token an evidence id is looked for in


@cache
def _check_ids() -> frozenset[str]:
    """The verification checks' ids (framework_versions, xid_scan, ...): evidence wherever they appear."""
    try:
        from agent.checks.manifest import load_manifest

        return frozenset(load_manifest().ids())
    except Exception:  # the manifest is optional for redaction: the patterns above still hold
        return frozenset()


@cache
def _check_id_pattern() -> re.Pattern[str] | None:
    ids = sorted(_check_ids(), key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(map(re.escape, ids)) + r")\b") if ids else None


def _inside_evidence(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] lies inside one structured-evidence id of the token around it."""
    lo, hi = start, end
    while lo > 0 and text[lo - 1] not in _TOKEN_EDGE:
        lo -= 1
    while hi < len(text) and text[hi] not in _TOKEN_EDGE:
        hi += 1
    token = text[lo:hi]
    ids = _check_id_pattern()
    spans = [m.span() for m in _EVIDENCE.finditer(token)] + ([m.span() for m in ids.finditer(token)] if ids else [])
    return any(a <= start - lo and end - lo <= b for a, b in spans)


def is_evidence(value: str) -> bool:
    """Whether `value` as a whole is structured evidence (a check/finding id, a device, a version, ...)."""
    return value in _check_ids() or _EVIDENCE.fullmatch(value) is not None


# ---- secrets: detect-secrets --------------------------------------------------------------------------------
@cache
def _plugins() -> list[BasePlugin]:
    """detect-secrets' vendor-key plugins (each runs only when _GATED lets it). IPs are ours; private keys, JWTs and
    keywords get their own passes."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    skip = {"IPPublicDetector", "PrivateKeyDetector", "JwtTokenDetector", "KeywordDetector"}
    return [cls() for cls in get_mapping_from_secret_type_to_class().values()
            if issubclass(cls, RegexBasedDetector) and cls.__name__ not in skip]


_GATED: dict[str, tuple[str, ...] | re.Pattern[str]] = {  # a plugin runs only when one of these is in the lower-cased
    # text (or the pattern is found in the text): most of them look for an assignment or a literal prefix
    "CloudantDetector": ("cloudant",), "IbmCloudIamDetector": ("apikey", "api_key", "api-key"),
    "IbmCosHmacDetector": ("secret",), "TelegramBotTokenDetector": re.compile(r"\d{8}:"),
    "SoftlayerDetector": ("softlayer",), "AWSKeyDetector": ("aws", "a3t", "akia", "asia", "abia", "acca"),
    "AzureStorageKeyDetector": ("accountkey",), "BasicAuthDetector": ("://",),
    "GitLabTokenDetector": ("gl", "gr1348941"),
    "GitHubTokenDetector": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), "MailchimpDetector": ("-us",),
    "NpmDetector": ("_authtoken",), "OpenAIDetector": ("t3blbkfj",), "PypiTokenDetector": ("pypi-",),
    "SendGridDetector": ("sg.",), "SlackDetector": ("xox", "hooks.slack"), "SquareOAuthDetector": ("sq0csp-",),
    "StripeDetector": ("k_live_",), "ArtifactoryDetector": re.compile(r"AKC|AP[\dA-F]"),
    "TwilioKeyDetector": re.compile(r"AC|SK"),
}
_DENYLISTED = re.compile(DENYLIST_REGEX)
_CONFIG_LINE = re.compile(r"\s*[\w.-]+\s*[:=]")  # key: value on a line of its own: the value is the rest
_QUOTED = re.compile(r"([\"'])([A-Za-z0-9+/=_-]{20,})\1")
_ENTROPY = Base64HighEntropyString(limit=4.5)  # detect-secrets' default limit for base64 strings
_TOKEN_ENTROPY = 3.5  # the vendor-looking token rule: a prefix and 20+ characters of at least this entropy
_NOT_SECRETS = frozenset({"true", "false", "none", "null", "yes", "no", "required", "optional", "redacted",
                          "hidden", "masked", "changeme", "example", "string", "undefined", "empty", "unset",
                          "skipped", "disabled", "enabled", "missing", "invalid", "expired", "denied", "failed",
                          "passed", "unknown", "default", "found", "present", "absent", "n/a"})


def _plausible(value: str) -> bool:
    """A detected value that is worth a placeholder: not a placeholder, variable, number, word or evidence."""
    value = value.strip("\"'` ")
    return (len(value) >= 4 and value.lower() not in _NOT_SECRETS and not _PLACEHOLDER.search(value)
            and not re.fullmatch(r"[\d.:,_-]+|\*+|x+|\$\{?\w+\}?|%\w+%|\{\{.*\}\}", value, re.I)
            and not value.startswith(("${", "$(", "<", "{{")) and not is_evidence(value))


def _lines(text: str, gate: re.Pattern[str]) -> Iterator[tuple[int, int]]:
    """The (start, end) of each line of `text` in whose lower case `gate` (a lower-case pattern) finds something:
    a fast search, where a case-insensitive pattern is slow in Python."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: search case-insensitively instead
        lowered, gate = text, re.compile(gate.pattern, re.I)
    end = -1
    for match in gate.finditer(lowered):
        if match.start() <= end:
            continue
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        yield start, end


def library_secrets(text: str) -> set[str]:
    """The secret values detect-secrets finds in `text`: vendor keys anywhere, keyword assignments on the lines
    that name a keyword, quoted base64 strings above its entropy limit."""
    found: set[str] = set()
    lowered = text.lower()
    for plugin in _plugins():
        gate = _GATED.get(type(plugin).__name__)
        if (gate is None or (gate.search(text) is not None if isinstance(gate, re.Pattern)
                             else any(needle in lowered for needle in gate))):
            found.update(str(v).strip() for v in plugin.analyze_string(text))
    keyword = KeywordDetector()
    for line in {text[start:end] for start, end in _lines(text, _DENYLISTED)}:
        for groups in (CONFIG_DENYLIST_REGEX_TO_GROUP, QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP):
            for value in keyword.analyze_string(line, denylist_regex_to_group=groups):
                # an unquoted value runs to the end of the line in detect-secrets: a log's value is one token
                quoted = f"'{value}'" in line or f'"{value}"' in line or f"`{value}`" in line
                found.add(value if quoted or _CONFIG_LINE.match(line) else value.split()[0] if value.split()
                          else value)
    for _, value in _QUOTED.findall(text):
        if _ENTROPY.calculate_shannon_entropy(value) > _ENTROPY.entropy_limit:
            found.add(value)
    return {v for v in found if _plausible(v)}


class Redactor:
    """One per run: `text`/`data` redact, `restore`/`restore_data` undo it with the mapping this instance holds."""

    def __init__(self, hostnames: Iterable[str] = (), usernames: Iterable[str] = ()):
        self.hostnames = sorted({h for h in hostnames if h and h not in ("local", "localhost")}, key=len,
                                reverse=True)
        self.usernames = sorted({u for u in usernames if u and u.lower() not in COMMON_USERS}, key=len, reverse=True)
        self.mapping: dict[str, str] = {}  # _key(kind, value) -> placeholder
        self.originals: dict[str, str] = {}  # placeholder -> the value as first seen
        self.counts: dict[str, int] = {}  # distinct values redacted per kind

    def _placeholder(self, kind: str, value: str) -> str:
        if _PLACEHOLDER.search(value):  # already redacted by an earlier pattern: never a placeholder of a placeholder
            return value
        key = _key(kind, value)
        if key not in self.mapping:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.mapping[key] = f"<{kind}-{self.counts[kind]}>"
            self.originals[self.mapping[key]] = value
        return self.mapping[key]

    def _secret(self, kind: str, match: re.Match[str]) -> str:
        if match.groupdict().get("v") is not None:  # the secret is a group inside the match ("value" == password)
            start, end = match.span("v")
            whole, at = match.group(0), match.start()
            if not _plausible(match.group("v")):
                return whole
            return whole[:start - at] + self._placeholder(kind, match.group("v")) + whole[end - at:]
        keep = match.groupdict().get("keep") or ""
        value = match.group(0)[len(keep):]
        if not _plausible(value) and kind == "secret" and keep:  # password=${PASSWORD}, token=<secret-1>, key=GPU3
            return match.group(0)
        if kind in ("user", "host") and _inside_evidence(match.string, match.start() + len(keep), match.end()):
            return match.group(0)
        return keep + self._placeholder(kind, value)

    def _keywords(self, line: str) -> str:
        for kind, pattern in _KEYWORD_RULES:
            line = pattern.sub(lambda m, k=kind: self._secret(k, m), line)
        return line

    @staticmethod
    def _on_lines(value: str, gate: re.Pattern[str], fn: Callable[[str], str]) -> str:
        """`fn` applied to each line that `gate` finds something in (a line seen before gives the same result)."""
        out: list[str] = []
        done: dict[str, str] = {}
        at = 0
        for start, end in _lines(value, gate):
            line = value[start:end]
            if line not in done:
                done[line] = fn(line)
            out += [value[at:start], done[line]]
            at = end
        return "".join([*out, value[at:]])

    def _random_token(self, match: re.Match[str]) -> str:
        value = match.group(0)
        body = re.split(r"[_.-]", value)[-1]
        limit = _TOKEN_ENTROPY if len(body) < len(value) else _ENTROPY.entropy_limit
        if (is_evidence(value) or _ENTROPY.calculate_shannon_entropy(body) < limit
                or re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", body)):  # a commit or a sha256: container ids, digests
            return value
        return self._placeholder("secret", value)

    def _words(self, names: Iterable[str], kind: str, value: str) -> str:
        names = sorted(set(names), key=len, reverse=True)
        if not names:
            return value
        # host names are case-insensitive (DNS): a node printed "H100-Node-B7" in one line and "h100-node-b7" in the
        # next is one host; user names are not
        flags = re.IGNORECASE if kind == "host" else 0
        pattern = re.compile(r"(?<![<\w-])(?:" + "|".join(map(re.escape, names)) + r")(?![\w-])", flags)
        return pattern.sub(lambda m: self._placeholder(kind, m.group(0)), value)

    # ---- the passes ------------------------------------------------------------------------------------------
    def _log_hosts(self, value: str) -> set[str]:
        """Host names in the places logs put them (syslog/journal host field, NCCL prefix, pod=...)."""
        hosts = set()
        for line in value.split("\n"):
            match = _LINE_HOST.match(line)
            if match is not None:
                hosts.add(match.group(match.lastgroup or 0))
        for gate, pattern in _NAMED_HOSTS:
            for start, end in _lines(value, gate):
                hosts.update(m.group(m.lastgroup or 0) for m in pattern.finditer(value, start, end))
        for hint in _POD_HINT.finditer(value):
            lo = max(value.rfind(c, 0, hint.start()) for c in " \t\n/\"'=(") + 1
            pod = _POD.match(value, lo, hint.end())
            if pod is not None and pod.end() == hint.end():
                hosts.add(pod.group(0))
        return {h for h in hosts if h and not _PLACEHOLDER.search(h)
                and h not in ("localhost", "kernel") and not is_evidence(h) and re.search(r"[A-Za-z]", h)}

    def text(self, value: str) -> str:
        lowered = value.lower()
        for kind, pattern, needles in _BLOCK_SECRETS:  # those that may span lines first
            if any(needle in lowered for needle in needles):
                value = pattern.sub(lambda m, k=kind: self._secret(k, m), value)
        lines = value.split("\n")
        distinct = list(dict.fromkeys(lines))
        if len(distinct) < len(lines):  # a log repeats lines: redact each distinct line once, in order of appearance
            done = self._redact("\n".join(distinct)).split("\n")
            if len(done) == len(distinct):  # (no rule matched across lines; the numbering is the same either way)
                table = dict(zip(distinct, done, strict=True))
                return "\n".join(table[line] for line in lines)
        return self._redact(value)

    def _redact(self, value: str) -> str:
        lowered = value.lower()
        for (kind, pattern, needles), gate in zip(_SECRETS, _SECRET_GATES, strict=True):
            if any(needle in lowered for needle in needles):
                value = self._on_lines(value, gate, lambda line, k=kind, p=pattern: p.sub(
                    lambda m: self._secret(k, m), line))
        value = self._on_lines(value, _KEYWORD_GATE, self._keywords)
        value = self._on_lines(value, _RANDOM_GATE, lambda line: _RANDOM_TOKENS.sub(self._random_token, line))
        found = library_secrets(value)
        if found:
            value = self._values(found, value)
        log_hosts = self._log_hosts(value)
        value = self._on_lines(value, _AT_GATE, self._at_signs)
        value = self._on_lines(value, _PATH_GATE, lambda line: _PATH.sub(self._found("path"), line))
        value = self._on_lines(value, _USER_KV_GATE, lambda line: _USER_KV.sub(lambda m: self._secret("user", m), line))
        value = self._on_lines(value, _HOST_KV_GATE, lambda line: _HOST_KV.sub(lambda m: self._secret("host", m), line))
        value = self._words(self.usernames, "user", value)
        value = self._words([*self.hostnames, *log_hosts], "host", value)
        value = _IPV4.sub(self._found("ip"), value)
        value = _IPV6.sub(self._found("ip"), value)
        if ":" in value:
            value = _IPV6_IFACE.sub(lambda m: m.group("keep") + self._placeholder("ip", m.group("ip")), value)
        value = _FQDN.sub(self._public_or("host"), value)
        return _NODE_NAME.sub(self._found("host"), value)

    def _at_signs(self, line: str) -> str:
        """E-mail addresses, user@host and scheme://user@ on a line with an "@"."""
        line = _EMAIL.sub(self._found("email"), line)
        line = _URL_USER.sub(self._found("user"), line)
        line = _USER_AT.sub(self._found("user"), line)
        return _AT_HOST.sub(self._found("host"), line)

    def _found(self, kind: str) -> Callable[[re.Match[str]], str]:
        """A replacement that leaves a match inside structured evidence alone (1.1.9.0 in 23.10-1.1.9.0, xid_48 in
        xid_scan:xid_48@GPU3, github.com in /go/src/github.com/...)."""
        return lambda m: m.group(0) if _inside_evidence(m.string, m.start(), m.end()) else \
            self._placeholder(kind, m.group(0))

    def _public_or(self, kind: str) -> Callable[[re.Match[str]], str]:
        """_found, except for a well-known public name (github.com, docs.nvidia.com), which stays."""
        found = self._found(kind)
        return lambda m: m.group(0) if is_public_host(m.group(0)) else found(m)

    def _values(self, found: Iterable[str], value: str) -> str:
        """Replace secret values that are not plain words (they may hold quotes, '@', '/', '+')."""
        ordered = sorted(found, key=len, reverse=True)
        edge: Callable[[str], str] = lambda s: r"(?<![\w])" if re.match(r"\w", s) else ""  # noqa: E731
        tail: Callable[[str], str] = lambda s: r"(?![\w])" if re.search(r"\w$", s) else ""  # noqa: E731
        pattern = re.compile("|".join(edge(v) + re.escape(v) + tail(v) for v in ordered))
        return pattern.sub(lambda m: self._placeholder("secret", m.group(0)), value)

    def data(self, value: Any) -> Any:
        """Redact every string inside JSON-like data (dict keys too: hosts key some results)."""
        return _walk(value, self.text)

    def restore(self, value: str) -> str:
        """Placeholders this redactor made back to their values; any other text (an invented <host-99>) stays."""
        return _PLACEHOLDER.sub(lambda m: self.originals.get(m.group(0), m.group(0)), value)

    def restore_data(self, value: Any) -> Any:
        return _walk(value, self.restore)

    def restore_names(self, value: Any, names: Iterable[str]) -> Any:
        """Only the placeholders of `names` (case-insensitive) back to their values, in text or JSON-like data: the
        provider's own node names on the provider's own page; every other placeholder (secrets, the customer's
        names) stays."""
        wanted = {n.lower() for n in names if n}
        keep = {p: v for p, v in self.originals.items() if v.lower() in wanted and p.startswith("<host-")}
        if not keep:
            return value
        return _walk(value, lambda text: _PLACEHOLDER.sub(lambda m: keep.get(m.group(0), m.group(0)), text))

    # ---- the local mapping file ---------------------------------------------------------------------------
    def save(self, path: Path) -> Path:
        """Write the mapping atomically, readable by the owner only (0600): a crash leaves the old file whole."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, json.dumps({"version": 1, "originals": self.originals}, indent=1).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return path

    def load(self, path: Path) -> Redactor:
        """Continue a run's mapping (a resumed run keeps its placeholders); a missing file is an empty mapping."""
        if not path.is_file():
            return self
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            originals = dict(saved["originals"])
        except (ValueError, KeyError, TypeError) as exc:
            raise RedactionMappingError(f"{path}: not a redaction mapping ({exc}); move it away to start a new "
                                        "one") from None
        for placeholder, value in originals.items():
            match = re.fullmatch(r"<([a-z-]+)-(\d+)>", placeholder)
            if match is None:
                raise RedactionMappingError(f"{path}: bad placeholder {placeholder!r}")
            kind, number = match.group(1), int(match.group(2))
            self.originals[placeholder] = value
            self.mapping[_key(kind, value)] = placeholder
            self.counts[kind] = max(self.counts.get(kind, 0), number)
        return self


def _key(kind: str, value: str) -> str:
    """The mapping key: host names, e-mail and IP addresses are case-insensitive, secrets, users and paths not
    (restore must give back "Scatter" and "scatter" each as it was)."""
    return f"{kind}:{value.lower()}" if kind in ("host", "email", "ip") else f"{kind}:{value}"


class RedactionMappingError(ValueError):
    pass


def _walk(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(k) if isinstance(k, str) else k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, fn) for v in value]
    return value
