"""Downloads of BAM's sources: `python -m bam.downloads` (docs/reproduce_bam.md, "Downloads").

    python -m bam.downloads --dest=bam_sources                   # COCO, MiniPlaces, the models
    python -m bam.downloads --dest=bam_sources --what=models --checksums=sha256.json

Fetches MSCOCO 2017 (train images and instance annotations), MiniPlaces and BAM's released
models (obj, scene, scene_only, scene1..scene10) into the layout the construction script and
`bam.metrics` read: `<dest>/coco/{train2017, annotations}`, `<dest>/miniplaces/images/train/...`
and `<dest>/models/<name>/saved_model.pb`. Every URL can be replaced by a flag (mirrors, dead
links). A download goes to `<file>.part` and resumes from there with an HTTP range request, only
from the same URL and with the server's validator (else it starts afresh). Every archive, also
one already on disk, is checked against its SHA-256 when one is known: `--checksums` (a JSON
file {file name: sha256}), else the digest recorded in `<dest>/downloads.json` when the same URL
was first fetched (none of the sources publishes one: the first download is trusted, with a
note saying so). An archive is unpacked under a temporary name and renamed when complete, so a
killed run never leaves a folder that looks finished, and a re-run skips what is done.
"""
import dataclasses
import http.client
import os
import shutil
import socket
import tarfile
import urllib.error
import urllib.request
import zipfile
from typing import Optional

from models.foundation import progress as progress_bar
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.files import file_sha256, read_json, write_json
from models.foundation.rules import POSITIVE

MODEL_NAMES = ("obj", "scene", "scene_only") + tuple(f"scene{k}" for k in range(1, 11))
WHAT = ("coco", "miniplaces", "models")
CHUNK = 1 << 16


def fetch(url: str, path: str, expected: Optional[str] = None, timeout: float = 60.0,
          progress: bool = True) -> str:
    """Downloads `url` to `path` (resuming `<path>.part`), checks `expected` (a SHA-256) when
    given; returns the file's SHA-256. A finished `path` is not fetched again, but it is
    checked against `expected` too. A partial file is resumed only from the same URL, with
    the server's validator (`If-Range`), so a changed file is fetched afresh, never spliced."""
    if os.path.isfile(path):
        digest = file_sha256(path)
        if expected and digest != expected.lower():
            raise UserError(f"{path}: SHA-256 {digest} does not match the expected {expected}; "
                            "remove the file and re-run to download it again")
        return digest
    partial, about = path + ".part", path + ".part.json"
    have = os.path.getsize(partial) if os.path.isfile(partial) else 0
    started = _read_partial_origin(about) if have else None
    if have and (started is None or started.get("url") != url):
        print(f"{partial}: started from another URL (or unknown); downloading afresh",
              flush=True)
        have = 0
    headers = {}
    if have and started is not None:
        headers["Range"] = f"bytes={have}-"
        if started.get("validator"):
            headers["If-Range"] = started["validator"]
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:  # the partial file already holds everything
            response = None
        else:
            raise UserError(f"{url}: HTTP {error.code} {error.reason}; check the URL (flags "
                            "--*_url) or the mirror") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise UserError(f"{url}: cannot connect ({reason}); check the network or the URL, then "
                        "re-run (a partial download resumes)") from None
    if response is not None:
        with response:
            resumed = response.status == 206
            if not resumed:
                have = 0
                validator = response.headers.get("ETag") or response.headers.get(
                    "Last-Modified")
                write_json(about, {"url": url, "validator": validator})
            length = response.headers.get("Content-Length")
            total = have + int(length) if length is not None else None
            with open(partial, "ab" if resumed else "wb") as handle, progress_bar.bar(
                    total if progress else 0, os.path.basename(path), "B", initial=have,
                    unit_scale=True) as bar:
                try:
                    for block in iter(lambda: response.read(CHUNK), b""):
                        handle.write(block)
                        bar.update(len(block))
                except (http.client.IncompleteRead, ConnectionError, socket.timeout,
                        OSError) as error:
                    raise UserError(f"{url}: the transfer stopped at {handle.tell()} bytes "
                                    f"({type(error).__name__}); re-run to resume it") from None
            if total is not None and os.path.getsize(partial) < total:
                raise UserError(f"{url}: the transfer stopped at {os.path.getsize(partial)} of "
                                f"{total} bytes; re-run to resume it")
    digest = file_sha256(partial)
    if expected and digest != expected.lower():
        os.remove(partial)
        os.remove(about)
        raise UserError(f"{url}: SHA-256 {digest} does not match the expected {expected}; the "
                        "file was removed, re-run to download it again (or check --checksums)")
    os.replace(partial, path)
    os.remove(about)
    return digest


def _read_partial_origin(path: str) -> Optional[dict]:
    """The {"url", "validator"} a partial download started with (None if missing or unreadable:
    the part is then fetched afresh)."""
    try:
        return read_json(path, "partial download record", PARTIAL_SCHEMA)
    except UserError:
        return None


SHA256 = {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}
PARTIAL_SCHEMA = {"type": "object", "required": ["url"]}
# --checksums: {archive file name: sha256}; downloads.json: {archive: {"url", "sha256"}}.
DIGESTS_SCHEMA = {"type": "object", "additionalProperties": SHA256}
RECORD_SCHEMA = {"type": "object", "additionalProperties": {
    "type": "object", "required": ["url", "sha256"],
    "properties": {"url": {"type": "string"}, "sha256": SHA256}}}


