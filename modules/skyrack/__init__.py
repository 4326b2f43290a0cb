"""skyrack: hybrid Kubernetes clusters for deep-learning research.

Azure control plane (Pulumi), on-prem GPU racks (Ansible), one environment file.
The core (config, ipam, sizing, plan, inventory) imports neither Pulumi nor Ansible.
"""

__version__ = "0.1.0"
