#!/usr/bin/env python3
"""checkpoint_load: can the checkpoint in params["checkpoint_dir"] be loaded?

Without reading tensors: every shard named by *.index.json exists and is non-empty; no file is a
Git LFS pointer; safetensors headers are sane JSON whose data fits the file (the errors
safetensors would raise: HeaderTooLarge, InvalidHeaderDeserialization, MetadataIncompleteBuffer);
torch .bin/.pt files are complete zip archives ("PytorchStreamReader failed reading zip archive:
failed finding central directory") or legacy pickles ("invalid load key"). Read throughput of the
largest file is measured on up to 256 MiB.
"""

import errno
import json
import os
import struct
import time
import zipfile

import checklib

WEIGHT_EXT = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
MAX_HEADER = 100 * 1000 * 1000  # safetensors refuses larger headers
SAMPLE_BYTES = 256 << 20
MIN_SAMPLE = 64 << 20  # below this a throughput figure is noise
MIN_MBPS = 200.0


def list_files(root, depth=2, limit=20000):
    out = []
    for base, dirs, files in os.walk(root):
        if base[len(root):].count(os.sep) >= depth:
            dirs[:] = []
        out.extend(os.path.join(base, f) for f in files)
        if len(out) > limit:
            break
    return sorted(out)


def check_safetensors(path, size, head):
    """Error name (as safetensors reports it) and detail, or (None, n_tensors)."""
    if size < 8:
        return "MetadataIncompleteBuffer", "file is %d bytes" % size
    (length,) = struct.unpack("<Q", head[:8])
    if length > MAX_HEADER or length > size - 8:
        return "HeaderTooLarge", "header length %d for a %d-byte file" % (length, size)
    with open(path, "rb") as handle:
        handle.seek(8)
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return "InvalidHeaderDeserialization", str(exc)[:120]
    if not isinstance(header, dict):
        return "InvalidHeaderDeserialization", "header is not a JSON object"
    end = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            end = max(end, int(meta["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError):
            return "InvalidHeaderDeserialization", "tensor %s has no data_offsets" % name
    if 8 + length + end > size:
        return "MetadataIncompleteBuffer", "tensors need %d bytes, file has %d (truncated)" % (8 + length + end, size)
    return None, len(header) - (1 if "__metadata__" in header else 0)


def check_torch_file(path, head):
    if head[:2] == b"PK":
        if zipfile.is_zipfile(path):
            return None, "zip"
        return "PytorchStreamReader failed reading zip archive: failed finding central directory", "truncated zip"
    if head[:1] == b"\x80":
        return None, "legacy pickle"
    return "invalid load key, '%s'." % head[:1].decode("latin-1", "replace"), "not a torch archive"


def check_indexes(check, root, files):
    names = set(os.path.relpath(f, root) for f in files)
    for index in [f for f in files if f.endswith(".index.json")]:
        try:
            with open(index) as handle:
                weight_map = json.load(handle)["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            check.fail("index_corrupt", os.path.basename(index), "cannot read %s: %s" % (os.path.basename(index), exc))
            continue
        base = os.path.relpath(os.path.dirname(index), root)
        missing = [s for s in shards if os.path.normpath(os.path.join(base, s)) not in names]
        check.metrics["index_shards"] = check.metrics.get("index_shards", 0) + len(shards)
        for shard in missing:
            check.fail("shard_missing", shard, "%s names shard %s, which is missing" % (os.path.basename(index), shard))


def throughput(check, biggest):
    start, done = time.time(), 0
    with open(biggest, "rb") as handle:
        while done < SAMPLE_BYTES:
            chunk = handle.read(16 << 20)
            if not chunk:
                break
            done += len(chunk)
    seconds = max(time.time() - start, 1e-6)
    if done >= MIN_SAMPLE:
        mbps = done / seconds / 1e6
        check.metrics["read_mbps"] = round(mbps, 1)
        if mbps < (check.expect("checkpoint_read_mbps") or MIN_MBPS):
            check.warn("slow_storage", os.path.basename(biggest), "checkpoint storage reads at %.0f MB/s" % mbps)


def body(check):
    root = check.params.get("checkpoint_dir")
    if not root:
        check.unknown("no checkpoint directory given (params checkpoint_dir)", needs="checkpoint_dir")
    base = check.path(root)  # the user's path, under the system root on a simulated host
    try:
        os.stat(base)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            # a directory we may not enter is not a missing one
            check.unknown("cannot look at %s: %s" % (root, exc.strerror or exc))
    if not os.path.isdir(base):
        check.fail("checkpoint_missing", root, "checkpoint directory %s does not exist" % root)
        check.finish()
    if not os.access(base, os.R_OK | os.X_OK):
        check.unknown("cannot list %s: permission denied" % root)
    files = list_files(base)
    weights = [f for f in files if f.endswith(WEIGHT_EXT)]
    check.metrics["files"] = len(files)
    check.metrics["weight_files"] = len(weights)
    check_indexes(check, base, files)
    if not weights:
        check.fail("no_weights", root, "no weight files (%s) in %s" % (", ".join(WEIGHT_EXT), root))
        check.finish()
    bad, unreadable = 0, []
    for path in weights:
        name = os.path.relpath(path, base)
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as handle:
                head = handle.read(64)
        except OSError as exc:
            unreadable.append("%s (%s)" % (name, exc.strerror or exc))
            continue
        if size == 0:
            error, detail = "empty file", "0 bytes"
        elif head.startswith(b"version https://git-lfs"):
            error, detail = "Git LFS pointer, not the weights", "run `git lfs pull`"
        elif path.endswith(".safetensors"):
            error, detail = check_safetensors(path, size, head)
        else:
            error, detail = check_torch_file(path, head)
        if error:
            bad += 1
            check.fail("shard_unreadable", name, "%s: %s (%s)" % (name, error, detail),
                       head.split(b"\n")[0].decode("latin-1", "replace"))
    check.metrics["unreadable"] = bad
    if unreadable and not bad:
        check.unknown("cannot read %d of %d weight files: %s" % (len(unreadable), len(weights),
                                                                 ", ".join(unreadable[:3])))
    for item in unreadable:
        check.info("not_checked", item.split(" (")[0], "could not read %s" % item)
    readable = [w for w in weights if os.access(w, os.R_OK)]
    if readable:
        throughput(check, max(readable, key=os.path.getsize))
    check.finish("%d weight files readable in %s" % (len(weights), root))


if __name__ == "__main__":
    checklib.main("checkpoint_load", body)