def unpack(archive: str, target: str, inner: Optional[str] = None,
           drop: tuple = ()) -> None:
    """Unpacks `archive` (zip or tar) so that its folder `inner` (default: everything) becomes
    `target`: under a temporary name, renamed when complete. `drop` names top-level entries of
    `inner` to leave out. A finished `target` is left as it is."""
    if os.path.isdir(target):
        return
    scratch = f"{target}.unpacking-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as handle:
                handle.extractall(scratch)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as handle:
                handle.extractall(scratch, filter="data")
        else:
            raise UserError(f"{archive} is neither a zip nor a tar archive; remove it and re-run")
        source = os.path.join(scratch, inner) if inner else scratch
        if not os.path.isdir(source):
            raise UserError(f"{archive} has no folder {inner!r}; is the URL right?")
        for name in drop:
            shutil.rmtree(os.path.join(source, name), ignore_errors=True)
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        os.replace(source, target)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as error:
        raise UserError(f"{archive} is damaged ({error}); remove it and re-run") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _model_folder(root: str) -> str:
    """The folder holding saved_model.pb under an unpacked model archive (it may be nested in
    an export-timestamp folder)."""
    for folder, _, files in os.walk(root):
        if "saved_model.pb" in files:
            return folder
    raise UserError(f"{root}: the model archive holds no saved_model.pb")


@dataclasses.dataclass(frozen=True)
class Config:
    """bam.downloads' options (one flag each)."""

    dest: str = option("bam_sources", "Where coco/, miniplaces/ and models/ go.")
    what: tuple = option(WHAT, "Which sources: coco, miniplaces, models.")
    coco_images_url: str = option("https://images.cocodataset.org/zips/train2017.zip",
                                  "MSCOCO 2017 train images (zip).")
    coco_annotations_url: str = option(
        "https://images.cocodataset.org/annotations/annotations_trainval2017.zip",
        "MSCOCO 2017 annotations (zip).")
    miniplaces_url: str = option("https://miniplaces.csail.mit.edu/data/data.tar.gz",
                                 "MiniPlaces (tar.gz).")
    models_url: str = option(
        "https://github.com/google-research-datasets/bam/raw/master/models",
        "Folder URL of the released models' <name>.tar.gz.")
    checksums: Optional[str] = option(None, "JSON file {archive file name: sha256} to check.")
    keep_archives: bool = option(False, "Keep the archives after unpacking.")
    timeout: float = option(60.0, "Seconds without data before a transfer is given up.",
                            rule=POSITIVE)


def _jobs(f: Config) -> list:
    """(archive file name, URL, target folder, inner folder, dropped entries) per download."""
    coco, places, held = (os.path.join(f.dest, name) for name in ("coco", "miniplaces",
                                                                   "models"))
    jobs: list[tuple[str, str, str, Optional[str], tuple]] = []
    if "coco" in f.what:
        jobs += [("train2017.zip", f.coco_images_url, os.path.join(coco, "train2017"),
                  "train2017", ()),
                 ("annotations_trainval2017.zip", f.coco_annotations_url,
                  os.path.join(coco, "annotations"), "annotations", ())]
    if "miniplaces" in f.what:
        jobs.append(("miniplaces_data.tar.gz", f.miniplaces_url, places, None, ("objects",)))
    if "models" in f.what:
        jobs += [(f"{name}.tar.gz", f"{f.models_url.rstrip('/')}/{name}.tar.gz",
                  os.path.join(held, name), None, ()) for name in MODEL_NAMES]
    return jobs


def run(config: Config) -> dict:
    """Downloads and unpacks what `config` asks for; returns {archive: sha256}."""
    f = config
    unknown = sorted(set(f.what) - set(WHAT))
    if unknown or not f.what:
        raise UserError(f"--what={','.join(f.what)} must name some of {', '.join(WHAT)}")
    given = read_json(f.checksums, "--checksums", DIGESTS_SCHEMA) if f.checksums else {}
    record_path = os.path.join(f.dest, "downloads.json")
    record = (read_json(record_path, "download record", RECORD_SCHEMA)
              if os.path.isfile(record_path) else {})
    archives = os.path.join(f.dest, "archives")
    os.makedirs(archives, exist_ok=True)
    for name, url, target, inner, drop in _jobs(f):
        if os.path.isdir(target):
            print(f"{target}: already there")
            continue
        archive = os.path.join(archives, name)
        recorded = record.get(name, {})
        # --checksums, else the digest recorded when this URL was first fetched
        expected = given.get(name) or (recorded.get("sha256") if recorded.get("url") == url
                                       else None)
        digest = fetch(url, archive, expected, timeout=f.timeout)
        if expected is None:
            print(f"note: {name} has no published SHA-256; this first download is trusted and "
                  f"its digest {digest[:16]}... is recorded in {record_path}, which checks "
                  "every later download of this URL", flush=True)
        record[name] = {"url": url, "sha256": digest}
        write_json(record_path, record, indent=1)
        if target.startswith(os.path.join(f.dest, "models")):
            scratch = target + ".archive"
            shutil.rmtree(scratch, ignore_errors=True)
            unpack(archive, scratch)
            os.replace(_model_folder(scratch), target)
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            unpack(archive, target, inner, drop)
        if not f.keep_archives:
            os.remove(archive)
        print(f"{target}: done")
    return {name: entry["sha256"] for name, entry in record.items()}


if __name__ == "__main__":
    run_binary(Config, run)
