"""What the customer says about versions and changes: "deepspeed 0.15.3 works, 0.16.4 fails", "after upgrading
NCCL", "since the driver update". Each such statement names a library; the taxonomy leaves it points at are that
library's version leaves (a known-bad release, a regression, a version mismatch). The planner ranks them higher;
only checks can confirm them."""

from __future__ import annotations

import re
from functools import lru_cache

from agent.taxonomy import Taxonomy

# what people call a library, when it is not the taxonomy node's own name (SYSTEM_SOFTWARE.FABRIC_MANAGER: "fabric
# manager" needs no alias)
ALIASES = {"torch": "pytorch", "nvidia driver": "driver", "nvidia-driver": "driver", "gpu driver": "driver",
           "fabricmanager": "fabric manager", "nvidia-fabricmanager": "fabric manager",
           "nvidia-container-toolkit": "container toolkit", "ofed": "network stack", "mofed": "network stack",
           "mlnx_ofed": "network stack", "hpcx": "network stack", "hpc-x": "network stack"}
# a leaf about versions: a known-bad release, a regression, a mismatch between versions
VERSION_LEAF = re.compile(r"version|release|regress|upgrade|known bug|known defect", re.IGNORECASE)
VERDICT = re.compile(r"\b(?:works?|worked|working|fine|good|ok|okay|fails?|failed|failing|broken|breaks|broke|bad|"
                     r"regress\w*|crash\w*|hangs?|hung|errors? out)\b", re.IGNORECASE)
CHANGE_VERB = r"(?:upgrad|updat|downgrad|bump|revert|switch|reinstall|install|roll(?:ed|ing)?\s*back|mov)\w*"
CHANGE_NOUN = r"(?:upgrade|update|downgrade|bump|change|rollback|regression)s?"
VERSION = r"v?\d+(?:\.\d+)+"
# words after which a version is not named by the word ("works, 0.16.4", "upgraded to 2.19.3", "2.18 vs 2.19")
BARE_WORDS = {"to", "from", "vs", "versus", "and", "or", "than", "but", "with", "on", "in", "is", "was", "v",
              "version", "works", "worked", "fine", "fails", "failed", "ok", "okay", "good", "bad", "still", "then"}
SENTENCE = re.compile(r"[;!?\n]|\.(?=\s|$)")
NAME_WINDOW = 60  # characters before a version that can name it (bounds the work on a huge pasted line)


def _name_pattern(name: str) -> str:
    return r"[\s_-]?".join(re.escape(word) for word in re.split(r"[\s_-]+", name))


@lru_cache(maxsize=8)
def _library_leaves(taxonomy: Taxonomy) -> dict[str, list[str]]:
    """Spoken library name → the version leaves under every sub-category of that name that is about software
    versions (its description says so, or most of its leaves are version leaves: not GPU.MEMORY for its one InfoROM
    leaf)."""
    out: dict[str, list[str]] = {}
    for label in taxonomy.labels():
        node = taxonomy.node(label)
        if node.is_leaf or "." not in label:  # a main category (GPU, FRAMEWORK_LIBRARY) names no library
            continue
        name = label.rsplit(".", 1)[-1].replace("_", " ").lower()
        every = taxonomy.leaves(label)
        leaves = [leaf.label for leaf in every
                  if VERSION_LEAF.search(f"{leaf.label.rsplit('.', 1)[-1].replace('_', ' ')} {leaf.description}")]
        if leaves and (VERSION_LEAF.search(node.description) or 2 * len(leaves) >= len(every)):
            out.setdefault(name, []).extend(leaves)
    for alias, name in ALIASES.items():
        if name in out:
            out.setdefault(alias, []).extend(out[name])
    return {name: list(dict.fromkeys(labels)) for name, labels in out.items()}


def _version_owners(sentence: str, lib: str) -> list[bool | None]:
    """For each version in the sentence: True if `lib` names it, False if another name does, None if nothing does.
    A bare version (after "works,", "to", "vs", an arrow) belongs to the name of the version before it: in
    "deepspeed 0.15.3 works, 0.16.4 fails" both are deepspeed's, in "CUDA 12.2, NCCL 2.19.3" each has its own."""
    owners: list[bool | None] = []
    owner: bool | None = None
    for match in re.finditer(rf"\b{VERSION}\b", sentence):
        before = sentence[max(0, match.start() - NAME_WINDOW): match.start()]
        if re.search(r"\d[-_]$", before):
            continue  # the rest of one version string (MLNX_OFED 5.8-1.1.2.1)
        if re.search(rf"(?<![\w-]){lib}[\s:=-]*$", before, re.IGNORECASE):
            owner = True
        else:
            word = re.search(r"([A-Za-z][\w.+-]*)[\s:=,;()>/-]*$", before)
            if word and word.group(1).lower() not in BARE_WORDS:
                owner = False
        owners.append(owner)
    return owners


def statement_about(sentence: str, name: str) -> bool:
    """The sentence says that a version of `name` works or fails, or that `name` changed. A list of several
    libraries' versions (an environment line) says neither about any one of them."""
    lib = _name_pattern(name)
    if not re.search(rf"(?<![\w-]){lib}(?![\w-])", sentence, re.IGNORECASE):
        return False
    owners = _version_owners(sentence, lib)
    mine = owners.count(True)
    if mine >= 2 or (mine == 1 and False not in owners and VERDICT.search(sentence)):
        return True
    change = (rf"\b{CHANGE_VERB}\s+(?:(?:the|our|my|to|a|new|newer|older|latest|its)\s+){{0,3}}{lib}(?![\w-])|"
              rf"(?<![\w-]){lib}(?:\s+{VERSION})?\s+{CHANGE_NOUN}\b|"
              rf"(?<![\w-]){lib}(?:\s+{VERSION})?\s+(?:was|got|is|has been)\s+{CHANGE_VERB}")
    return re.search(change, sentence, re.IGNORECASE) is not None


def stated_leaves(taxonomy: Taxonomy, text: str) -> dict[str, str]:
    """Leaf label → the customer's sentence that points at it (the first one)."""
    found: dict[str, str] = {}
    libraries = _library_leaves(taxonomy)
    for sentence in (s.strip() for s in SENTENCE.split(text)):
        if not sentence:
            continue
        for name, leaves in libraries.items():
            if statement_about(sentence, name):
                for leaf in leaves:
                    found.setdefault(leaf, sentence[:160])
    return found
