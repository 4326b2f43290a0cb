"""Policies: rules an environment must meet beyond schema validity.

`rules` holds the logic as pure functions on addresses and versions (stdlib only), so
that `skyrack check` (on the plan, `check`) and the Pulumi policy pack in `policy/`
(on the Azure resources of a preview, `azure`) apply the very same rules.
This package imports nothing on purpose: the policy pack loads `rules` and `azure`
without pydantic or the rest of skyrack.
"""
