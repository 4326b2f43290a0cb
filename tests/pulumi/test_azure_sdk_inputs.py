"""Every recorded resource input is one pulumi-azure-native's input types accept: names, required, enums."""

from __future__ import annotations

from pulumi_harness import StackRun
from sdk_schema import problems


def test_every_recorded_input_is_known_to_the_sdk(stack: StackRun) -> None:
    azure = [r for r in stack.resources if r.typ.startswith("azure-native:")]
    assert len(azure) > 40
    found = [p for r in azure for p in problems(r.typ, r.name, r.inputs)]
    assert found == []


def test_the_check_catches_a_misspelt_nested_property() -> None:
    """The check itself can fail: the storage account's IP rule with its snake_case name."""
    inputs = {"kind": "StorageV2", "resourceGroupName": "g", "sku": {"name": "Standard_ZRS"},
              "networkRuleSet": {"defaultAction": "Deny", "ipRules": [{"ip_address_or_range": "203.0.113.0/24"}]}}
    found = problems("azure-native:storage:StorageAccount", "backups", inputs)
    assert "StorageAccount backups.networkRuleSet.ipRules[0].ip_address_or_range: no such property" in found[0]
    assert found[1] == ("StorageAccount backups.networkRuleSet.ipRules[0].iPAddressOrRange: "
                        "required by IPRuleArgs, missing")


def test_the_check_catches_a_missing_top_level_input_and_a_bad_enum() -> None:
    found = problems("azure-native:storage:StorageAccount", "backups",
                     {"kind": "StorageV2", "sku": {"name": "Standard_ZRS"}, "networkRuleSet": {"defaultAction": "Block"}})
    assert "StorageAccount backups.resourceGroupName: required by StorageAccountArgs, missing" in found
    assert any(p.startswith("StorageAccount backups.networkRuleSet.defaultAction: 'Block' is not one of") for p in found)
