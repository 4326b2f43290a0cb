#!/usr/bin/python
"""Ansible module: what this host can and cannot do, for the skyrack roles to decide honestly."""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_facts
short_description: Facts the skyrack roles decide on (capabilities, GPUs, data disk)
description:
  - Reads, never changes. Sets C(skyrack_host) with C(cap_sys_time) (may set the clock),
    C(loadable_modules) (the kernel can load modules), C(nvidia_gpus) (NVIDIA PCI devices
    found by lspci or /dev/nvidia*), C(nvidia_evidence), C(virtualization) and
    C(data_mounted) (I(data_dir) is a mount point), C(swaps_active) (entries in /proc/swaps)
    and C(fstab_swaps) (swap lines in /etc/fstab not commented out).
options:
  data_dir:
    description: Where the local data disk is expected to be mounted.
    type: path
    default: /data
author: skyrack
"""

EXAMPLES = r"""
- name: Learn what this host allows
  skyrack.node.host_facts:
    data_dir: /data
"""

RETURN = r"""
ansible_facts:
  description: C(skyrack_host), see the description.
  returned: always
  type: dict
"""

import glob
import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

CAP_SYS_RESOURCE = 24
CAP_SYS_TIME = 25
NVIDIA_VENDOR = "10de"


def capabilities():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapBnd:"):
                return int(line.split()[1], 16)
    return 0


def nvidia_devices():
    evidence = []
    count = 0
    if shutil.which("lspci"):
        out = subprocess.run(["lspci", "-n", "-d", NVIDIA_VENDOR + ":"], capture_output=True, text=True, check=False)
        # "01:00.0 0302: 10de:20b0": class 03xx is a display/3D controller, i.e. a GPU (not an NVSwitch)
        gpus = [ln for ln in out.stdout.splitlines() if len(ln.split()) > 1 and ln.split()[1].startswith("03")]
        count = len(gpus)
        evidence.append(f"lspci: {count} NVIDIA display controller(s)")
    else:
        evidence.append("lspci not installed")
    devs = glob.glob("/dev/nvidia[0-9]*")
    evidence.append(f"/dev/nvidia*: {len(devs)} device(s)")
    return max(count, len(devs)), evidence


def swaps():
    try:
        with open("/proc/swaps") as f:
            active = len(f.read().splitlines()[1:])
    except OSError:
        active = 0
    try:
        with open("/etc/fstab") as f:
            fstab = [ln.split() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    except OSError:
        fstab = []
    return active, sum(1 for f in fstab if len(f) > 2 and f[2] == "swap")


def virtualization():
    if shutil.which("systemd-detect-virt"):
        out = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True, check=False)
        return out.stdout.strip() or "none"
    return "unknown"


def main():
    module = AnsibleModule(argument_spec={"data_dir": {"type": "path", "default": "/data"}}, supports_check_mode=True)
    data_dir = module.params["data_dir"]
    gpus, evidence = nvidia_devices()
    active, fstab = swaps()
    facts = {
        "cap_sys_time": bool(capabilities() >> CAP_SYS_TIME & 1),
        "can_lower_oom_score": bool(capabilities() >> CAP_SYS_RESOURCE & 1),
        "loadable_modules": os.path.exists("/proc/modules"),
        "nvidia_gpus": gpus,
        "nvidia_evidence": evidence,
        "virtualization": virtualization(),
        "data_dir": data_dir,
        "data_mounted": os.path.ismount(data_dir),
        "swaps_active": active,
        "fstab_swaps": fstab,
    }
    module.exit_json(changed=False, ansible_facts={"skyrack_host": facts})


if __name__ == "__main__":
    main()
