"""Pulumi ComponentResources that build an environment's Azure side from its plan.

One module per concern: `network` (VNet, subnets, NSGs, NAT, private DNS), `hybrid`
(VPN to on-prem), `pki` (keys and certificates kept in state), `vm` (a control-plane
VM), `etcd`, `apiservers` (with the internal load balancer), `pools` (scale sets with
pod addresses), `autoscaler` (cluster-autoscaler's managed identity and its roles), `vault`
(Key Vault) and `backups` (etcd snapshot storage). `rules` holds the network security rules as
plain data, `rbac` the role-assignment helper. The program in `stacks/` composes them.
"""
