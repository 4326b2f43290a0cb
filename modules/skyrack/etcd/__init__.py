"""Operating an environment's etcd clusters: status, snapshots to Blob Storage, restore, member replacement.

`client` talks to etcd's v3 JSON gateway over mutual TLS (no gRPC stack needed),
`backup` streams snapshots to the environment's Blob container (Azurite in the lab),
`remote` runs the steps that must happen on a member (over SSH, host keys checked),
`ops` composes them into the procedures `skyrack etcd ...` runs (see docs/etcd.md).
"""
