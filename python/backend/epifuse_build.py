"""A PEP 517 build backend for the epifuse module with no dependencies.

The wheel holds the pure-Python package python/epifuse and the C ABI's shared
library, libepifuse_c.so: $EPIFUSE_LIBRARY if set, else build/libepifuse_c.so, which
this backend builds with CMake (the `epifuse_c` target) when it is missing. The wheel
is tagged for this platform, since it carries a shared library, and for any Python 3,
since the library is loaded with ctypes and has no CPython ABI (docs/python.md).

`pip install -e .` (PEP 660) installs a path entry for the checkout's python/ folder
instead of a copy: edits to python/epifuse show at the next import. The package then
loads the library from the checkout's build/libepifuse_c.so (python/epifuse/_lib.py),
so an editable install builds that one and refuses EPIFUSE_LIBRARY or
EPIFUSE_BUILD_DIR pointing elsewhere: the install would succeed and the import fail.
"""
import base64
import hashlib
import os
import platform
import re
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "epifuse"


def _version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(epifuse VERSION ([0-9.]+)", text).group(1)


def _build_library(build):
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "epifuse_c", "-j", str(os.cpu_count() or 2)],
                   check=True)


def _library():
    if os.environ.get("EPIFUSE_LIBRARY"):
        path = Path(os.environ["EPIFUSE_LIBRARY"])
        if not path.is_file():
            raise RuntimeError(f"EPIFUSE_LIBRARY={path}: no such file")
        return path
    build = Path(os.environ.get("EPIFUSE_BUILD_DIR", ROOT / "build"))
    path = build / "libepifuse_c.so"
    if not path.is_file():
        _build_library(build)
    return path


def _tag():
    machine = platform.machine().lower()
    return f"py3-none-linux_{machine}"


def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
            "Summary: Fused GPU epilogues compiled at run time (NVRTC/hipRTC), from Python\n"
            "License: Apache-2.0\n"
            "Classifier: License :: OSI Approved :: Apache Software License\n"
            "Requires-Python: >=3.9\nRequires-Dist: numpy\n")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, version, files):
    info = f"{NAME}-{version}.dist-info"
    files[f"{info}/METADATA"] = _metadata(version).encode()
    files[f"{info}/LICENSE"] = (ROOT / "LICENSE").read_bytes()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: epifuse_build\nRoot-Is-Purelib: false\n"
                              f"Tag: {_tag()}\n").encode()
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = f"{NAME}-{version}-{_tag()}.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info_ = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info_.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            z.writestr(info_, data, zipfile.ZIP_DEFLATED)
    return wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {f"{NAME}/{p.name}": p.read_bytes() for p in sorted((ROOT / "python" / NAME).glob("*.py"))}
    files[f"{NAME}/libepifuse_c.so"] = _library().read_bytes()
    return _write_wheel(wheel_directory, _version(), files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    build = ROOT / "build"
    for var, wanted in (("EPIFUSE_LIBRARY", build / "libepifuse_c.so"), ("EPIFUSE_BUILD_DIR", build)):
        given = os.environ.get(var)
        if given and Path(given).resolve() != wanted:
            raise RuntimeError(
                f"epifuse: {var}={given}: an editable install loads the library from {wanted} "
                f"(the checkout's build folder); unset {var} and build there, or use `pip install .`, "
                "which copies the library into the installed package")
    if not (build / "libepifuse_c.so").is_file():
        _build_library(build)
    # A .pth line puts the checkout's python/ folder on sys.path.
    files = {f"__editable__.{NAME}.pth": (str(ROOT / "python") + "\n").encode()}
    return _write_wheel(wheel_directory, _version(), files)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []
