"""The cluster layer: Kubernetes objects on top of skyrack's control plane, via pulumi-kubernetes.

Each concern is one module with a pure ``manifests(...)`` function (plain dicts, testable and
schema-validated without Pulumi) and a thin ComponentResource that creates them:

- ``bootstrap``: what ``kubeadm init`` would have created and ``kubeadm join`` relies on
- ``batch``: priority classes, team namespaces with quotas, capacity balloons (gang scheduling itself is
  kube-scheduler's own: ``skyrack.scheduler``)
- ``gpu``: NVIDIA device plugin, DCGM exporter, a GPU health check that taints bad nodes
- ``monitoring``: Prometheus scraping nodes, GPUs and the control plane
- ``autoscaler``: cluster-autoscaler for the Azure scale sets, bounded scale-down

``layer.ClusterLayer`` composes them; ``stacks/cluster`` is the Pulumi program.
"""
