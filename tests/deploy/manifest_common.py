"""What the deployment checks (manifest_args_test.py) share: the repository, the
failures found so far, and the flags a server binary defines (from --helpfull)."""
import os
import re
import subprocess


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77
failures = []


def fail(msg):
    print(f"FAIL: {msg}")
    failures.append(msg)


def binaries(build):
    return {
        "lockstep-coordinator": os.path.join(build, "services", "lockstep-coordinator"),
        "lockstep-worker": os.path.join(build, "services", "lockstep-worker"),
        "lockstep": os.path.join(build, "clients", "lockstep"),
    }


def help_entries(path, env=None):
    """{flag: help text} for the flags defined in services/ (not absl's own): --helpfull."""
    out = subprocess.run([path, "--helpfull"], capture_output=True, text=True, timeout=30,
                         env=env)
    entries, own, current = {}, False, None
    for line in (out.stdout + out.stderr).splitlines():
        if line.strip().startswith("Flags from "):
            own, current = "/services/" in line, None
            continue
        m = re.match(r"    --(\w+) \(", line)
        if m:
            current = m.group(1) if own else None
            if current:
                entries[current] = line
        elif current and line.startswith("      "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


_flag_cache = {}


def server_flags(path):
    """{name: default as --helpfull prints it} for a server binary's own flags."""
    if path not in _flag_cache:
        flags = {}
        for name, text in help_entries(path).items():
            m = re.search(r"; default: (.*?);", text)
            flags[name] = m.group(1) if m else None
        _flag_cache[path] = flags
    return _flag_cache[path]
