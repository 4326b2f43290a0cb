"""The environment file: schema, loading and validation.

`configs/<env>.yaml` is the single source of truth for one environment. `load` turns it into
a validated, immutable `Environment` or raises `InputError` listing *every* problem as
``file: path.to.field: what is wrong``. Nothing here imports Pulumi or Ansible.

* `schema`: the models, field by field (and the limits on one file);
* `yaml_file`: reading the YAML (size, alias expansion, duplicate keys);
* `validate`: `load`, and pydantic's errors as problems;
* `semantics`: the rules that span fields.

The names other modules use are re-exported here, so `from skyrack.config import X` and
`config.X` keep working; this is the only place that re-exports.
"""

from ..errors import InputError
from .schema import (
    DEFAULT_TEAM_PRIORITY_CLASSES,
    MAX_FILE_BYTES,
    MAX_NODES,
    MAX_PROBLEMS,
    MAX_YAML_NODES,
    ApiServers,
    Autoscaler,
    Azure,
    Backups,
    Balloon,
    CloudPool,
    ClusterLayer,
    ControlPlane,
    Environment,
    Etcd,
    Gpu,
    GpuHealth,
    Kubernetes,
    Lab,
    Mirrors,
    Node,
    NodeRange,
    OnPrem,
    Rack,
    Team,
    TeamLayer,
    Versions,
    Vpn,
    is_private,
    name_pattern,
    special_range,
)
from .semantics import file_name_problem, semantic_problems
from .validate import load
from .yaml_file import construct_unique_mapping, read_yaml, yaml_problem

__all__ = [
    "DEFAULT_TEAM_PRIORITY_CLASSES", "MAX_FILE_BYTES", "MAX_NODES", "MAX_PROBLEMS", "MAX_YAML_NODES", "ApiServers", "Autoscaler", "Azure",
    "Backups", "Balloon", "CloudPool", "ClusterLayer", "ControlPlane", "Environment", "Etcd", "Gpu",
    "GpuHealth", "InputError", "Kubernetes", "Lab", "Mirrors", "Node", "NodeRange", "OnPrem", "Rack", "Team",
    "TeamLayer", "Versions", "Vpn", "construct_unique_mapping", "file_name_problem", "is_private", "load",
    "name_pattern", "read_yaml", "semantic_problems", "special_range", "yaml_problem",
]
