"""The peer allocators: where their libraries are, which Debian package
ships each.
"""

import os
import platform
import re
import subprocess


PEERS = ["glibc", "mimalloc", "jemalloc", "tcmalloc"]

PEER_SONAMES = {
    "mimalloc": ["libmimalloc.so.2", "libmimalloc.so"],
    "jemalloc": ["libjemalloc.so.2", "libjemalloc.so"],
    "tcmalloc": ["libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so"],
}

# Debian 12 packages that ship the libraries above.
PEER_DEBIAN_PACKAGES = {
    "mimalloc": "libmimalloc2.0", "jemalloc": "libjemalloc2",
    "tcmalloc": "libtcmalloc-minimal4",
}


def ldconfig_paths():
    """soname -> path from the dynamic linker's cache (this machine's ABI)."""
    out = ""
    for prog in ("ldconfig", "/sbin/ldconfig"):
        try:
            out = subprocess.run([prog, "-p"], capture_output=True, text=True,
                                 timeout=20).stdout
            break
        except (OSError, subprocess.SubprocessError):
            continue
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+\((.*)\)\s+=>\s+(\S+)", line)
        if m and (platform.machine() != "x86_64" or "x86-64" in m.group(2)):
            found.setdefault(m.group(1), m.group(3))
    return found


def peer_dirs():
    machine = platform.machine()
    return [f"/usr/lib/{machine}-linux-gnu", f"/lib/{machine}-linux-gnu", "/usr/lib64",
            "/usr/lib", "/usr/local/lib", "/usr/local/lib64"]


def find_peer(name, ldcache, dirs=None):
    """Path of peer allocator `name`'s library, or None."""
    for soname in PEER_SONAMES[name]:
        if soname in ldcache and os.path.exists(ldcache[soname]):
            return ldcache[soname]
        for d in (peer_dirs() if dirs is None else dirs):
            p = os.path.join(d, soname)
            if os.path.exists(p):
                return p
    return None


def peer_missing_message(name):
    return f"{name} not installed (apt-get install {PEER_DEBIAN_PACKAGES[name]})"
