# -*- Python -*-
# lit configuration of cac's FileCheck tests (test/DSL, test/Dialect,
# test/Conversion, test/Target, test/Stdlib). The build writes
# lit.site.cfg.py (from lit.site.cfg.py.in) with the paths of the tools and
# loads this file; run the suite with
#   python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv BUILD/test
# or `ctest -R lit` / `ninja check-cac` in the build directory.

import os
import platform
import shutil
import subprocess
import sys
import tempfile

import lit.formats
import lit.util

config.name = "cac"
# Run RUN lines with bash when there is one (pipefail is lit's default).
config.test_format = lit.formats.ShTest(lit.util.which("bash") is not None)
config.suffixes = [".cac", ".mlir", ".test"]
# Inputs/ folders hold files the tests read; Unit/ is GoogleTest (CTest runs
# it), reference/ the Python reference implementation, fuzz/ the libFuzzer
# target and its seed corpus (.cac files that are inputs, not lit tests).
config.excludes = ["Inputs", "Unit", "reference", "fuzz", "CMakeLists.txt",
                   "lit.cfg.py", "lit.site.cfg.py", "lit.site.cfg.py.in"]

config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.cac_obj_root, "test")

# Tools: the build's own, then LLVM's (FileCheck, not, count).
for d in (config.llvm_tools_dir, config.cac_tools_dir):
    config.environment["PATH"] = os.path.pathsep.join(
        (d, config.environment.get("PATH", os.environ.get("PATH", ""))))
config.environment["TERM"] = "dumb"

def tool(name):
    for d in (config.cac_tools_dir, config.llvm_tools_dir):
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    found = shutil.which(name)
    if not found:
        lit_config.fatal("cannot find '%s' (looked in %s and %s)"
                         % (name, config.cac_tools_dir, config.llvm_tools_dir))
    return found

# RUN lines name the tools plainly; PATH finds the build's first.
cac = tool("cac")
for t in ("cac-opt", "FileCheck", "not", "count"):
    tool(t)

config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%cac_src_root", config.cac_src_root))
config.substitutions.append(("%stdlib", os.path.join(config.cac_src_root, "stdlib")))
config.substitutions.append(("%examples", os.path.join(config.cac_src_root, "examples")))
# Prints a JSON document one `path = value` line per leaf (numbers rounded
# with --round N), so that CHECK lines do not depend on JSON formatting:
#   cac eval ... | %json-lines --round 6 | FileCheck %s
config.substitutions.append(
    ("%json-lines", "%s %s" % (config.python_executable,
                              os.path.join(config.test_source_root, "Inputs",
                                           "json_lines.py"))))

# Optional features.
ptxas = None
for cand in (config.ptxas_executable,
             "/usr/local/cuda/bin/ptxas",
             shutil.which("ptxas")):
    if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
        ptxas = cand
        break
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))

# x86-64 CPU names (cac compile --cpu=x86-64-v3) mean something here.
if platform.machine() == "x86_64":
    config.available_features.add("x86_64")

# The CPU kernels call glibc's vector math library (libmvec) on x86-64 Linux
# with glibc, as compiler/lib/Target/HostOptimizer.cpp decides.
if (platform.machine() == "x86_64" and sys.platform.startswith("linux")
        and platform.libc_ver()[0] == "glibc"):
    config.available_features.add("libmvec")

def eager_works():
    """True when `cac eval --backend eager` runs a tiny batch."""
    gae = os.path.join(config.cac_src_root, "stdlib", "gae.cac")
    batch = '{"token": {"value": [[0.5, 0.25]]}, "seq": {"reward": [1.0]}}'
    try:
        r = subprocess.run([cac, "eval", gae, "--input", "-", "--backend", "eager"],
                           input=batch.encode(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and b'"adv"' in r.stdout

if eager_works():
    config.available_features.add("eager")
