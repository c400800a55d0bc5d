"""bam.downloads against a local HTTP server on 127.0.0.1 serving small fabricated archives in
the real layouts: the full layout, a bad checksum, and a cut connection resumed by a range
request to the same bytes."""
import dataclasses
import hashlib
import io
import json
import os
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bam import downloads
from models.foundation.errors import UserError


def _zip(entries):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as handle:
        for name, data in entries.items():
            handle.writestr(name, data)
    return buffer.getvalue()


def _tar(entries):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as handle:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            handle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


FILES = {
    "/coco/train2017.zip": _zip({"train2017/000000000009.jpg": b"jpeg" * 500}),
    "/coco/annotations.zip": _zip({"annotations/instances_train2017.json": b"{}",
                                   "annotations/captions_train2017.json": b"{}"}),
    "/places/data.tar.gz": _tar({"images/train/a/abbey/00000001.jpg": bytes(range(256)) * 40,
                                 "objects/train/a.txt": b"x"}),
    **{f"/models/{name}.tar.gz": _tar({f"{name}/1550000000/saved_model.pb": name.encode() * 9,
                                      f"{name}/1550000000/variables/variables.index": b"i"})
       for name in downloads.MODEL_NAMES},
}


class _Server:
    """Serves FILES with range requests; `cut` = {path: bytes} closes the first transfer of a
    path after that many bytes."""

    def __init__(self):
        self.cut, self.requests = {}, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                data = FILES.get(self.path)
                owner.requests.append((self.path, self.headers.get("Range")))
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                limit = owner.cut.pop(self.path, None)
                body = data[start:] if limit is None else data[start:start + limit]
                self.wfile.write(body)
                if limit is not None:
                    self.wfile.flush()
                    self.close_connection = True

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def server():
    serving = _Server()
    yield serving
    serving.http.shutdown()


def _config(server, dest, **extra):
    return downloads.Config(
        dest=str(dest), coco_images_url=server.url + "/coco/train2017.zip",
        coco_annotations_url=server.url + "/coco/annotations.zip",
        miniplaces_url=server.url + "/places/data.tar.gz", models_url=server.url + "/models",
        timeout=10, **extra)


def test_downloads_unpack_into_the_construction_layout(server, tmp_path):
    digests = downloads.run(_config(server, tmp_path / "src"))
    root = tmp_path / "src"
    assert (root / "coco" / "train2017" / "000000000009.jpg").read_bytes() == b"jpeg" * 500
    assert (root / "coco" / "annotations" / "instances_train2017.json").is_file()
    assert (root / "miniplaces" / "images" / "train" / "a" / "abbey" / "00000001.jpg").is_file()
    assert not (root / "miniplaces" / "objects").exists()
    for name in downloads.MODEL_NAMES:
        assert (root / "models" / name / "saved_model.pb").read_bytes() == name.encode() * 9
    assert digests["train2017.zip"] == hashlib.sha256(FILES["/coco/train2017.zip"]).hexdigest()
    assert not os.listdir(root / "archives")  # archives removed, no leftovers
    count = len(server.requests)
    downloads.run(_config(server, tmp_path / "src"))  # a re-run finds everything done
    assert len(server.requests) == count


def test_a_bad_checksum_stops_and_leaves_nothing_finished(server, tmp_path):
    sums = tmp_path / "sums.json"
    sums.write_text(json.dumps({"miniplaces_data.tar.gz": "0" * 64}))
    with pytest.raises(UserError, match="does not match the expected 0000"):
        downloads.run(_config(server, tmp_path / "src", what=("miniplaces",),
                              checksums=str(sums)))
    assert not (tmp_path / "src" / "miniplaces").exists()
    assert not os.listdir(tmp_path / "src" / "archives")


def test_a_cut_connection_resumes_with_a_range_request(server, tmp_path):
    path = "/places/data.tar.gz"
    server.cut[path] = len(FILES[path]) // 2
    config = _config(server, tmp_path / "src", what=("miniplaces",), keep_archives=True)
    with pytest.raises(UserError, match="re-run to resume"):
        downloads.run(config)
    partial = tmp_path / "src" / "archives" / "miniplaces_data.tar.gz.part"
    assert partial.stat().st_size == len(FILES[path]) // 2
    assert not (tmp_path / "src" / "miniplaces").exists()
    downloads.run(config)
    assert server.requests[-1] == (path, f"bytes={len(FILES[path]) // 2}-")
    archive = tmp_path / "src" / "archives" / "miniplaces_data.tar.gz"
    assert archive.read_bytes() == FILES[path]
    assert (tmp_path / "src" / "miniplaces" / "images" / "train" / "a" / "abbey").is_dir()


def test_every_archive_is_checked_also_one_on_disk(server, tmp_path, capsys):
    config = _config(server, tmp_path / "src", what=("miniplaces",), keep_archives=True)
    digests = downloads.run(config)
    assert "this first download is trusted" in capsys.readouterr().out
    archive = tmp_path / "src" / "archives" / "miniplaces_data.tar.gz"
    archive.write_bytes(archive.read_bytes() + b"x")  # changed on disk after the download
    (tmp_path / "src" / "miniplaces").rename(tmp_path / "src" / "moved")
    with pytest.raises(UserError, match=f"does not match the expected "
                                        f"{digests['miniplaces_data.tar.gz']}; remove the file"):
        downloads.run(config)
    assert not (tmp_path / "src" / "miniplaces").exists()
    sums = tmp_path / "sums.json"
    sums.write_text(json.dumps(["miniplaces_data.tar.gz", "0" * 64]))  # valid JSON, wrong shape
    with pytest.raises(UserError, match="--checksums .* does not have the expected shape"):
        downloads.run(dataclasses.replace(config, checksums=str(sums)))


def test_a_partial_download_from_another_url_starts_afresh(server, tmp_path):
    archives = tmp_path / "src" / "archives"
    archives.mkdir(parents=True)
    (archives / "miniplaces_data.tar.gz.part").write_bytes(b"spliced" * 100)
    (archives / "miniplaces_data.tar.gz.part.json").write_text(
        json.dumps({"url": server.url + "/old/data.tar.gz", "validator": None}))
    downloads.run(_config(server, tmp_path / "src", what=("miniplaces",), keep_archives=True))
    assert server.requests[-1] == ("/places/data.tar.gz", None)  # no range request
    assert (archives / "miniplaces_data.tar.gz").read_bytes() == FILES["/places/data.tar.gz"]
    assert sorted(os.listdir(archives)) == ["miniplaces_data.tar.gz"]
