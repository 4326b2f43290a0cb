"""`skyrack join`: prepare a rack's bare-metal workers and join them, with Ansible driven by ansible-runner.

One ansible-runner run per rack (`driver`), the control plane's outputs checked against
their contract (`outputs`), files rendered from the shared Jinja2 templates (`render`),
live progress and the closing table (`progress`), and run records under `runs/` (`records`).
"""
