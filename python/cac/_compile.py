"""Compiling .cac files into kernel bundles, cached by content.

The Python process never loads MLIR: a bundle is made by the `cac compile`
tool and kept in a cache folder under a key that hashes everything the
compiled code depends on (the file and every file it imports, the
precision, the compile options, the compiler itself and this machine's CPU:
host.so is compiled for it, so a cache folder shared by machines of other
CPUs keeps a bundle for each). Parameters are
not part of the key: they are arguments of the kernels, so one bundle
serves every parameter value (docs/language.md).
"""

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# Bumped when the layout of the cache changes.
_CACHE_FORMAT = "cac-python-cache-1"
_IMPORT = re.compile(r'^\s*import\s+"([^"]+)"', re.MULTILINE)


class CompileError(ValueError):
    """A .cac file did not compile. `diagnostic` (also str(self)) is the
    compiler's message, `file:line:col: error: ...` with the source line."""

    def __init__(self, path, diagnostic):
        super().__init__(diagnostic)
        self.path = str(path)
        self.diagnostic = diagnostic


def find_compiler(compiler=None):
    """The `cac` executable: `compiler`, else $CAC_COMPILER, else bin/cac of
    the build this package sits in (build/python/cac -> build/bin/cac), else
    `cac` on PATH."""
    explicit = compiler or os.environ.get("CAC_COMPILER")
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return str(explicit)
        raise FileNotFoundError(f"the cac compiler {explicit} does not exist "
                                "or is not executable")
    built = Path(__file__).resolve().parent.parent.parent / "bin" / "cac"
    for c in (built, shutil.which("cac")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return str(c)
    raise FileNotFoundError(
        "cannot find the cac compiler: pass compiler=PATH, set CAC_COMPILER, "
        "or build it (scripts/build.sh puts it in build/bin/cac)")


def cache_folder(cache_dir=None):
    """`cache_dir`, else $CAC_CACHE_DIR, else $XDG_CACHE_HOME/cac or
    ~/.cache/cac."""
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("CAC_CACHE_DIR"):
        return Path(os.environ["CAC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cac"


def _sources(path):
    """(path relative to the main file's folder, bytes) of `path` and of
    every file it imports, transitively, in a fixed order. An unreadable
    import is left out: the compiler reports it with its location."""
    root = Path(path).resolve()
    seen, order, todo = set(), [], [root]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            data = p.read_bytes()
        except OSError:
            continue
        order.append((os.path.relpath(p, root.parent), data))
        text = data.decode("utf-8", errors="replace")
        for rel in reversed(_IMPORT.findall(text)):
            todo.append((p.parent / rel).resolve())
    return order


def option_flags(options):
    """`cac compile` flags of an options dict: {"seq_block": 256,
    "fuse_groups": False, "arch": "sm_80"} -> --seq-block=256 ..."""
    flags = []
    for name in sorted(options or {}):
        value = options[name]
        if isinstance(value, bool):
            value = "true" if value else "false"
        flags.append(f"--{name.replace('_', '-')}={value}")
    return flags


@functools.lru_cache(maxsize=None)
def _host_cpu():
    """This machine's CPU as host.so's code depends on it: its model and
    instruction set extensions (/proc/cpuinfo's first processor), else the
    architecture's name."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f.read().split("\n\n")[0].splitlines()
                     if ln.startswith(("model name", "flags", "Features",
                                       "CPU part"))]
        if lines:
            return "\n".join(lines)
    except OSError:
        pass
    return os.uname().machine


def bundle_key(path, dtype, options, compiler):
    """The content hash that names a bundle in the cache."""
    h = hashlib.sha256()
    st = os.stat(compiler)
    for part in (_CACHE_FORMAT, dtype, _host_cpu(), os.path.realpath(compiler),
                 str(st.st_size), str(st.st_mtime_ns), *option_flags(options)):
        h.update(part.encode() + b"\0")
    for rel, data in _sources(path):
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def compile_bundle(path, dtype="f32", options=None, compiler=None,
                   cache_dir=None):
    """The folder of the bundle of `path` compiled for `dtype` ("f32" or
    "f64"): from the cache, or compiled now. Raises CompileError with the
    compiler's diagnostic, FileNotFoundError for a missing file."""
    if dtype not in ("f32", "f64"):
        raise ValueError(f"dtype must be 'f32' or 'f64', got {dtype!r}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such .cac file")
    compiler = find_compiler(compiler)
    key = bundle_key(path, dtype, options, compiler)
    cache = cache_folder(cache_dir)
    target = cache / f"{path.stem}-{key[:24]}-{dtype}"
    if (target / "manifest.json").is_file():
        return str(target)
    cache.mkdir(parents=True, exist_ok=True)
    # Compile into a private folder and rename it into place, so that a
    # concurrent process never loads a half-written bundle.
    tmp = tempfile.mkdtemp(prefix=".compiling-", dir=cache)
    cmd = [compiler, "compile", str(path), "--bundle", tmp]
    if dtype == "f64":
        cmd.append("--f64")
    cmd += option_flags(options)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(path, (r.stderr or r.stdout).strip()
                               or f"cac compile failed with status {r.returncode}")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "manifest.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)
