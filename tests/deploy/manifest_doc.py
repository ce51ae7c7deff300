"""deploy/CONFIGURATION.md against the binaries: every flag in its table, with the binary's
default, and its LOCKSTEP_* variable really setting it."""
import os
import re

from manifest_common import ROOT, fail, help_entries, server_flags


def check_doc(bins):
    path = os.path.join(ROOT, "deploy", "CONFIGURATION.md")
    rows = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"\| (coordinator|worker) \| `--(\w+)` \| `(\w+)` \| (.*?) \|", line)
            if m:
                rows[(m.group(1), m.group(2))] = (m.group(3), m.group(4))
    for role in ("coordinator", "worker"):
        binary = bins[f"lockstep-{role}"]
        flags = server_flags(binary)
        documented = {f for r, f in rows if r == role}
        for missing in sorted(set(flags) - documented):
            fail(f"CONFIGURATION.md: {role} flag --{missing} is not in the table")
        for extra in sorted(documented - set(flags)):
            fail(f"CONFIGURATION.md: {role} has no flag --{extra}")
        for flag in sorted(set(flags) & documented):
            env, default = rows[(role, flag)]
            if env != "LOCKSTEP_" + flag.upper():
                fail(f"CONFIGURATION.md: --{flag} is documented as {env}")
            real = flags[flag].strip('"') if flags[flag] else ""
            doc = default.strip("`")
            if real and doc != real:
                fail(f"CONFIGURATION.md: {role} --{flag} default {doc}, the binary says {real}")
            if not real and not doc.startswith("("):
                fail(f"CONFIGURATION.md: {role} --{flag} has no default, the table says {doc}")
            # The variable must really set the flag: --helpfull then shows "currently" (only
            # for a value other than the default: a bool is set to its opposite).
            value = ("7" if re.fullmatch(r"-?\d+", real or "x") else
                     {"false": "true", "true": "false"}.get(real, "probe-value"))
            text = help_entries(binary, dict(os.environ, **{env: value})).get(flag, "")
            m = re.search(r"; currently: (.*?);", text)
            if not m or m.group(1).strip('"') != value:
                fail(f"{role}: {env}={value} does not set --{flag}")
        print(f"# CONFIGURATION.md: {len(documented)} {role} flags match lockstep-{role}")
