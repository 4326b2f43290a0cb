"""The operator's snapshot path works with the backup account as the stack makes it: no shared keys.

`skyrack etcd snapshot|snapshots|restore` reach the container with Azure AD (the stack output
backup_container_url and DefaultAzureCredential) and the stack can grant operators the role.
No Azure here: the client is inspected, not used.
"""

from __future__ import annotations

import pytest
from azure.identity import DefaultAzureCredential
from pulumi_harness import DEFAULT_CONFIG, StackRun, run_stack

from skyrack import plan as planmod
from skyrack.errors import InputError
from skyrack.etcd import backup
from support import CONFIGS


def test_the_account_takes_no_shared_keys(dev: StackRun) -> None:
    account = dev.of_type("storage:StorageAccount")[0].plain
    assert account["allowSharedKeyAccess"] is False and account["defaultToOAuthAuthentication"] is True


def test_operators_use_azure_ad_with_the_stacks_container_url(monkeypatch, dev: StackRun) -> None:
    url = dev.outputs["backup_container_url"]
    monkeypatch.delenv(backup.CONN_ENV, raising=False)
    monkeypatch.setenv(backup.URL_ENV, url)
    c = backup.container(planmod.make(CONFIGS / "dev.yaml"))
    assert c.url == url and c.container_name == "etcd-snapshots"
    assert isinstance(c.credential, DefaultAzureCredential)  # a bearer token, never an account key


def test_without_access_the_error_says_what_to_set(monkeypatch) -> None:
    monkeypatch.delenv(backup.CONN_ENV, raising=False)
    monkeypatch.delenv(backup.URL_ENV, raising=False)
    with pytest.raises(InputError, match="SKYRACK_BACKUP_CONTAINER_URL to the stack output backup_container_url"):
        backup.container(planmod.make(CONFIGS / "dev.yaml"))


def test_the_stack_grants_listed_operators_the_blob_role() -> None:
    operator = "33333333-3333-3333-3333-333333333333"
    run = run_stack("dev", config={**DEFAULT_CONFIG, "skyrack:backupOperators": f'["{operator}"]'})
    grants = [r.plain for r in run.of_type("authorization:RoleAssignment") if r.plain["principalId"] == operator]
    assert len(grants) == 1 and grants[0]["principalType"] == "User"
    assert grants[0]["scope"].endswith("/BlobContainer/etcd-snapshots")
    assert grants[0]["roleDefinitionId"].endswith("ba92f5b4-2d11-453d-a403-e96b0029c9fe")  # Blob Data Contributor
