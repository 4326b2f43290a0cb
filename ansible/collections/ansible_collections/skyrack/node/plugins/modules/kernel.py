#!/usr/bin/python
"""Ansible module: kernel modules and sysctls, each reported as applied or skipped with a reason."""

from __future__ import annotations

DOCUMENTATION = r"""
module: kernel
short_description: Load kernel modules and apply sysctls, reporting what cannot apply here
description:
  - For each module, C(present) when the kernel already has it (built in or loaded),
    C(applied) when it was loaded now, C(skipped) with a reason when it cannot be
    (no loadable-module support). Loadable ones are listed in I(modules_file).
  - For each sysctl, C(applied) when it was set now, C(unchanged) when it already had the
    value, C(skipped) with a reason when it does not exist in this network namespace or is
    read-only here (a container). Keys that apply are persisted in I(sysctl_file); skipped
    ones are written there as comments with their reason, so the file tells the truth too.
  - Nothing is silently ignored and nothing is reported applied that is not in effect.
options:
  modules:
    description: Kernel modules the host needs.
    type: list
    elements: str
    default: []
  modules_file:
    description: modules-load.d file for modules that had to be loaded.
    type: path
    default: /etc/modules-load.d/skyrack.conf
  sysctls:
    description: Sysctl keys (dotted) and values.
    type: dict
    default: {}
  sysctl_file:
    description: sysctl.d file that persists the keys that apply.
    type: path
    default: /etc/sysctl.d/90-skyrack.conf
author: skyrack
"""

EXAMPLES = r"""
- name: ARP cache for large clusters
  skyrack.node.kernel:
    modules: [br_netfilter]
    sysctls:
      net.ipv4.neigh.default.gc_thresh3: 100000
"""

RETURN = r"""
modules:
  description: Per module, C(status) and C(reason).
  returned: always
  type: dict
sysctls:
  description: Per key, C(status), C(value), C(reason).
  returned: always
  type: dict
report:
  description: Both of the above as a list of C(item), C(status), C(reason).
  returned: always
  type: list
"""

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule


def proc_path(key):
    return "/proc/sys/" + key.replace(".", "/")


def normalise(value):
    return " ".join(str(value).split())


# What a module provides, visible even when it is built in without parameters (no /sys/module entry).
PROVIDES = {
    "overlay": lambda: "overlay" in read("/proc/filesystems").split(),
    "br_netfilter": lambda: os.path.isdir("/proc/sys/net/bridge"),
}


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def check_module(name):
    """None when the module must be loaded; else its status and why."""
    if name in read("/proc/modules").split():
        return {"status": "present", "reason": "already loaded"}
    if os.path.isdir(f"/sys/module/{name}") or PROVIDES.get(name, lambda: False)():
        return {"status": "present", "reason": "built into the kernel"}
    if not os.path.exists("/proc/modules"):
        return {"status": "skipped", "reason": "the kernel cannot load modules (no /proc/modules) and lacks this one"}
    return None


def check_sysctl(key):
    path = proc_path(key)
    if not os.path.exists(path):
        if key.startswith("net."):
            return "does not exist in this network namespace (per-namespace key missing or host-only)"
        return "does not exist in this kernel"
    if not os.access(path, os.W_OK):
        return "read-only here (/proc/sys is mounted read-only in this container; the host kernel owns it)"
    return None


def render_file(results, wanted):
    lines = ["# Written by skyrack (role os_baseline). Keys that cannot apply on this host are comments."]
    for key in sorted(wanted):
        r = results[key]
        if r["status"] == "skipped":
            lines.append(f"# {key} = {normalise(wanted[key])}  # skipped: {r['reason']}")
        else:
            lines.append(f"{key} = {normalise(wanted[key])}")
    return "\n".join(lines) + "\n"


def write_if_changed(path, text, check):
    try:
        with open(path) as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    if not check:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return True


def main():
    module = AnsibleModule(
        argument_spec={
            "modules": {"type": "list", "elements": "str", "default": []},
            "modules_file": {"type": "path", "default": "/etc/modules-load.d/skyrack.conf"},
            "sysctls": {"type": "dict", "default": {}},
            "sysctl_file": {"type": "path", "default": "/etc/sysctl.d/90-skyrack.conf"},
        },
        supports_check_mode=True,
    )
    check = module.check_mode
    changed = False
    mods = {}
    loaded = []
    for name in module.params["modules"]:
        res = check_module(name)
        if res is None:
            loaded.append(name)
            if check:
                res = {"status": "applied", "reason": "would be loaded (check mode)"}
            else:
                proc = subprocess.run(["modprobe", name], capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    module.fail_json(msg=f"modprobe {name} failed: {proc.stderr.strip()}", modules=mods)
                res = {"status": "applied", "reason": "loaded with modprobe"}
            changed = True
        mods[name] = res
    if loaded:
        text = "# Written by skyrack: modules the kernel has to load at boot.\n" + "\n".join(loaded) + "\n"
        changed |= write_if_changed(module.params["modules_file"], text, check)

    wanted = module.params["sysctls"]
    sysctls = {}
    for key, value in sorted(wanted.items()):
        want = normalise(value)
        reason = check_sysctl(key)
        if reason:
            sysctls[key] = {"status": "skipped", "value": want, "reason": reason}
            continue
        path = proc_path(key)
        with open(path) as f:
            have = normalise(f.read())
        if have == want:
            sysctls[key] = {"status": "unchanged", "value": want, "reason": ""}
            continue
        if not check:
            try:
                with open(path, "w") as f:
                    f.write(want)
            except OSError as exc:
                module.fail_json(msg=f"cannot set {key} = {want}: {exc}", sysctls=sysctls)
            with open(path) as f:
                now = normalise(f.read())
            if now != want:
                module.fail_json(msg=f"{key}: wrote {want} but the kernel reports {now}", sysctls=sysctls)
        sysctls[key] = {"status": "applied", "value": want, "reason": f"was {have}"}
        changed = True
    changed |= write_if_changed(module.params["sysctl_file"], render_file(sysctls, wanted), check)
    report = [{"item": f"kernel module {k}", "status": v["status"], "reason": v["reason"]} for k, v in mods.items()]
    report += [{"item": f"sysctl {k}={v['value']}", "status": v["status"], "reason": v["reason"]}
               for k, v in sysctls.items()]
    module.exit_json(changed=changed, modules=mods, sysctls=sysctls, report=report)


if __name__ == "__main__":
    main()
