"""What redaction looks for (agent/redact.py applies it): our secret rules (run before detect-secrets), the
personal data of logs and texts (e-mail addresses, IPs, paths, user and host names, the well-known public names that
stay), and the structured evidence that is never redacted. Patterns only: each rule's `keep` group stays, the rest
of the match is replaced; each runs only on the lines its gate or needles find."""

from __future__ import annotations

import re
from importlib.resources import files

# ---- secrets: our rules, run before detect-secrets ------------------------------------------------------------
# A pattern's `keep` group (the name of the parameter, the scheme) stays; the rest of the match is the secret. A rule
# runs only when one of its needles (lower case) is in the lower-cased text: most logs hold none of them.
BLOCK_SECRETS: list[tuple[str, re.Pattern[str], tuple[str, ...]]] = [  # these may span lines
    # to its END line, or to the end of the text when a prompt budget cut the END line off (PGP blocks too)
    ("private-key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                               r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S), ("private key",)),
    # .netrc: "machine HOST login USER password SECRET", on one line or several
    ("secret", re.compile(r"(?im)(?P<keep>(?:\bmachine\s+\S+\s+(?:login\s+\S+\s+)?|^[ \t]*)password[ \t]+)\S+"
                          r"(?=[ \t]*(?:$|machine\b|login\b|account\b|macdef\b))"), ("password",)),
]
B64 = r"[A-Za-z0-9+/]"
SECRETS: list[tuple[str, re.Pattern[str], tuple[str, ...]]] = [
    ("private-key", re.compile(r"LS0tLS1CRUdJTi" + B64 + r"{20,}={0,2}"),  # a base64-encoded PEM, header and all
     ("ls0tls1crudjti",)),
    ("private-key", re.compile(r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b"), ("age-secret-key-1",)),
    # a PEM body without its header: DER in base64 ("MII..."), an OpenSSH key ("openssh-key-v1" in base64)
    ("private-key", re.compile(r"\bMII" + B64 + r"{60,}={0,2}|\bb3BlbnNzaC1rZXktdjE" + B64 + r"{20,}={0,2}"),
     ("mii", "b3blbnnzac1rzxktdje")),
    # JWTs whole (detect-secrets' own pattern stops before the signature)
    ("secret", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_/\\-]{5,}(?:\.[A-Za-z0-9_/\\+-]*={0,2})?"), ("eyj",)),
    # AWS: access key ids of every kind, Bedrock API keys, MWS, AppSync
    ("secret", re.compile(r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b"),
     ("a3t", "akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "apka")),
    ("secret", re.compile(r"\bABSK" + B64 + r"{40,}={0,2}|\bbedrock-api-key-" + B64 + r"{20,}={0,2}"),
     ("absk", "bedrock-api-key-")),
    ("secret", re.compile(r"\bamzn\.mws\.[0-9a-f-]{36}\b|\bda2-[a-z0-9]{26}\b"), ("amzn.mws.", "da2-")),
    # Azure: AD client secrets (xxx8Q~...), storage/service-bus/app-config keys, DevOps PATs
    ("secret", re.compile(r"(?<![\w~.-])[\w~.-]{3}\dQ~[\w~.-]{31,34}(?![\w~-])"), ("q~",)),
    ("secret", re.compile(r"(?i)(?P<keep>\b(?:AccountKey|SharedAccessKey|SharedSecretValue|Secret)\s*=\s*)"
                          + B64 + r"{20,}={0,3}"), ("accountkey", "sharedaccesskey", "sharedsecretvalue", "secret")),
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
                          r"|\bhv[sbr]\.[\w-]{20,}|\bglsa_[A-Za-z0-9]{32}_[0-9a-f]{8}\b|\bglc_" + B64 + r"{32,}={0,2}"
                          r"|\beyJrIjoi" + B64 + r"{30,}={0,2}|\bdapi[0-9a-h]{32}(?:-\d)?\b|\bdckr_pat_[\w-]{27,}"
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
    # passwords: scheme://user:PASSWORD@, curl -u user:PASSWORD, code and config files (.netrc: BLOCK_SECRETS)
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
KEYWORD_GATE = re.compile(r"pass|pwd|secret|token|key|credential|sas|signature|contrase|_id\b|login|crumb")
TOKEN = r"token(?!s\b|s_|izer|_?(?:count|len|num|ids?\b|type|budget|limit|usage))"  # not max_tokens, tokenizer
KEYWORD_RULES: list[tuple[str, re.Pattern[str]]] = [
    # a YAML line "secret_key: the rest of the line" (no second key on it): the value may hold spaces
    ("secret", re.compile(r"(?im)(?P<keep>^[ \t]*[\w.-]*?(?:password|passwd|passphrase|secret|api[_-]?key|"
                          r"access[_-]?key|private[_-]?key|" + TOKEN + r")[\w.-]*[ \t]*:[ \t]*)(?![\"'`<\s])"
                          r"(?![^\n]*\s[\w.-]+[=:])[^\n]*[^\s,;]")),
    ("secret", re.compile(r"(?i)(?P<keep>\b[\w.-]*?(?:password|passwd|passphrase|pwd|(?<![a-z])pass(?=[\"'\s=:_-])|"
                          r"secret|"
                          + TOKEN + r"|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|private[_-]?key|[._-]key\b|"
                          r"(?-i:[a-z]Key|KEY)|credentials?|\bsas(?:[_-]?(?:token|key|url))?\b|\bsignature\b)"
                          r"[\w.-]*[\"'\]]?[ \t]*"
                          r"(?::=|=>|===?|!==?|[=:])[ \t]*@?(?P<q>[\"'`])?)"
                          r"(?!<)(?(q)[^\n]{4,}?(?=(?P=q))|[^\s\"',;]{4,})")),
    # an environment-style *_ID / *_KEY / *TOKEN holding a random value (CC_TEST_REPORTER_ID, TWITTER_ID), a login or
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
RANDOM_TOKENS = re.compile(r"\b[A-Za-z]{2,10}(?:[_-][A-Za-z0-9]{1,12})?[_.-](?=[A-Za-z0-9]*\d)[A-Za-z0-9]{20,}\b"
                            r"|(?<![\w/+=.-])(?=[A-Za-z0-9+/]*[+/]|[A-Za-z0-9]{40})(?=[A-Za-z0-9+/]*\d)"
                            r"(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])[A-Za-z0-9][A-Za-z0-9+/]{31,}={0,2}"
                            r"(?![\w/+=])")
HOST_KV = re.compile(r"(?i)(?P<keep>\b(?:host(?:name)?|node(?:name|list)?|master_addr|rdzv_endpoint|server)"
                      r"[\"']?\s{0,3}[=:]\s{0,3}[\"']?)(?!<)(?=[\w.-]*[A-Za-z])(?=[\w.-]*[\d-])[A-Za-z0-9][\w.-]*")
PATH = re.compile(r"(?<![\w<>/.~-])(?:~[\w.-]*|/(?:home|Users|root|mnt|data|scratch|workspace|nfs|gpfs|lustre|"
                   r"datasets?|checkpoints?))(?:/[^\s\"'`,;:()\[\]{}<>|]+)+")
USER_AT = re.compile(r"(?<![\w.+%<-])[A-Za-z_][A-Za-z0-9_.-]{0,31}(?=@(?!0x)[A-Za-z0-9<])")  # alice@host (ssh, scp)
AT_HOST = re.compile(r"(?<=>@)(?!<)[A-Za-z0-9][\w-]*(?:\.[\w-]+)*")  # the host after a redacted user
USER_KV = re.compile(r"(?i)(?P<keep>\b(?:user(?:name)?|user\s?id|uid|login|owner|account)\s{0,3}[=:]\s{0,3}"
                      r"[\"']?)(?!<)(?=[\w.-]*[A-Za-z])[A-Za-z_][\w.-]{1,31}(?=[\"';,\s]|$)")
URL_USER = re.compile(r"(?<=://)(?!<)[^/\s:@]+(?=:<secret-\d+>@|@)")  # the user of scheme://user[:secret]@host
PLACEHOLDER = re.compile(r"<(?:secret|private-key|email|path|user|host|ip)-\d+>")
# names that are too common as words to replace wherever they appear (they are still caught as user@ or user=)
COMMON_USERS = frozenset({"root", "user", "admin", "ubuntu", "nobody", "runner", "default", "guest", "test"})
EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
# (no leading zeros: 04.103.00.00 is a firmware version)
IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                   r"(?![\w.])")
# IPv6 needs a "::" or seven colons, so PCI bus ids (0000:5d:00.0) and times (12:30:01) are left alone
IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])"
                   r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,5})?(?![\w:.])"
                   r"|(?<![\w:])::(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4}(?![\w:.])")
# NCCL names an address by its interface ("Using eth0:fe80::1ff:fe23:4567:890a%eth0<0>", "[0]ib0:2001:db8::7<0>"):
# the ":" before it hides it from IPV6's boundary; the interface and the link-local zone (%eth0) stay
IPV6_IFACE = re.compile(r"(?<![\w:.-])(?P<keep>[A-Za-z][\w.-]{0,14}:)(?P<ip>(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}"
                         r"|(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,5})?"
                         r"|::(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4})(?![\w:.])")
FQDN = re.compile(r"(?i)\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:com|net|org|io|ai|cloud|dev|internal|local|"
                   r"lan|corp|cluster|svc|intra|azure|amazonaws|googleapis|cn|de|uk|fr|jp)\b")
# public names a reader needs (code hosting, package indexes, vendors' and projects' documentation): a URL to
# github.com/tensorflow/... names a project, not the customer. Cloud endpoints whose sub-domain is the customer's
# (bucket.s3.amazonaws.com, acct.blob.core.windows.net) are not here.
PUBLIC_DOMAINS = frozenset(
    line.strip() for line in (files("agent") / "data" / "public_domains.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#"))


def is_public_host(name: str) -> bool:
    """A well-known public domain or a name under one (docs.nvidia.com, files.pythonhosted.org)."""
    name = name.lower().rstrip(".")
    return any(name == d or name.endswith("." + d) for d in PUBLIC_DOMAINS)


# host names the way clusters name nodes (gpu-a17, node-12, worker3, ip-10-0-0-7) when written as such
# (a hyphen is required: gpu0 / GPU5 are devices; GPU UUIDs stay for the provider; "<" skips placeholders)
NODE_NAME = re.compile(r"(?i)(?<![<\w-])(?!gpu-[0-9a-f]{8}-)(?:ip-\d+-\d+-\d+-\d+|"
                        r"(?:gpu|node|worker|compute|host|vm|dgx|hgx)-[a-z0-9-]*\d[a-z0-9-]*)\b")
# Kubernetes pod names: <deployment>-<replicaset hash>-<5 chars> (the hash alphabet has no vowels, 0, 1 or 3)
POD = re.compile(r"(?<![\w.<-])[a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?=[a-z0-9-]*\d)[bcdfghjklmnpqrstvwxz2456789]{5,10}"
                  r"-[bcdfghjklmnpqrstvwxz2456789]{5}(?![\w-])")
# host names where logs put them: the syslog/journal host field, the NCCL "host:pid:tid [rank]" prefix (also after
# torchrun's "[rank3]:" / "[default3]:" line prefix), pods named as such, the host of ssh/scp user@host and of a
# shell prompt
HOSTNAME = r"[A-Za-z0-9][\w.-]{0,62}"
LINE_HOST = re.compile(  # matched at the start of each line
    r"(?:<\d+>)?(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?"
    r"(?:Z|[+-]\d\d:?\d\d)?) (?P<syslog>" + HOSTNAME + r") (?=[\w./@-]+(?:\[\d+\])?: )"
    r"|(?:\[[\w-]*\d+\]:\s*)?(?P<nccl>" + HOSTNAME + r"):\d+:\d+ \[\d+\]"
    r"|[\w.-]+@(?P<prompt>[A-Za-z0-9][\w-]*):[~/]")
NODE = r"[A-Za-z][\w.-]*?(?:-[\w.-]*\d|\d[\w.-]*-)[\w.-]*"  # a host name written with a hyphen and a digit
NAMED_HOSTS: list[tuple[re.Pattern[str], re.Pattern[str]]] = [  # (gate, pattern): run on the lines the gate finds
    (re.compile("pod"), re.compile(r"(?i:\bpod[/ =:\"']+)(?P<pod>[a-z0-9][a-z0-9.-]*[a-z0-9])")),
    (re.compile("ssh|scp|rsync|sftp|mosh|pdsh"),
     re.compile(r"\b(?:ssh|scp|rsync|sftp|mosh|pdsh)\b[^\n]*?[\s'\"][\w.-]+@(?P<ssh>[A-Za-z0-9][\w-]*)(?=[\s:'\"]|$)"
                r"|\bssh\b[^\n|;&]*?\s(?P<sshhost>" + NODE + r")(?=[\s'\"]|$)")),
    # nccl-tests: "#  Rank  0 Group  0 Pid 895544 on     h100-2 device  0 [0002:00:01] NVIDIA H100 80GB HBM3"
    (re.compile("pid"), re.compile(r"\bPid\s+\d+\s+on\s+(?P<nccltests>" + HOSTNAME + r")\s+device\s+\d")),
    # Slurm: "srun: error: h100-2: task 5: ...", "*** JOB 12 ON h100-2 CANCELLED ..."
    (re.compile("srun|slurm| on "), re.compile(r"\berror: (?P<srun>" + HOSTNAME + r"): tasks? \d"
                                                r"|\*\*\* (?:JOB|STEP) \S+ ON (?P<slurm>" + HOSTNAME + r") ")),
    # MPI / Kubernetes / c10d: "on node h100-4", "assigned ml/pod to h100-12", "connect to [h100-9]:29500"
    (re.compile("node|host|assigned|]:|connect"),
     re.compile(r"\b(?:on|to|from) (?:node|host) (?P<on>" + NODE + r")\b|\bassigned \S+ to (?P<to>" + NODE + r")\b"
                r"|\[(?P<bracket>[A-Za-z][\w.-]*)\]:\d{2,5}\b"
                r"|\b(?i:connect(?:ing|ed)?) to (?P<hp>" + NODE + r"):\d{2,5}\b")),
]
POD_HINT = re.compile(r"-[a-z0-9]{5,10}-[a-z0-9]{5}(?![\w-])")  # cheap: where a pod name may end

# ---- structured evidence: never redacted ---------------------------------------------------------------------
EVIDENCE = re.compile(
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
SECRET_GATES = [re.compile("|".join(map(re.escape, needles))) for _, _, needles in SECRETS]
RANDOM_GATE = re.compile(r"[a-z0-9]{20}")
AT_GATE = re.compile("@")
PATH_GATE = re.compile(r"~|/(?:home|users|root|mnt|data|scratch|workspace|nfs|gpfs|lustre|checkpoint)")
USER_KV_GATE = re.compile(r"user|uid|login|owner|account")
HOST_KV_GATE = re.compile(r"host|node|master_addr|rdzv_endpoint|server")
TOKEN_EDGE = frozenset(" \t\r\n\"'`()[]{}<>,;|")  # what ends the token an evidence id is looked for in
