"""The join's strategy: Mitogen's `mitogen_linear` (Ansible's own linear strategy with Mitogen's connections).

Mitogen ships this plugin inside its package (`ansible_mitogen/plugins/strategy`), whose path
differs from one Python environment to the next; this file makes it a plugin of the project,
found through ansible.cfg's `strategy_plugins` wherever the project runs (the controller, an
execution node's worker, an installed wheel). It is linear's `StrategyModule` with Mitogen's
mixin, so `serial` and `max_fail_percentage` keep their meaning (tests/ansible checks it).
"""

import ansible_mitogen.loaders
import ansible_mitogen.strategy

_Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):
    pass
