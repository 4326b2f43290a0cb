"""The local lab: every host of `configs/lab.yaml` as a systemd-nspawn container on this machine.

`up` builds (once, cached) a Debian base image, starts one booted container per
control-plane member and rack node on a private bridge, runs the apt proxy the nodes
install packages through, and writes the SSH key and known_hosts Ansible uses. `down`
removes everything `up` made. See docs/lab.md.
"""
