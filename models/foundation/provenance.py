"""What made an output, recorded beside it, and the check before reusing or resuming it
(docs/architecture.md, "Outputs and provenance").

An origin is a JSON object `{"settings": {...}, "inputs": {...}, "version": "..."}`: the settings
(flags, seeds, methods, dtype) that change the result, fingerprints of the inputs (a model id, a
digest of a data listing) and the package version. A binary reuses or resumes an output only
when its recorded origin equals the requested one; otherwise `check` raises one line naming the
first differing setting and offering `--overwrite` or a new output path. `claim` writes an
origin file atomically and fails if another writer claimed it first.
"""
import hashlib
import json
import os
from typing import Any, Iterable, Optional

from models.foundation import file_digests
from models.foundation.errors import UserError
from models.foundation.files import read_json, temporary_name

PACKAGE = "attribution-benchmarks"


def package_version() -> str:
    """The installed project's version ("unknown" when run from a bare checkout)."""
    return _version(PACKAGE, "unknown")


def _version(distribution: str, missing: str = "not installed") -> str:
    """The installed version of `distribution`, else `missing`."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return missing


def git_commit() -> str:
    """The commit of the checkout the project runs from ("<hash>", "<hash> with uncommitted
    changes"), or "not a git checkout" (an installed copy, no git)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        if commit.returncode:
            return "not a git checkout"
        changed = subprocess.run(["git", "-C", root, "status", "--porcelain",
                                  "--untracked-files=no"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return commit.stdout.strip()[:12] + (" with uncommitted changes" if changed else "")


def software() -> dict:
    """What ran: the commit, the package, TensorFlow, Keras and Python versions and the CPU
    (docs/architecture.md, "Outputs and provenance"), for pages and reports."""
    import platform

    return {"commit": git_commit(), "package": package_version(),
            "tensorflow": _version("tensorflow"), "keras": _version("keras"),
            "python": platform.python_version(), "cpu": f"{cpu_model()}, {os.cpu_count()} CPUs"}


def _cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo ("" when absent or unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return next((line.split(":", 1)[1].strip() for line in handle
                         if line.startswith(field)), "")
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), to go with every figure and trained weight."""
    return _cpuinfo("model name") or "unknown"


def cpu_flags() -> str:
    """The vector instruction sets of the CPU that matter to TensorFlow's kernels."""
    flags = _cpuinfo("flags").split()
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")
    return " ".join(flag for flag in wanted if flag in flags) or "none known"


def machine() -> str:
    """One line for every figure: CPU model, cores, instruction sets, the oneDNN setting."""
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "TensorFlow's default")
    return (f"{cpu_model()}, {os.cpu_count()} CPUs, {cpu_flags()}; "
            f"TF_ENABLE_ONEDNN_OPTS={onednn}")


def canonical(value: Any) -> Any:
    """`value` as plain JSON (tuples become lists, other objects their repr)."""
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def listing_digest(paths: Iterable[str]) -> str:
    """A short digest of a data listing: the files' names, sizes and bytes (their SHA-256, kept
    between runs by `file_digests`), in order, so a file rewritten at the same size is another
    listing. A path that is not a file (one gone since it was listed) counts by its name."""
    paths = list(paths)
    digest = hashlib.sha256()
    for path, content in zip(paths, file_digests.contents_sha256(paths)):
        size = os.path.getsize(path) if os.path.exists(path) else -1
        digest.update(f"{os.path.basename(path)}\0{size}\0{content or '-'}\n".encode())
    return digest.hexdigest()[:16]


# What every origin record holds (`origin` writes it; `check` reads it back).
ORIGIN_SCHEMA = {"type": "object", "required": ["settings", "inputs"],
                 "properties": {"settings": {"type": "object"}, "inputs": {"type": "object"}}}


def origin(settings: dict, **inputs: Any) -> dict:
    """The origin record of an output made with `settings` from `inputs` (fingerprints)."""
    return {"settings": canonical(settings), "inputs": canonical(inputs),
            "version": package_version()}


def differences(recorded: dict, requested: dict) -> list:
    """[(name, recorded value, requested value)] of the settings, then inputs, that differ."""
    found = []
    for part in ("settings", "inputs"):
        old, new = recorded.get(part, {}), requested.get(part, {})
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                found.append((name, old.get(name, "(not recorded)"),
                              new.get(name, "(not given)")))
    return found


# Settings that say how the code computed an output rather than what was asked for: the digests
# of a user method's code (`saliency_gen.attribution.names.Resolved`), the name of ROAD's
# imputation solver (`saliency_gen.data.imputation.SOLVER`) and the version of a measure's code
# (`faithfulness.measures.CODE`). An output that differs from a request in these alone
# was made by earlier code, and is recomputed with one line saying which code changed rather
# than refused (docs/architecture.md, "Outputs and provenance").
METHOD_CODE = "method_code"
IMPUTATION_SOLVER = "imputation_solver"
MEASURE_CODE = "measure_code"
_CODE_SETTINGS = {METHOD_CODE: "the code of {method}",
                  IMPUTATION_SOLVER: "ROAD's imputation solver",
                  MEASURE_CODE: "the measure's code"}


def code_changed(recorded: dict, requested: dict, method: str = "the method") -> Optional[str]:
    """What changed ("the code of <method>", "ROAD's imputation solver", "the measure's code",
    joined by "and") when `recorded` and `requested` differ in code settings alone; None
    otherwise (no difference, or a difference in anything the user chose)."""
    names = {name for name, _, _ in differences(recorded, requested)}
    if not names or not names <= set(_CODE_SETTINGS):
        return None
    return " and ".join(phrase.format(method=method) for name, phrase in _CODE_SETTINGS.items()
                        if name in names)


def with_code(settings: dict, code: dict) -> dict:
    """`settings` with the method code digests `code` added (unchanged when it is empty, so the
    package's own methods keep the origins they always had)."""
    return {**settings, METHOD_CODE: code} if code else dict(settings)


def _shown(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def mismatch_error(what: str, recorded: dict, requested: dict) -> Optional[UserError]:
    """None when `recorded` and `requested` agree, else the one-line error for the first
    difference (settings before inputs)."""
    found = differences(recorded, requested)
    if not found:
        return None
    name, old, new = found[0]
    more = f" (and {len(found) - 1} more difference(s))" if len(found) > 1 else ""
    return UserError(f"{what} was made with {name}={_shown(old)}, not {_shown(new)}{more}; pass "
                     "--overwrite to replace it or choose a new output path")


def check(path: str, requested: dict, what: str) -> bool:
    """Compares the origin stored in `path` with `requested`.

    Returns False when there is no origin file (nothing to reuse), True when they agree, and
    raises the one-line `mismatch_error` otherwise.
    """
    if not os.path.exists(path):
        return False
    error = mismatch_error(what, read_json(path, "origin file", ORIGIN_SCHEMA), requested)
    if error is not None:
        raise error
    return True


def claim(path: str, requested: dict, what: str) -> None:
    """Records `requested` as the origin in `path`, atomically; if another writer got there
    first, its origin must equal `requested` (else the one-line `mismatch_error`)."""
    temporary = temporary_name(path)
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(requested, handle, indent=2, sort_keys=True)
    try:
        os.link(temporary, path)  # fails if `path` exists: the first claim wins
    except FileExistsError:
        check(path, requested, what)
    finally:
        os.remove(temporary)
