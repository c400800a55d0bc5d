"""Which saliency shards are finished, by content (docs/records.md, "Provenance").

When the generator has written a shard, it seals it: `<folder>/.ledger/<shard name>.json`
records the shard's record count, size and SHA-256, and the size and SHA-256 of the input shard
it was made from. A shard is reused only if its bytes still match its seal and its input still
has the recorded content; readers of saliency folders check the seals of the shards they list,
so a shard cut short or edited after it was written stops the reader with one line instead of
being scored in part. The ledger folder is hidden: globs over the shards never match it.
"""
import os
from typing import Iterable, Optional

from models.foundation import file_digests
from models.foundation.errors import UserError
from models.foundation.files import ensure_directory, read_json, write_json

LEDGER = ".ledger"


_FINGERPRINT = {"type": "object", "required": ["bytes", "sha256"],
                "properties": {"bytes": {"type": "integer"}, "sha256": {"type": "string"}}}
SEAL_SCHEMA = {"type": "object", "required": ["records", "bytes", "sha256", "input"],
               "properties": {"records": {"type": "integer", "minimum": 0},
                              "bytes": {"type": "integer"}, "sha256": {"type": "string"},
                              "input": _FINGERPRINT}}


def _sha256(path: str) -> str:
    """The SHA-256 of the file's bytes, taken once while it is unchanged (`file_digests`)."""
    return file_digests.contents_sha256([path])[0]


def identity(path: str) -> dict:
    """{"file", "bytes"} of an input shard: what every map record made from it carries."""
    return {"file": os.path.basename(path), "bytes": os.path.getsize(path)}


def fingerprint(path: str) -> dict:
    """{"file", "bytes", "sha256"} of an input shard: what a seal records."""
    return {**identity(path), "sha256": _sha256(path)}


def seal_path(shard: str) -> str:
    folder, name = os.path.split(os.path.abspath(shard))
    return os.path.join(folder, LEDGER, f"{name}.json")


def seal(shard: str, records: int, source: dict) -> None:
    """Records that `shard` is finished: `records` records, its bytes now, made from `source`
    (a `fingerprint`)."""
    ensure_directory(os.path.dirname(seal_path(shard)))
    write_json(seal_path(shard), {"records": records, "bytes": os.path.getsize(shard),
                                  "sha256": _sha256(shard), "input": source},
               indent=1, sort_keys=True)


def read_seal(shard: str) -> Optional[dict]:
    """The seal of `shard` (None if it has none); a seal of another shape is one line."""
    path = seal_path(shard)
    if not os.path.exists(path):
        return None
    return read_json(path, "shard seal", SEAL_SCHEMA)


def mismatch(shard: str, entry: dict) -> Optional[str]:
    """Why `shard` does not match its seal `entry` (None when it does)."""
    size = os.path.getsize(shard)
    if size != entry["bytes"]:
        return f"it is {size} bytes, not the {entry['bytes']} written (cut short or changed)"
    if _sha256(shard) != entry["sha256"]:
        return "its content differs from what was written"
    return None


def check_listing(paths: Iterable[str]) -> None:
    """Stops with one line if a listed shard no longer matches its seal (shards without a seal,
    such as image records, are not checked)."""
    for path in paths:
        entry = read_seal(path)
        reason = entry and mismatch(path, entry)
        if entry and reason:
            raise UserError(f"{path}: {reason}; {entry['records']} records were sealed. "
                            "Re-run saliency_gen.generate on its folder to redo it")
